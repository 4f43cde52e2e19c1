//! One rule for every subcommand that takes `train`'s flags (issue 47, class 3): a flag that
//! would change nothing is a usage error naming it, in `eval` and in `tune` as in `train`
//! (`pipetrain::commands::reads`). `tune` accepted 26 train-only flags and `eval` 11, with
//! rc 0, and did not even check the paths given to them.

use crate::common;
use common::{TINY, USAGE, failure_with, scratch};

/// Flags neither `eval` nor `tune` reads, each with a valid value (paths in `dir`).
fn train_only(dir: &str) -> Vec<Vec<String>> {
    let at = |name: &str| format!("{dir}/{name}");
    "--stages 2;--balance 1,2;--replicas 2;--micro-batches 2;--schedule gpipe;--threads 2;\
     --accumulate 2;--zero 1;--bucket-mb 1;--backward split;--weight-group 1;--timing host;\
     --handoff device;--verify;--no-verify;--checkpoint-every 1;--workers-per-process 2;\
     --comm-timeout 5"
        .split(';')
        .map(|f| f.split(' ').map(String::from).collect())
        .chain(
            ["--plan", "--profile", "--metrics", "--plot", "--checkpoint"]
                .iter()
                .zip(["p.csv", "t.json", "m.csv", "l.png", "c.st"])
                .map(|(flag, name)| vec![flag.to_string(), at(name)]),
        )
        .collect()
}

/// Runs `pipetrain <command> <TINY model> <flag>` and checks that it is refused naming the
/// flag and its value, and that no file was written in `dir`.
fn refused(command: &str, extra: &[&str], flag: &[String], dir: &std::path::Path) {
    let mut args: Vec<&str> = vec![command];
    args.extend(&TINY[..6]);
    args.extend(extra);
    args.extend(flag.iter().map(String::as_str));
    let e = failure_with(USAGE, &args);
    assert!(
        e.contains(&flag.join(" ")) && e.contains("would change nothing"),
        "{args:?}: {e}"
    );
    assert!(e.contains(&format!("drop {}", flag[0])), "{args:?}: {e}");
    let written: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
    assert!(written.is_empty(), "{args:?} wrote {written:?}");
}

#[test]
fn eval_refuses_every_flag_it_would_not_read() {
    let tmp = scratch("unread-eval");
    let dir = tmp.path().to_str().unwrap();
    let mut flags = train_only(dir);
    for flag in [
        &["--steps", "3"][..],
        &["--optimizer", "sgd"],
        &["--lr", "0.1"],
        &["--momentum", "0.5"],
        &["--weight-decay", "0.1"],
        &["--precision", "bf16"],
        &["--remat", "never"],
        &["--memory-budget", "1MiB"],
        &["--lr-schedule", "cosine"],
        &["--clip-grad-norm", "1"],
        &["--skip-nonfinite"],
        &["--keep-last"],
        &["--no-shuffle"],
    ] {
        flags.push(flag.iter().map(|s| s.to_string()).collect());
    }
    for flag in &flags {
        refused("eval", &[], flag, tmp.path());
    }
}

#[test]
fn tune_refuses_every_flag_it_would_not_read_and_apply_carries_the_rest() {
    let tmp = scratch("unread-tune");
    let dir = tmp.path().to_str().unwrap();
    let mut flags = train_only(dir);
    for name in ["--init", "--resume"] {
        flags.push(vec![name.to_string(), format!("{dir}/w.st")]);
    }
    flags.push(vec!["--rename".into(), "a=b".into()]);
    let apply = format!("{dir}/tuned.toml");
    for flag in &flags {
        refused("tune", &[], flag, tmp.path());
        refused("tune", &["--apply", &apply], flag, tmp.path());
    }
    // Only the applied file carries these: without it they change nothing.
    for flag in [
        &["--steps", "3"][..],
        &["--lr-schedule", "cosine"],
        &["--clip-grad-norm", "1"],
        &["--skip-nonfinite"],
        &["--keep-last"],
        &["--data", "synthetic"],
    ] {
        let flag: Vec<String> = flag.iter().map(|s| s.to_string()).collect();
        refused("tune", &[], &flag, tmp.path());
        let args = [
            &["tune"][..],
            &TINY[..6],
            &flag.iter().map(String::as_str).collect::<Vec<_>>(),
        ]
        .concat();
        let e = failure_with(USAGE, &args);
        assert!(e.contains("--apply FILE"), "{args:?}: {e}");
    }
}
