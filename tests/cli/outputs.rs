//! Every file pipetrain writes follows the checkpoint's rules (issue 27, part 1): a device
//! node, FIFO or symbolic link at a destination is refused before anything runs and left as it
//! is; a symbolic link planted at any name beside a destination is never followed; temp files
//! a killed run left are swept; two flags naming one file are refused, naming both; and
//! `--resume` continues the earlier run's `--metrics` file. A FIFO given as an input is refused
//! before it is opened (issue 38), where opening it waited for a writer.

use crate::common;
use common::{TINY, TINY_GPT, USAGE, failure_with, scratch, success, temp_files};

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Stderr of `pipetrain <args>`, which must exit with `code` within 60 s (opening a FIFO
/// for writing blocks until a reader comes: a writer that does so never ends).
fn failure_within(code: i32, args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("pipetrain {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "pipetrain {args:?}: {stderr}"
    );
    stderr
}

/// A tiny 2-step MLP run (`common::TINY`, 2 micro-batches), then `extra`.
fn train<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let base = [
        &["train"][..],
        &TINY,
        &["--micro-batches", "2", "--steps", "2"],
    ]
    .concat();
    base.iter().chain(extra).copied().collect()
}

/// What can sit at a destination instead of a regular file.
#[derive(Clone, Copy, Debug)]
enum Node {
    /// A `mknod` copy of /dev/null.
    Device,
    Fifo,
    /// A symbolic link to a regular file (the victim).
    Symlink,
}

impl Node {
    const ALL: [Node; 3] = [Node::Device, Node::Fifo, Node::Symlink];

    /// Makes one at `path` (a symbolic link points to `victim`).
    fn make(self, path: &Path, victim: &Path) {
        let status = match self {
            Node::Device => Command::new("mknod")
                .arg(path)
                .args(["c", "1", "3"])
                .status()
                .unwrap(),
            Node::Fifo => Command::new("mkfifo").arg(path).status().unwrap(),
            Node::Symlink => {
                std::os::unix::fs::symlink(victim, path).unwrap();
                return;
            }
        };
        assert!(status.success(), "{self:?} at {}", path.display());
    }

    /// Whether `path` is still one, untouched.
    fn is_at(self, path: &Path) -> bool {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return false;
        };
        let kind = meta.file_type();
        match self {
            Node::Device => kind.is_char_device(),
            Node::Fifo => kind.is_fifo(),
            Node::Symlink => kind.is_symlink(),
        }
    }

    fn refusal(self) -> &'static str {
        match self {
            Node::Device | Node::Fifo => "is a device, FIFO or socket",
            Node::Symlink => "is a symbolic link",
        }
    }
}

const VICTIM: &[u8] = b"not yours to overwrite\n";

#[test]
fn a_device_fifo_or_symlink_at_any_output_is_refused_and_left_as_it_is() {
    let tmp = scratch("outputs-nodes");
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, VICTIM).unwrap();
    let ckpt = tmp.path().join("ck.safetensors");
    success(&train(&["--checkpoint", ckpt.to_str().unwrap()]));
    for node in Node::ALL {
        let at = |name: &str| tmp.path().join(format!("{node:?}-{name}"));
        // (the command, the flag, its destination)
        let cases: Vec<(Vec<String>, &str, PathBuf)> = vec![
            (vec![], "--checkpoint", at("ck.safetensors")),
            (vec![], "--metrics", at("m.csv")),
            (vec![], "--profile", at("trace.json")),
            (vec![], "--plot", at("loss.png")),
            (
                vec!["export".into(), ckpt.display().to_string()],
                "-o",
                at("torch.safetensors"),
            ),
            (
                ["tune"]
                    .iter()
                    .chain(&TINY[..6])
                    .map(|a| a.to_string())
                    .collect(),
                "--apply",
                at("tuned.toml"),
            ),
            (
                ["bench", "--steps", "1", "--reps", "1"]
                    .map(String::from)
                    .to_vec(),
                "--out",
                at("bench.md"),
            ),
        ];
        for (command, flag, path) in cases {
            node.make(&path, &victim);
            let p = path.to_str().unwrap();
            let args: Vec<&str> = match command.is_empty() {
                true => train(&[flag, p]),
                false => command
                    .iter()
                    .map(String::as_str)
                    .chain([flag, p])
                    .collect(),
            };
            let e = failure_within(USAGE, &args);
            assert!(
                e.contains(&format!("{flag} {p}")) && e.contains(node.refusal()),
                "{node:?} {flag}: {e}"
            );
            assert!(node.is_at(&path), "{node:?} at {flag} was replaced");
            assert_eq!(std::fs::read(&victim).unwrap(), VICTIM, "{flag}");
        }
    }
    assert!(
        temp_files(tmp.path()).is_empty(),
        "{:?}",
        temp_files(tmp.path())
    );
}

#[test]
fn a_fifo_given_as_any_input_is_refused_before_it_is_opened() {
    // Issue 38: opening a FIFO for reading waits for a writer, and these waited for ever.
    let tmp = scratch("inputs-fifo");
    let fifo = tmp.path().join("in.fifo");
    Node::Fifo.make(&fifo, &fifo);
    let f = fifo.to_str().unwrap();
    let (tensors, text) = (format!("tensors:{f}"), format!("text:{f}"));
    let gpt = [
        &["train"][..],
        &TINY_GPT,
        &["--steps", "1", "--data", &text],
    ]
    .concat();
    let cases = [
        train(&["--data", &tensors]),
        gpt,
        train(&["--config", f]),
        train(&["--plan", f]),
        vec!["plan", "--plan", f],
    ];
    for args in cases {
        let e = failure_within(USAGE, &args);
        assert!(
            e.contains(f) && e.contains("not a regular file"),
            "{args:?}: {e}"
        );
        assert!(Node::Fifo.is_at(&fifo));
    }
}

#[test]
fn an_output_naming_a_file_of_a_directory_data_set_is_refused_and_the_file_kept() {
    // Issue 38: these trained, then overwrote the labels (mnist:) or a batch (cifar10:) they
    // had trained on: every file a data set reads is an input.
    let tmp = scratch("outputs-data-dir");
    let (mnist, cifar) = (tmp.path().join("mnist"), tmp.path().join("cifar"));
    std::fs::create_dir_all(&mnist).unwrap();
    std::fs::create_dir_all(&cifar).unwrap();
    let n = 32u32;
    let mut images = vec![0, 0, 8, 3];
    for v in [n, 2, 2] {
        images.extend(v.to_be_bytes());
    }
    images.extend((0..n * 4).map(|i| (i * 7 % 256) as u8));
    let mut labels = vec![0, 0, 8, 1];
    labels.extend(n.to_be_bytes());
    labels.extend((0..n).map(|i| (i % 10) as u8));
    std::fs::write(mnist.join("train-images-idx3-ubyte"), images).unwrap();
    std::fs::write(mnist.join("train-labels-idx1-ubyte"), labels).unwrap();
    let batch: Vec<u8> = (0..n)
        .flat_map(|i| std::iter::once((i % 10) as u8).chain(std::iter::repeat_n(i as u8, 3072)))
        .collect();
    std::fs::write(cifar.join("data_batch_1.bin"), batch).unwrap();
    let cases = [
        (
            format!("mnist:{}", mnist.display()),
            "--checkpoint",
            mnist.join("train-labels-idx1-ubyte"),
        ),
        (
            format!("mnist:{}", mnist.display()),
            "--plot",
            mnist.join("train-images-idx3-ubyte"),
        ),
        (
            format!("cifar10:{}", cifar.display()),
            "--profile",
            cifar.join("data_batch_1.bin"),
        ),
    ];
    for (data, flag, victim) in cases {
        let before = std::fs::read(&victim).unwrap();
        let v = victim.to_str().unwrap();
        let args = train(&["--data", &data, "--batch", "8", "--held-out", "0", flag, v]);
        let e = failure_with(USAGE, &args);
        assert!(
            e.contains("--data") && e.contains(flag) && e.contains(v),
            "{args:?}: {e}"
        );
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            before,
            "{flag} overwrote {v}"
        );
    }
}

/// This host's name as temp file names carry it.
fn host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    name.trim().replace(['.', '/', '@', '\\'], "-")
}

#[test]
fn a_symlink_planted_at_any_side_file_name_is_never_followed() {
    // `--profile` once wrote `.NAME.raw` and `.NAME.tmp` with truncation, following links.
    let tmp = scratch("outputs-planted");
    let dir = tmp.path();
    let outputs = [
        ("--checkpoint", "ck.safetensors"),
        ("--metrics", "m.csv"),
        ("--profile", "trace.json"),
        ("--plot", "loss.png"),
    ];
    let dead = format!("4194304@{}", host());
    let mut victims = Vec::new();
    for (_, name) in outputs {
        // The old fixed names, and names of the temp files' form (a link is never swept).
        for side in [
            format!(".{name}.raw"),
            format!(".{name}.tmp"),
            format!(".{name}.{dead}.aaaaaa.tmp"),
            format!(".{name}.{dead}.aaaaaa.raw.tmp"),
        ] {
            let victim = dir.join(format!("victim-{side}"));
            std::fs::write(&victim, VICTIM).unwrap();
            std::os::unix::fs::symlink(&victim, dir.join(&side)).unwrap();
            victims.push((victim, dir.join(side)));
        }
    }
    let paths: Vec<String> = outputs
        .iter()
        .map(|(_, n)| dir.join(n).display().to_string())
        .collect();
    let mut args = train(&[]);
    for ((flag, _), path) in outputs.iter().zip(&paths) {
        args.extend([*flag, path.as_str()]);
    }
    success(&args);
    for path in &paths {
        assert!(
            std::fs::symlink_metadata(path).unwrap().is_file(),
            "{path} written"
        );
    }
    for (victim, link) in &victims {
        assert_eq!(
            std::fs::read(victim).unwrap(),
            VICTIM,
            "{} was followed",
            link.display()
        );
        assert!(std::fs::symlink_metadata(link).unwrap().is_symlink());
    }
}

#[test]
fn temp_files_of_a_gone_writer_are_swept_and_a_live_ones_kept() {
    let tmp = scratch("outputs-stale");
    let dir = tmp.path();
    let host = host();
    // Pid 4194304 is above Linux's pid_max: its owner is gone. Pid 1 is alive.
    let stale: Vec<PathBuf> = ["ck.safetensors", "m.jsonl", "trace.json", "loss.png"]
        .iter()
        .map(|n| dir.join(format!(".{n}.4194304@{host}.abcdef.tmp")))
        .collect();
    let live = dir.join(format!(".ck.safetensors.1@{host}.abcdef.tmp"));
    let other_host = dir.join(".ck.safetensors.4194304@elsewhere.abcdef.tmp");
    let not_ours = dir.join(".ck.safetensors.tmp");
    for f in stale.iter().chain([&live, &other_host, &not_ours]) {
        std::fs::write(f, b"partial").unwrap();
    }
    let p = |n: &str| dir.join(n).display().to_string();
    let (ck, m, trace, plot) = (
        p("ck.safetensors"),
        p("m.jsonl"),
        p("trace.json"),
        p("loss.png"),
    );
    success(&train(&[
        "--checkpoint",
        &ck,
        "--metrics",
        &m,
        "--profile",
        &trace,
        "--plot",
        &plot,
    ]));
    for f in &stale {
        assert!(!f.exists(), "{} swept", f.display());
    }
    for f in [&live, &other_host, &not_ours] {
        assert!(f.exists(), "{} kept", f.display());
    }
}

/// Every two flags of `train` that name files, one of them an output, given one file: each pair
/// is refused before anything runs, naming both; `--resume` with `--checkpoint` continues a run
/// in place.
#[test]
fn two_flags_naming_one_file_are_refused_naming_both() {
    let tmp = scratch("outputs-collide");
    let same = tmp.path().join("same.csv");
    // Valid as a --config (TOML), so every pair reaches the check.
    std::fs::write(&same, "steps = 2\n").unwrap();
    let link = tmp.path().join("link.csv");
    std::os::unix::fs::symlink(&same, &link).unwrap();
    let (s, l) = (same.to_str().unwrap(), link.to_str().unwrap());
    let inputs = ["--data", "--config", "--plan", "--init", "--resume"];
    let flags = [
        "--data",
        "--config",
        "--plan",
        "--init",
        "--resume",
        "--checkpoint",
        "--metrics",
        "--profile",
        "--plot",
    ];
    let value = |flag: &str, path: &str| match flag {
        "--data" => format!("tensors:{path}"),
        _ => path.to_string(),
    };
    let mut pairs = 0;
    for (i, a) in flags.iter().enumerate() {
        for b in &flags[i + 1..] {
            // Two inputs may be one file; resuming in place is allowed.
            if inputs.contains(b) || (*a, *b) == ("--resume", "--checkpoint") {
                continue;
            }
            // Once by the same name, once through a symbolic link.
            for (x, y) in [(s, s), (s, l)] {
                let (va, vb) = (value(a, x), value(b, y));
                let args = train(&[a, &va, b, &vb]);
                let e = failure_with(USAGE, &args);
                assert!(
                    e.contains(&format!("{a} {x}")) && e.contains(&format!("{b} {y}")),
                    "{a} {b}: {e}"
                );
                assert!(e.contains("are the same file"), "{a} {b}: {e}");
                assert!(!e.contains("step "), "refused before training: {e}");
            }
            pairs += 1;
        }
    }
    assert_eq!(pairs, 25, "every pair with an output");
    assert_eq!(std::fs::read_to_string(&same).unwrap(), "steps = 2\n");

    let ck = tmp.path().join("ck.safetensors");
    let c = ck.to_str().unwrap();
    success(&train(&["--checkpoint", c]));
    let e = failure_with(USAGE, &["export", c, "-o", c]);
    assert!(
        e.contains(&format!("CKPT {c}")) && e.contains(&format!("-o {c}")),
        "{e}"
    );
    let toml = tmp.path().join("run.toml");
    std::fs::write(&toml, "steps = 2\n").unwrap();
    let t = toml.to_str().unwrap();
    let e = failure_with(USAGE, &["tune", "--config", t, "--apply", t]);
    assert!(e.contains("--config") && e.contains("--apply"), "{e}");
    assert_eq!(std::fs::read_to_string(&toml).unwrap(), "steps = 2\n");
    // Continuing a run in place is the one pair allowed.
    success(
        &[
            train(&["--checkpoint", c, "--resume", c]),
            vec!["--steps", "3"],
        ]
        .concat(),
    );
}

/// The CSV's rows as `(step, the rest)`, header excluded.
fn steps_of(csv: &str) -> Vec<u64> {
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn resume_continues_the_metrics_file_and_refuses_other_columns() {
    let tmp = scratch("outputs-resume-metrics");
    let (ck, m) = (tmp.path().join("ck.safetensors"), tmp.path().join("m.csv"));
    let (c, mp) = (ck.to_str().unwrap(), m.to_str().unwrap());
    let run = |steps: &str, extra: &[&str]| {
        let mut args = train(&["--checkpoint", c, "--metrics", mp]);
        args.extend(["--steps", steps]);
        args.extend(extra);
        success(&args);
        std::fs::read_to_string(&m).unwrap()
    };
    let first = run("3", &["--checkpoint-every", "2"]);
    assert_eq!(steps_of(&first), [1, 2, 3]);
    // The checkpoint is at step 3; the resumed run adds 4 and 5.
    let resumed = run("5", &["--resume", c]);
    assert_eq!(steps_of(&resumed), [1, 2, 3, 4, 5], "{resumed}");
    assert_eq!(resumed.matches("step,").count(), 1, "one header: {resumed}");
    assert!(resumed.starts_with(first.lines().next().unwrap()));

    // Another stage count: other columns, refused, the file as it was.
    let mut args = train(&["--checkpoint", c, "--metrics", mp, "--resume", c]);
    args.extend(["--steps", "7", "--stages", "1"]);
    let out = common::pipetrain(&args);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(USAGE), "{e}");
    assert!(e.contains("--metrics") && e.contains("columns"), "{e}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.lines().any(|l| l.starts_with("step ")), "{stdout}");
    assert_eq!(std::fs::read_to_string(&m).unwrap(), resumed);

    // JSON lines, with rows past the resumed step (a run that went on without saving): those
    // are dropped, not repeated.
    let (early, jsonl) = (tmp.path().join("early.st"), tmp.path().join("m.jsonl"));
    let (e, j) = (early.to_str().unwrap(), jsonl.to_str().unwrap());
    success(&train(&["--checkpoint", e]));
    success(&[train(&["--metrics", j]), vec!["--steps", "4"]].concat());
    success(
        &[
            train(&["--metrics", j, "--resume", e]),
            vec!["--steps", "4"],
        ]
        .concat(),
    );
    let steps: Vec<u64> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, [1, 2, 3, 4]);
}
