//! The PyTorch peers (`bench_single.py`, `bench_ddp.py`, `bench_pipe.py` of the peers folder):
//! found, checked for torch, run one row at a time, their `RESULT {json}` line read back.

use crate::CommandError;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::child::output_within;
use super::configs::{Peer, Workload};
use crate::error::{Error, Result};

/// How to get a Python that can run the peers.
pub const HOW_TO_GET_TORCH: &str = "python3 -m venv /tmp/peer-venv && \
     /tmp/peer-venv/bin/pip install torch numpy safetensors torchgpipe transformers";

/// The longest one peer run may take before it is stopped (a stuck gloo rendezvous).
const PEER_TIMEOUT: Duration = Duration::from_secs(900);

/// The longest the probe of the Python (`import torch, numpy`) may take: a cold import of torch
/// from a slow disk takes seconds, not minutes; a program that never answers is stopped.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// A Python that imports torch, and the folder of the peer scripts.
#[derive(Clone, Debug)]
pub struct Peers {
    python: PathBuf,
    dir: PathBuf,
    /// `torch.__version__`.
    pub torch: String,
}

/// What one peer run measured (samples/s over its timed steps).
#[derive(Clone, Copy, Debug)]
pub struct PeerResult {
    /// Median over its steps.
    pub median: f64,
    /// Slowest step.
    pub min: f64,
    /// Fastest step.
    pub max: f64,
    /// Cores used by processes other than the peer's ranks meanwhile (its own `foreign_cores`).
    pub others: Option<f64>,
}

impl Peers {
    /// Checks that `python` imports torch and that the peer scripts are in `dir` (or, without
    /// one, in `shared/peers` above the running program or this source tree).
    ///
    /// # Errors
    /// [`CommandError::PeersNoScripts`](crate::CommandError::PeersNoScripts), [`CommandError::PeersNotFound`](crate::CommandError::PeersNotFound), [`CommandError::PeersNoTorch`](crate::CommandError::PeersNoTorch) or
    /// [`CommandError::PeersNoAnswer`](crate::CommandError::PeersNoAnswer): the sentence to print instead of the PyTorch column.
    pub fn find(python: &Path, dir: Option<&Path>) -> Result<Self> {
        Self::find_within(python, dir, PROBE_TIMEOUT)
    }

    /// [`Peers::find`], with the probe of `python` stopped after `limit`.
    fn find_within(python: &Path, dir: Option<&Path>, limit: Duration) -> Result<Self> {
        let dir = match dir {
            Some(dir) if dir.join("common.py").is_file() => dir.to_path_buf(),
            Some(dir) => {
                return Err(Error::Command(CommandError::PeersNoScripts {
                    dir: dir.to_path_buf(),
                }));
            }
            None => default_dir().ok_or(Error::Command(CommandError::PeersNotFound))?,
        };
        let mut probe = Command::new(python);
        probe.args(["-c", "import torch, numpy; print(torch.__version__)"]);
        match output_within(&mut probe, limit) {
            Ok(None) => Err(Error::Command(CommandError::PeersNoAnswer {
                python: python.to_path_buf(),
                seconds: limit.as_secs_f64(),
            })),
            Ok(Some(out)) if out.status.success() => Ok(Self {
                python: python.to_path_buf(),
                dir,
                torch: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            }),
            Ok(Some(_)) | Err(_) => Err(Error::Command(CommandError::PeersNoTorch {
                python: python.to_path_buf(),
            })),
        }
    }

    /// The peer scripts' folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where `script` is: in the peers folder (the shared harness's scripts), else in this
    /// repository's `scripts/peers` (pipetrain's own peers, e.g. `bench_pipe_schedules.py`),
    /// found above the running program or this source tree, never the current directory. It
    /// runs from the peers folder either way, whose `common.py` it imports.
    pub fn script(&self, script: &str) -> PathBuf {
        let shared = self.dir.join(script);
        if shared.is_file() {
            return shared;
        }
        let starts = [
            std::env::current_exe().ok(),
            Some(PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
        ];
        starts
            .into_iter()
            .flatten()
            .find_map(|start| {
                start
                    .ancestors()
                    .map(|a| a.join("scripts").join("peers").join(script))
                    .find(|p| p.is_file())
            })
            .unwrap_or(shared)
    }

    /// Runs `peer` on `workload`: `--width --layers --batch --steps --warmup` are the workload's.
    ///
    /// # Errors
    /// Why the peer gave no result (it did not start, printed no `RESULT` line, or ran past
    /// 15 minutes): the table's cell says so.
    pub fn run(&self, peer: &Peer, w: &Workload) -> std::result::Result<PeerResult, String> {
        let mut command = Command::new(&self.python);
        command
            .arg(self.script(peer.script))
            .args(&peer.args)
            .args(["--width", &w.width.to_string()])
            .args(["--layers", &w.hidden.to_string()])
            .args(["--batch", &w.batch.to_string()])
            .args(["--steps", &w.steps.to_string()])
            .args(["--warmup", &w.warmup.to_string()])
            .current_dir(&self.dir);
        let out = output_within(&mut command, PEER_TIMEOUT)
            .map_err(|e| format!("{} {}: {e}", self.python.display(), peer.script))?
            .ok_or_else(|| {
                format!(
                    "{} did not finish in {} s; stopped",
                    peer.script,
                    PEER_TIMEOUT.as_secs()
                )
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        parse_result(&stdout).ok_or_else(|| {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            format!(
                "{} {} printed no RESULT line ({}): {}",
                peer.script,
                peer.args.join(" "),
                out.status,
                last.unwrap_or("no error output")
            )
        })
    }
}

/// The `RESULT {json}` line of a peer's output.
fn parse_result(stdout: &str) -> Option<PeerResult> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))?;
    let json: serde_json::Value = serde_json::from_str(line).ok()?;
    let number = |key: &str| json.get(key).and_then(serde_json::Value::as_f64);
    Some(PeerResult {
        median: number("tput_median")?,
        min: number("tput_min")?,
        max: number("tput_max")?,
        others: number("foreign_cores"),
    })
}

/// `shared/peers` in the nearest folder above the binary or this source tree that has one.
fn default_dir() -> Option<PathBuf> {
    // Never the current directory's ancestors: python would run whatever `shared/peers` a
    // directory the command happens to run in holds (issue 27).
    let starts = [
        std::env::current_exe().ok(),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
    ];
    starts.into_iter().flatten().find_map(|start| {
        start
            .ancestors()
            .map(|a| a.join("shared").join("peers"))
            .find(|d| d.join("common.py").is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_of_the_shared_folder_runs_from_it_and_pipetrains_own_from_scripts_peers() {
        let shared = std::env::temp_dir().join(format!("pipetrain-peers-{}", std::process::id()));
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::write(shared.join("bench_pipe.py"), "").unwrap();
        let peers = Peers {
            python: PathBuf::from("python3"),
            dir: shared.clone(),
            torch: String::new(),
        };
        assert_eq!(peers.script("bench_pipe.py"), shared.join("bench_pipe.py"));
        let own = peers.script("bench_pipe_schedules.py");
        assert!(
            own.ends_with("scripts/peers/bench_pipe_schedules.py") && own.is_file(),
            "{}",
            own.display()
        );
        // A run hands python that path: this stand-in answers only for a script that exists.
        use std::os::unix::fs::PermissionsExt;
        let python = shared.join("python");
        std::fs::write(
            &python,
            "#!/bin/sh
[ -f \"$1\" ] && echo 'RESULT {\"tput_median\": 2, \"tput_min\": 1, \"tput_max\": 3}'\n",
        )
        .unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let peers = Peers { python, ..peers };
        let workload = crate::commands::bench::BenchSettings::default().workload();
        let ran = peers.run(
            &super::super::configs::peer("bench_pipe_schedules.py", "", &[]),
            &workload,
        );
        assert_eq!(ran.map(|r| r.median), Ok(2.0));
        std::fs::remove_dir_all(&shared).unwrap();
    }

    #[test]
    fn reads_the_result_line() {
        let out = "warming up\nRESULT {\"tput_median\": 1609.5, \"tput_min\": 1500, \
                   \"tput_max\": 1700.25, \"foreign_cores\": 0.5}\nsingle ...\n";
        let r = parse_result(out).expect("a result");
        assert_eq!(
            (r.median, r.min, r.max, r.others),
            (1609.5, 1500.0, 1700.25, Some(0.5))
        );
        assert!(parse_result("no result\n").is_none());
        assert!(parse_result("RESULT {\"tput_min\": 1}\n").is_none());
    }

    #[test]
    fn a_python_without_torch_gets_the_how_to() {
        let dir = tempfile_dir();
        std::fs::write(dir.join("common.py"), "").unwrap();
        let err = Peers::find(Path::new("/bin/false"), Some(&dir)).unwrap_err();
        assert!(err.to_string().contains(HOW_TO_GET_TORCH), "{err}");
        let err = Peers::find(Path::new("/bin/false"), Some(&dir.join("nowhere"))).unwrap_err();
        assert!(
            matches!(&err, Error::Command(CommandError::PeersNoScripts { dir: d }) if d.ends_with("nowhere")),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_python_that_never_answers_is_stopped_and_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("common.py"), "").unwrap();
        let python = dir.path().join("python");
        std::fs::write(&python, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err =
            Peers::find_within(&python, Some(dir.path()), Duration::from_millis(200)).unwrap_err();
        assert!(
            matches!(&err, Error::Command(CommandError::PeersNoAnswer { python: p, .. }) if p == &python),
            "{err}"
        );
        assert!(err.to_string().contains("did not answer"), "{err}");
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pipetrain-peers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_scripts_are_never_taken_from_the_current_directory() {
        let dir = tempfile::tempdir().unwrap();
        let planted = dir.path().join("shared").join("peers");
        std::fs::create_dir_all(&planted).unwrap();
        std::fs::write(planted.join("common.py"), "").unwrap();
        let back = std::env::current_dir().unwrap();
        std::env::set_current_dir(dir.path()).unwrap();
        let found = default_dir();
        std::env::set_current_dir(back).unwrap();
        assert_ne!(found, Some(planted));
    }
}
