//! A graceful stop (issue 12, item 6): SIGINT, SIGTERM, SIGHUP (issue 38) or SIGUSR1 (issue 47)
//! mid-training finishes the step, saves the final checkpoint, flushes metrics and the trace, says
//! what it saved and exits 130 / 143 / 129 / 138.
//! The checkpoint resumes bit for bit and the trace parses. `bench`, `tune` and `plan`, which
//! have no step to finish, stop at once on each of the three signals (issue 48 item 5), held
//! open by their own test hook (`PIPETRAIN_TEST_HOLD_COMMAND`) until the signal lands.
//!
//! No test here depends on the host's speed: the test hook `PIPETRAIN_TEST_HOLD_STEP` holds a
//! step open before it computes, the run says when a signal reached it, and the test ends the
//! hold when it wants (or never, for the second SIGINT). The only clock is a guard against a
//! hang ([`HANG`]), far above any step.

use crate::common;
use common::{scratch, success, tensors};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// The tiny model every run here trains (Adam: optimizer state must resume too), after
/// `common::TINY` (whose `--steps 1` the runs override).
const MODEL: [&str; 4] = ["--micro-batches", "2", "--optimizer", "adam"];

/// How long a run may take to say what it was asked to, or to exit: a guard against a hang,
/// far above any host's step (the steps here are held open by the test hook, not timed).
const HANG: Duration = Duration::from_secs(120);

/// A `pipetrain train` run whose step `held` is held open by the test hook
/// (`PIPETRAIN_TEST_HOLD_STEP`) until [`Held::release`]: a signal sent while it is held lands
/// inside that step on any host, fast or slow.
struct Held {
    child: Child,
    /// Stderr, line by line, as the run writes it.
    lines: Receiver<String>,
    /// Every stderr line read so far.
    stderr: String,
    /// The file whose creation ends the hold.
    release: PathBuf,
}

impl Held {
    /// Starts `pipetrain train` for a practically endless number of steps with `extra`,
    /// holding step `held`, and waits until the run holds it.
    fn start(dir: &Path, held: u64, extra: &[&str]) -> Held {
        let release = dir.join("release");
        let mut child = Command::new(env!("CARGO_BIN_EXE_pipetrain"))
            .arg("train")
            .args(common::TINY)
            .args(MODEL)
            .args(["--stages", "2", "--steps", "1000000"])
            .args(extra)
            .env(
                "PIPETRAIN_TEST_HOLD_STEP",
                format!("{held}:{}", release.display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Keep draining stdout so the child never blocks on a full pipe.
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || stdout.lines().for_each(drop));
        let (send, lines) = channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut run = Held {
            child,
            lines,
            stderr: String::new(),
            release,
        };
        run.wait_for(&format!("test hook: step {held} held until"));
        run
    }

    /// Reads stderr until a line starts with `start`.
    fn wait_for(&mut self, start: &str) {
        loop {
            match self.lines.recv_timeout(HANG) {
                Ok(line) => {
                    self.stderr.push_str(&line);
                    self.stderr.push('\n');
                    if line.starts_with(start) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!(
                        "no `{start}` line within {HANG:?}; stderr:\n{}",
                        self.stderr
                    );
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the run ended before `{start}`; stderr:\n{}", self.stderr)
                }
            }
        }
    }

    /// Sends `signal` (`INT`, `TERM`, `HUP`, `USR1`) and waits until the held step has taken it.
    fn signal(&mut self, signal: &str) {
        self.send(signal);
        self.wait_for(&format!("test hook: SIG{signal} arrived during step"));
    }

    /// Sends `signal` without waiting for anything.
    fn send(&mut self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Ends the hold: the step goes on.
    fn release(&self) {
        std::fs::write(&self.release, b"go").unwrap();
    }

    /// Waits for the run to exit; its exit code and whole stderr.
    fn exit(mut self) -> (i32, String) {
        loop {
            match self.lines.recv_timeout(HANG) {
                Ok(line) => {
                    self.stderr.push_str(&line);
                    self.stderr.push('\n');
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!("no exit within {HANG:?}; stderr:\n{}", self.stderr);
                }
            }
        }
        let status = self.child.wait().unwrap();
        (
            status.code().expect("an exit code, not a signal"),
            self.stderr,
        )
    }
}

/// The step of `saved: checkpoint <path> (step N)` in `stderr`.
fn saved_step(stderr: &str, path: &Path) -> u64 {
    let marker = format!("checkpoint {} (step ", path.display());
    let (_, rest) = stderr
        .split_once(&marker)
        .unwrap_or_else(|| panic!("no `{marker}` in {stderr}"));
    rest.split(')').next().unwrap().parse().unwrap()
}

#[test]
fn sigint_saves_a_checkpoint_that_resumes_bit_for_bit_and_a_trace_that_parses() {
    let tmp = scratch("sigint");
    let (ck, trace) = (tmp.path().join("ck.st"), tmp.path().join("trace.json"));
    let mut run = Held::start(
        tmp.path(),
        3,
        &[
            "--checkpoint",
            ck.to_str().unwrap(),
            "--profile",
            trace.to_str().unwrap(),
        ],
    );
    run.signal("INT");
    run.release();
    let (code, stderr) = run.exit();
    assert_eq!(code, 130, "{stderr}");
    assert!(stderr.contains("SIGINT: stopped after step 3 "), "{stderr}");
    let step = saved_step(&stderr, &ck);
    assert_eq!(step, 3, "the held step finishes and is saved: {stderr}");
    let saved = pipetrain::Checkpoint::read(&ck).expect("the reported checkpoint loads");
    assert_eq!(saved.progress().step, step);
    let events: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).expect("JSON trace");
    assert!(events.to_string().contains("\"ph\":\"X\""), "action slices");
    let hidden: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        hidden.is_empty(),
        "no raw trace or temp file is left: {hidden:?}"
    );
    // Two more steps from the checkpoint end exactly where an uninterrupted run ends.
    let total = (step + 2).to_string();
    let ck_s = ck.to_str().unwrap();
    let resume = [
        &["train"][..],
        &common::TINY,
        &MODEL,
        &[
            "--stages",
            "1",
            "--steps",
            &total,
            "--resume",
            ck_s,
            "--checkpoint",
            ck_s,
        ],
    ]
    .concat();
    success(&resume);
    let whole = tmp.path().join("whole.st");
    let straight = [
        &["train"][..],
        &common::TINY,
        &MODEL,
        &[
            "--stages",
            "2",
            "--steps",
            &total,
            "--checkpoint",
            whole.to_str().unwrap(),
        ],
    ]
    .concat();
    success(&straight);
    assert_eq!(tensors(&ck), tensors(&whole));
}

#[test]
fn sigterm_exits_143_with_the_metrics_flushed() {
    let tmp = scratch("sigterm");
    let metrics = tmp.path().join("run.csv");
    // Issue 47, class 3: the plot was not written on a graceful stop, while the checkpoint,
    // the metrics and the trace were.
    let plot = tmp.path().join("loss.png");
    let outputs = [
        "--metrics",
        metrics.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ];
    let mut run = Held::start(tmp.path(), 2, &outputs);
    run.signal("TERM");
    run.release();
    let (code, stderr) = run.exit();
    assert_eq!(code, 143, "{stderr}");
    assert!(stderr.contains("stopped after step 2 "), "{stderr}");
    assert!(
        stderr.contains("SIGTERM: stopped after step") && stderr.contains("metrics"),
        "{stderr}"
    );
    let rows = std::fs::read_to_string(&metrics).unwrap();
    let step: usize = stderr
        .split("stopped after step ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        rows.lines().count(),
        step + 1,
        "a header and a row per step: {rows}"
    );
    assert!(
        stderr.contains(&format!("plot {}", plot.display())),
        "{stderr}"
    );
    assert!(plot.is_file(), "the plot of the steps done: {stderr}");
}

#[test]
fn sighup_stops_like_sigterm_with_the_checkpoint_saved() {
    // Issue 38: a closed terminal's SIGHUP ended the run at once, with nothing saved.
    let tmp = scratch("sighup");
    let ck = tmp.path().join("ck.st");
    let mut run = Held::start(tmp.path(), 2, &["--checkpoint", ck.to_str().unwrap()]);
    run.signal("HUP");
    run.release();
    let (code, stderr) = run.exit();
    assert_eq!(code, 129, "{stderr}");
    assert!(stderr.contains("SIGHUP: stopped after step 2 "), "{stderr}");
    assert_eq!(saved_step(&stderr, &ck), 2);
    let saved = pipetrain::Checkpoint::read(&ck).expect("the reported checkpoint loads");
    assert_eq!(saved.progress().step, 2);
}

#[test]
fn sigusr1_stops_like_sigterm_and_exits_138() {
    // Issue 47: SIGUSR1 is the signal Open MPI's mpirun forwards to every rank without killing
    // it (tests/mpi.rs stops a job with it); one process stops on it as on SIGTERM. Before, it
    // killed the run with nothing saved.
    let tmp = scratch("sigusr1");
    let ck = tmp.path().join("ck.st");
    let mut run = Held::start(tmp.path(), 2, &["--checkpoint", ck.to_str().unwrap()]);
    run.signal("USR1");
    run.release();
    let (code, stderr) = run.exit();
    assert_eq!(code, 138, "{stderr}");
    assert!(
        stderr.contains("SIGUSR1: stopped after step 2 "),
        "{stderr}"
    );
    assert_eq!(saved_step(&stderr, &ck), 2);
}

#[test]
fn a_run_whose_stderr_cannot_be_written_still_trains_and_saves() {
    // Issue 38: after a SIGHUP the terminal is gone and every line to stderr fails; a line that
    // panicked there would lose the checkpoint the stop is for. /dev/full fails every write, and
    // `--threads 1000` makes the run write a warning.
    let tmp = scratch("stderr-full");
    let ck = tmp.path().join("ck.st");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .arg("train")
        .args(common::TINY)
        .args(["--threads", "1000", "--checkpoint", ck.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(full)
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    pipetrain::Checkpoint::read(&ck).expect("the checkpoint was written");
}

#[test]
fn a_second_sigint_exits_at_once_without_finishing_the_step() {
    // Step 2 is held open and never released: only an exit that does not wait for the step
    // ends this run, on any host.
    let tmp = scratch("sigint-twice");
    let ck = tmp.path().join("ck.st");
    let mut run = Held::start(tmp.path(), 2, &["--checkpoint", ck.to_str().unwrap()]);
    run.signal("INT");
    run.send("INT");
    let (code, stderr) = run.exit();
    assert_eq!(code, 130, "{stderr}");
    assert!(!stderr.contains("stopped after step"), "{stderr}");
    assert!(!ck.exists(), "no checkpoint was written");
}

#[test]
fn a_signal_before_the_first_step_completes_exits_at_once() {
    // Issue 27: a signal while the model was still being built, or during a first step of
    // minutes, waited for that step. Nothing is saved yet, so it exits at once now. Step 1 is
    // held open and never released: only an exit that does not wait for it ends this run.
    let tmp = scratch("sigterm-first");
    let ck = tmp.path().join("ck.st");
    let mut run = Held::start(tmp.path(), 1, &["--checkpoint", ck.to_str().unwrap()]);
    run.send("TERM");
    let (code, stderr) = run.exit();
    assert_eq!(code, 143, "{stderr}");
    assert!(!stderr.contains("stopped after step"), "{stderr}");
    assert!(!ck.exists(), "no step completed, nothing written");
}

#[test]
fn bench_stops_on_sigint_even_when_it_was_inherited_as_ignored() {
    // Issue 38: bench ran on after SIGINT (a background job of a script inherits SIGINT
    // ignored, and bench left the signal to its default). It stops at once now, says so and
    // exits 130, with nothing of --out written.
    let tmp = scratch("bench-sigint");
    let out = tmp.path().join("bench.md");
    let unwritten = format!("--out {} not written", out.display());
    let args = ["bench", "--steps", "100000", "--reps", "1", "--width", "16"];
    let args = [
        &args[..],
        &["--hidden-layers", "2", "--out", out.to_str().unwrap()],
    ]
    .concat();
    stops_at_once(&args, "INT", 130, &unwritten, Some(&out), true);
}

/// `pipetrain <args>` (`command` its subcommand) held by the test hook
/// `PIPETRAIN_TEST_HOLD_COMMAND` once its signal handlers are installed, then sent `signal`
/// (`INT`, `TERM`, `HUP`): it must exit `code` at once, saying `SIG{signal}: {command} stopped;
/// {unwritten}`, with `out` (if any) not written; with `inherited_ignored`, also when the signal
/// arrives ignored. A command that installs no handler is killed by the signal (no exit code)
/// or, where the signal is ignored, holds until [`HANG`].
fn stops_at_once(
    args: &[&str],
    signal: &str,
    code: i32,
    unwritten: &str,
    out: Option<&Path>,
    inherited_ignored: bool,
) {
    let command = args[0];
    let tmp = scratch(&format!("{command}-sig{signal}"));
    let release = tmp.path().join("release");
    // With `inherited_ignored`, through a shell that ignores the signal and then execs the
    // binary: the signal arrives ignored, as in a script's background job.
    let trap = format!("trap '' {signal}; exec \"$0\" \"$@\"");
    let mut run = match inherited_ignored {
        true => {
            let mut c = Command::new("sh");
            c.args(["-c", &trap]).arg(env!("CARGO_BIN_EXE_pipetrain"));
            c
        }
        false => Command::new(env!("CARGO_BIN_EXE_pipetrain")),
    };
    let mut child = run
        .args(args)
        .env("PIPETRAIN_TEST_HOLD_COMMAND", &release)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (send, lines) = channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = send.send(line);
        }
    });
    let mut said = String::new();
    let held = format!("test hook: {command} held until");
    let mut sent = false;
    loop {
        match lines.recv_timeout(HANG) {
            Ok(line) => {
                said = format!("{said}\n{line}");
                if !sent && line.starts_with(&held) {
                    let kill = Command::new("kill")
                        .args([&format!("-{signal}"), &child.id().to_string()])
                        .status()
                        .unwrap();
                    assert!(kill.success());
                    sent = true;
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("pipetrain {args:?} ran on for {HANG:?} (SIG{signal} sent: {sent}):{said}");
            }
        }
    }
    let status = child.wait().unwrap();
    assert!(sent, "pipetrain {args:?} ended before the hold:{said}");
    assert_eq!(
        status.code(),
        Some(code),
        "pipetrain {args:?} under SIG{signal} ({status}: no code is a death by the signal, \
         no handler installed):{said}"
    );
    assert!(
        said.contains(&format!("SIG{signal}: {command} stopped; {unwritten}")),
        "{said}"
    );
    if let Some(out) = out {
        assert!(!out.exists(), "{} written", out.display());
    }
}

/// Issue 48 item 5: `plan` and `tune` stop on SIGINT and SIGTERM with their exit codes, `tune`'s
/// `--apply` unwritten (removing `exit_on_signal` from either fails here).
#[test]
fn plan_and_tune_stop_at_once_on_sigint_and_sigterm() {
    let tmp = scratch("plan-tune-signals");
    let apply = tmp.path().join("apply.toml");
    let cache = tmp.path().join("cache");
    let apply_flag = format!("--apply {} not written", apply.display());
    for (signal, code) in [("INT", 130), ("TERM", 143)] {
        stops_at_once(
            &["plan", "--stages", "2", "--micro-batches", "4"],
            signal,
            code,
            "nothing was written",
            None,
            false,
        );
        let tune = [
            "tune",
            "--cache-dir",
            cache.to_str().unwrap(),
            "--apply",
            apply.to_str().unwrap(),
            "--width",
            "16",
            "--hidden-layers",
            "2",
            "--batch",
            "16",
        ];
        stops_at_once(&tune, signal, code, &apply_flag, Some(&apply), false);
    }
}

/// Issue 48 item 5: `bench` stops on SIGTERM and SIGHUP as on SIGINT (143, 129), `--out`
/// unwritten.
#[test]
fn bench_stops_at_once_on_sigterm_and_sighup() {
    let tmp = scratch("bench-signals");
    let out = tmp.path().join("bench.md");
    let unwritten = format!("--out {} not written", out.display());
    for (signal, code) in [("TERM", 143), ("HUP", 129)] {
        stops_at_once(
            &[
                "bench",
                "--steps",
                "1",
                "--reps",
                "1",
                "--width",
                "16",
                "--hidden-layers",
                "2",
                "--out",
                out.to_str().unwrap(),
            ],
            signal,
            code,
            &unwritten,
            Some(&out),
            false,
        );
    }
}
