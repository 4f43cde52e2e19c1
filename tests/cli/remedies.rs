//! Remedies that work (issue 38, class 5): every remedy the command line prints for a schedule,
//! stage, balance or data-size error, followed, gets past that error.
//!
//! Each case runs `pipetrain` with a bad command line, reads the remedy its error gives (the
//! text after the facts' last `; `), and for each alternative in it that sets flags to values
//! (`use --stages 1 or --schedule 1f1b`: two alternatives; `use --balance 1,2 and --stages 1`:
//! one of two flags) applies it to the command line, replacing the flag's value where the flag
//! is given, removing the flag for `drop --flag`. The run that follows must succeed (`train`
//! with `--steps 1`) or fail on a different setting: the same facts (numbers aside) again is a
//! remedy that loops, and an error whose remedy names only the flags just set is a wrong value
//! (`--stages 0` answered with `--stages 5`, which has more stages than layers) even where that
//! error's own remedy works. Remedies are followed three deep, and no error may come back along the
//! way (A's remedy leading to B, whose remedy leads back to A). A remedy must not offer a value
//! the command line gives already, nor drop a flag it does not give, and what it sets must
//! parse (clap's usage error is a remedy that does not).
//!
//! Alternatives that name no value (`a smaller --context`, `--data SPEC`, a sentence) are not
//! followed; each case whose fix is a value says so with at least one followed alternative.
//!
//! The error sites covered, found by grepping for `Setting::Stages`, `Setting::Balance`,
//! `Setting::MicroBatches`, `Setting::VirtualStages`, `Setting::Schedule`, `Setting::HeldOut`,
//! `Setting::Batch` and `Setting::Classes` remedies and the binary's own `use --` messages:
//! - `schedules/src/error.rs`: `ZeroStages`, `ZeroMicroBatches`, `VirtualStages` (`1` and `0`,
//!   which blamed `--stages`), `InterleavedMicroBatches`, `PlanShape` (`train --plan`);
//!   `UnevenChunks` as a balance reaches it (`Error::Build(BuildError::UnevenBalance)`);
//! - `src/error/build.rs`: `StagesAndBalance`, `MoreStagesThanLayers` (one and two chunks per
//!   rank, and fewer layers than a rank's chunks), `BudgetAndBalance`, `MemoryBudget`
//!   (`src/setup/split.rs`); `Setting { Replicas }` (`src/builder/checks.rs`);
//! - `partitioner/src/error.rs`: `BalanceLength`, `EmptyStage`, `BalanceSum` (`NoStages`,
//!   `MoreStagesThanLayers` and `EmptyWorld` are refused by the facade first, above);
//! - `data/src/error.rs`: `EmptySplit` (0, 1 and 2 rows, a fraction too small or too large),
//!   `BadFraction`, `BatchTooLarge`; `src/trainer/open.rs`'s `DataProblem::OutOfRange`,
//!   `LoadedOnly`, `ShortLastBatch` and `Targets` (an int64 `y` of shape [N, 1]: its remedy is to reshape, which
//!   the test does to the file);
//! - `src/bin/pipetrain`: `train`'s batch that does not split into micro-batches, `plan`'s
//!   plan too large to report (`--virtual-stages 100000`) or to simulate (`--stages 100000`),
//!   and `plan --plan FILE` with another shape.
//!
//! Not reachable from one process, and not covered: `MeasuredSplitAcrossProcesses` (MPI runs
//! with a memory budget; `tests/mpi.rs` checks its message).

use crate::common;

use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

/// A 3-layer MLP (two hidden layers of width 4, 3 classes) on 16 rows: every run is quick.
const TINY: [&str; 8] = [
    "--hidden-layers",
    "2",
    "--width",
    "4",
    "--classes",
    "3",
    "--batch",
    "16",
];

/// How deep a chain of remedies is followed.
const DEPTH: usize = 3;

/// One change a remedy makes to the command line.
#[derive(Clone, Debug, PartialEq)]
enum Edit {
    /// Give the flag this value (a switch: no value).
    Set(String, Option<String>),
    /// Leave the flag out.
    Drop(String),
}

/// The first `error: ` line of `stderr`, without its prefix.
fn error_line(stderr: &str) -> Option<&str> {
    stderr.lines().find_map(|l| l.strip_prefix("error: "))
}

/// The facts of an error line, its numbers left out: what "the same error" means here.
fn signature(error: &str) -> String {
    let facts = error.rsplit_once("; ").map_or(error, |(facts, _)| facts);
    let mut out = String::new();
    for c in facts.chars() {
        match c {
            '0'..='9' if out.ends_with('#') => {}
            '0'..='9' => out.push('#'),
            '.' if out.ends_with('#') => {}
            c => out.push(c),
        }
    }
    out
}

/// The remedy of an error line: what follows the facts' last `; `.
fn remedy(error: &str) -> &str {
    error.rsplit_once("; ").map_or("", |(_, remedy)| remedy)
}

/// A value that stands for one the user chooses: `N`, `FILE`, `N,N,...`.
fn placeholder(value: &str) -> bool {
    value
        .chars()
        .all(|c| c.is_ascii_uppercase() || ",.".contains(c))
}

/// The alternatives of `remedy` that set flags to values, each as its edits; quoted commands
/// (`` `pipetrain plan …` ``) and alternatives with a placeholder value are left out.
fn alternatives(remedy: &str) -> Vec<Vec<Edit>> {
    let unquoted: String = remedy.split('`').step_by(2).collect();
    let mut all = Vec::new();
    for part in unquoted.split(" or ").flat_map(|p| p.split(", ")) {
        let tokens: Vec<&str> = part.split_whitespace().collect();
        let mut edits = Vec::new();
        let mut concrete = true;
        for (i, token) in tokens.iter().enumerate() {
            if !token.starts_with("--") {
                continue;
            }
            let flag = token.trim_end_matches([',', ')', ':']).to_string();
            if i > 0 && tokens[i - 1] == "drop" {
                edits.push(Edit::Drop(flag));
                continue;
            }
            let value = tokens
                .get(i + 1)
                .filter(|v| !v.starts_with("--") && !v.starts_with('(') && **v != "and")
                .map(|v| v.trim_end_matches([',', ')', ':']).to_string());
            concrete &= !value.as_deref().is_some_and(placeholder);
            edits.push(Edit::Set(flag, value));
        }
        if concrete && !edits.is_empty() {
            all.push(edits);
        }
    }
    all
}

/// Where `flag` is in `args`, the last time (a later flag overrides an earlier one).
fn position(args: &[String], flag: &str) -> Option<usize> {
    args.iter().rposition(|a| a == flag)
}

/// `args` with `edits` applied; panics on an edit that repeats what `args` give (a value given
/// already, a flag dropped that is not there).
fn apply(args: &[String], edits: &[Edit], error: &str) -> Vec<String> {
    let mut out = args.to_vec();
    for edit in edits {
        match edit {
            Edit::Set(flag, Some(value)) => match position(&out, flag) {
                Some(i) => {
                    assert_ne!(
                        out.get(i + 1),
                        Some(value),
                        "the remedy offers {flag} {value}, given already:\n  pipetrain {}\n  \
                         error: {error}",
                        args.join(" ")
                    );
                    out[i + 1] = value.clone();
                }
                None => out.extend([flag.clone(), value.clone()]),
            },
            Edit::Set(flag, None) => {
                assert!(
                    position(&out, flag).is_none(),
                    "the remedy offers {flag}, given already:\n  pipetrain {}\n  error: {error}",
                    args.join(" ")
                );
                out.push(flag.clone());
            }
            Edit::Drop(flag) => {
                let i = position(&out, flag).unwrap_or_else(|| {
                    panic!(
                        "the remedy drops {flag}, not given:\n  pipetrain {}\n  error: {error}",
                        args.join(" ")
                    )
                });
                let valued = out.get(i + 1).is_some_and(|v| !v.starts_with("--"));
                out.drain(i..i + 1 + usize::from(valued));
            }
        }
    }
    out
}

/// The error line of `pipetrain <args>` (`train` runs one step), or `None` if it succeeded.
fn run(args: &[String]) -> Option<String> {
    let mut full = args.to_vec();
    if full[0] == "train" {
        full.extend(["--steps".into(), "1".into()]);
    }
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    let out = common::pipetrain(&refs);
    if out.status.success() {
        return None;
    }
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("For more information, try '--help'"),
        "the command line does not parse:\n  pipetrain {}\n{stderr}",
        full.join(" ")
    );
    let line = error_line(&stderr)
        .unwrap_or_else(|| panic!("no `error: ` line for pipetrain {full:?}:\n{stderr}"));
    Some(line.to_string())
}

/// Every flag a remedy names (`--stages`, `--comm-timeout`), quoted commands left out: the
/// settings it is about.
fn flags_named(remedy: &str) -> Vec<String> {
    let unquoted: String = remedy.split('`').step_by(2).collect();
    unquoted
        .split_whitespace()
        .filter(|t| t.starts_with("--"))
        .map(|t| t.trim_end_matches([',', ')', ':', '.']).to_string())
        .collect()
}

/// The flags `edits` set or drop.
fn edited(edits: &[Edit]) -> Vec<&str> {
    edits
        .iter()
        .map(|e| match e {
            Edit::Set(flag, _) | Edit::Drop(flag) => flag.as_str(),
        })
        .collect()
}

/// Follows every remedy of `pipetrain <args>`'s error, `depth` deep, running each command line
/// with `run`; `seen` holds the errors met on the way here (by [`signature`]), which must not
/// come back. A remedy followed passes only if the command then succeeds or fails on a different
/// setting: an error whose remedy names only flags the remedy followed has just set (`--stages 0`
/// answered with `--stages 5`, more stages than layers, `use --stages 3`) is a wrong value, even
/// where that error's own remedy works. Returns how many alternatives were followed from this
/// error.
fn follow(
    args: &[String],
    error: &str,
    seen: &mut Vec<(String, String)>,
    depth: usize,
    run: &dyn Fn(&[String]) -> Option<String>,
) -> usize {
    let alternatives = alternatives(remedy(error));
    seen.push((
        signature(error),
        format!("pipetrain {}\n  error: {error}", args.join(" ")),
    ));
    for edits in &alternatives {
        let next = apply(args, edits, error);
        let Some(again) = run(&next) else {
            continue;
        };
        let path = || {
            let lines: Vec<&str> = seen.iter().map(|(_, line)| line.as_str()).collect();
            lines.join("\n  -> ")
        };
        if let Some((_, first)) = seen.iter().find(|(s, _)| *s == signature(&again)) {
            panic!(
                "following {edits:?} brings back the same error:\n  {}\n  -> pipetrain {}\n  \
                 error: {again}\n(first met as {first})",
                path(),
                next.join(" ")
            );
        }
        let named = flags_named(remedy(&again));
        let set = edited(edits);
        if !named.is_empty() && named.iter().all(|f| set.contains(&f.as_str())) {
            panic!(
                "following {edits:?} fails on the setting it set ({}): a wrong value\n  {}\n  \
                 -> pipetrain {}\n  error: {again}",
                set.join(", "),
                path(),
                next.join(" ")
            );
        }
        if depth > 1 {
            follow(&next, &again, seen, depth - 1, run);
        }
    }
    seen.pop();
    alternatives.len()
}

/// `pipetrain <command> <args>` fails, its error contains `expected`, and every remedy it
/// gives is followed; at least one of them sets a value unless `followed` is false.
fn remedies_work(command: &str, args: &[&str], expected: &str, followed: bool) -> String {
    let args: Vec<String> = std::iter::once(command)
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    let error = run(&args).unwrap_or_else(|| panic!("pipetrain {args:?} should fail"));
    assert!(
        error.contains(expected),
        "pipetrain {}: `{expected}` expected in\n  {error}",
        args.join(" ")
    );
    let count = follow(&args, &error, &mut Vec::new(), DEPTH, &run);
    assert!(
        !followed || count > 0,
        "no remedy to follow in\n  pipetrain {}\n  error: {error}",
        args.join(" ")
    );
    error
}

/// `train` on [`TINY`] with `extra`.
fn train(extra: &[&str], expected: &str) -> String {
    remedies_work("train", &[&TINY[..], extra].concat(), expected, true)
}

/// The rule of [`follow`] on a fake command line (issue 48 item 5): `--stages 0` answered with
/// `--stages 5` lands on "more stages than layers", whose own remedy works; that is a wrong
/// remedy, and following it fails. A remedy that lands on another setting's error passes.
#[test]
fn a_remedy_that_fails_on_the_setting_it_set_is_wrong() {
    let stages = |args: &[String]| {
        let i = position(args, "--stages")?;
        args.get(i + 1).cloned()
    };
    let wrong = move |args: &[String]| match stages(args).as_deref() {
        Some("0") => Some("0 stages; use --stages 5".to_string()),
        Some("5") => Some("5 stages but only 3 layers; use --stages 3".to_string()),
        _ => None,
    };
    let args: Vec<String> = ["train", "--stages", "0"].map(String::from).to_vec();
    let error = wrong(&args).unwrap();
    let followed =
        std::panic::catch_unwind(|| follow(&args, &error, &mut Vec::new(), DEPTH, &wrong));
    assert!(
        followed.is_err(),
        "--stages 5 for 3 layers was accepted as a remedy of --stages 0"
    );
    let micro = |args: &[String]| position(args, "--micro-batches").is_some();
    let right = move |args: &[String]| match stages(args).as_deref() {
        Some("0") => Some("0 stages; use --stages 2".to_string()),
        Some("2") if !micro(args) => {
            Some("1 micro-batch for 2 stages; use --micro-batches 2".to_string())
        }
        _ => None,
    };
    let error = right(&args).unwrap();
    assert_eq!(follow(&args, &error, &mut Vec::new(), DEPTH, &right), 1);
}

#[test]
fn the_parser_reads_every_form_of_remedy() {
    let set = |flag: &str, value: &str| Edit::Set(flag.into(), Some(value.into()));
    assert_eq!(
        alternatives(
            "use --stages 3, --remat always or a larger communication timeout (--comm-timeout)"
        ),
        [vec![set("--stages", "3")], vec![set("--remat", "always")]]
    );
    assert_eq!(
        alternatives("use --balance 1,2 and --stages 1 or give one of them"),
        [vec![set("--balance", "1,2"), set("--stages", "1")]]
    );
    assert_eq!(
        alternatives("drop --held-out or use --data SPEC"),
        [vec![Edit::Drop("--held-out".into())]]
    );
    assert_eq!(
        alternatives("use --skip-nonfinite or a smaller learning rate (--lr)"),
        [vec![Edit::Set("--skip-nonfinite".into(), None)]]
    );
    assert_eq!(
        signature("4 stages but only 3 layers: x; use --stages 3"),
        "# stages but only # layers: x"
    );
    assert_eq!(
        signature("holding out 0.5 of 1"),
        signature("holding out 0.1 of 1")
    );
    let args: Vec<String> = ["train", "--stages", "2", "--held-out", "0.5", "--keep-last"]
        .map(String::from)
        .to_vec();
    let edits = [
        set("--stages", "1"),
        Edit::Drop("--held-out".into()),
        set("--batch", "4"),
    ];
    assert_eq!(
        apply(&args, &edits, ""),
        ["train", "--stages", "1", "--keep-last", "--batch", "4"]
    );
}

#[test]
fn schedule_remedies_work() {
    train(&["--stages", "0"], "stages = 0");
    train(&["--micro-batches", "0"], "micro_batches = 0");
    train(
        &["--schedule", "interleaved", "--virtual-stages", "1"],
        "1 virtual stage(s)",
    );
    // It blamed --stages, which was not given.
    let error = train(
        &["--schedule", "interleaved", "--virtual-stages", "0"],
        "0 virtual stage(s)",
    );
    assert!(!error.contains("--stages"), "{error}");
    let six_layers = ["--hidden-layers", "5", "--schedule", "interleaved"];
    train(
        &[&six_layers[..], &["--stages", "3"]].concat(),
        "8 micro-batches is not a multiple of 3",
    );
    remedies_work(
        "plan",
        &["--schedule", "interleaved", "--stages", "3"],
        "not a multiple of 3",
        true,
    );
    remedies_work("plan", &["--stages", "0"], "stages = 0", true);
}

#[test]
fn stage_remedies_count_chunks_and_layers() {
    // 3 layers: more stages than layers, with one chunk per rank and with two.
    train(&["--stages", "4"], "only 3 layers");
    train(&["--schedule", "zb-v", "--stages", "2"], "only 3 layers");
    train(&["--schedule", "zb-v", "--stages", "3"], "only 3 layers");
    // The controllable-memory V schedules: 2 chunks a rank too, the remedy zb-h1 (their
    // backward split over one chunk a rank) or fewer stages.
    train(&["--schedule", "v-min", "--stages", "2"], "only 3 layers");
    train(&["--schedule", "v-half", "--stages", "3"], "only 3 layers");
    train(
        &["--schedule", "interleaved", "--stages", "3"],
        "only 3 layers",
    );
    let six_layers = ["--hidden-layers", "5", "--micro-batches", "8"];
    train(
        &[
            &six_layers[..],
            &["--schedule", "interleaved", "--stages", "4"],
        ]
        .concat(),
        "only 6 layers",
    );
    // One layer: no rank of two chunks fits it.
    let one_layer = ["--hidden-layers", "0"];
    train(
        &[&one_layer[..], &["--schedule", "zb-v"]].concat(),
        "only 1 layer",
    );
    train(
        &[&one_layer[..], &["--schedule", "zb-v", "--stages", "1"]].concat(),
        "only 1 layer",
    );
    // The same for the controllable-memory V schedules: the remedy is zb-h1, their backward
    // split over one chunk a rank.
    for schedule in ["v-min", "v-half"] {
        let error = train(
            &[&one_layer[..], &["--schedule", schedule]].concat(),
            "only 1 layer",
        );
        assert!(error.contains("zb-h1"), "{schedule}: {error}");
    }
    train(&["--replicas", "0"], "replicas = 0");
}

#[test]
fn balance_remedies_fit_the_layers_and_the_chunks() {
    train(
        &["--balance", "1,1,1", "--stages", "2"],
        "balance [1, 1, 1]",
    );
    train(&["--balance", "1,2,3"], "sums to 6");
    train(&["--balance", "0,3"], "0 layers");
    train(&["--balance", "1,1,1,1"], "balance [1, 1, 1, 1]");
    train(
        &["--schedule", "zb-v", "--balance", "1,2", "--stages", "2"],
        "balance [1, 2]",
    );
    train(
        &["--schedule", "zb-v", "--balance", "1,1,1"],
        "balance [1, 1, 1]",
    );
    train(
        &[
            "--schedule",
            "interleaved",
            "--balance",
            "1,1,1",
            "--stages",
            "3",
        ],
        "balance [1, 1, 1]",
    );
    train(&["--schedule", "zb-v", "--balance", "3"], "balance [3]");
    train(
        &["--balance", "1,2", "--memory-budget", "1GiB"],
        "memory budget",
    );
}

#[test]
fn memory_budget_remedies_fit_the_budget() {
    train(&["--memory-budget", "1KiB"], "too small");
}

#[test]
fn batch_remedies_split_the_batch() {
    train(&["--batch", "1", "--micro-batches", "2"], "does not split");
    train(
        &["--batch", "4", "--replicas", "2", "--micro-batches", "4"],
        "does not split",
    );
}

#[test]
fn plan_remedies_name_the_flag_at_fault() {
    // The plan is too large for a report because of --virtual-stages, not of the stages and
    // micro-batches (defaults the user did not give).
    let error = remedies_work(
        "plan",
        &["--schedule", "interleaved", "--virtual-stages", "100000"],
        "--virtual-stages 100000",
        true,
    );
    assert!(!error.contains("--stages 4"), "{error}");
    remedies_work("plan", &["--stages", "100000"], "100000", true);
    let dir = common::scratch("remedies-plan");
    let file = dir.path().join("p.csv");
    std::fs::write(&file, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n").unwrap();
    let path = file.to_str().unwrap();
    remedies_work(
        "plan",
        &["--plan", path, "--stages", "3"],
        "runs its own shape",
        true,
    );
    train(
        &["--plan", path, "--stages", "3"],
        "the plan has 2 stage(s)",
    );
}

/// Writes a data set of `rows` rows: `x` f32 of shape [rows, 4], `y` int64 labels `i % 3` of
/// shape `[rows]`, or `[rows, 1]` with `column`.
fn write_data(path: &Path, rows: usize, column: bool) {
    let x: Vec<u8> = (0..rows * 4)
        .flat_map(|i| (i as f32 * 0.25).sin().to_le_bytes())
        .collect();
    let y: Vec<u8> = (0..rows)
        .flat_map(|i| (i as i64 % 3).to_le_bytes())
        .collect();
    let y_shape = if column { vec![rows, 1] } else { vec![rows] };
    let views = [
        ("x", TensorView::new(Dtype::F32, vec![rows, 4], &x).unwrap()),
        ("y", TensorView::new(Dtype::I64, y_shape, &y).unwrap()),
    ];
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn data_size_remedies_fit_the_data() {
    let dir = common::scratch("remedies-data");
    let data = |rows: usize| {
        let path = dir.path().join(format!("d{rows}.st"));
        write_data(&path, rows, false);
        format!("tensors:{}", path.display())
    };
    let (none, one, two, many) = (data(0), data(1), data(2), data(64));
    // No fraction holds out one of 0 rows and trains on another: nothing to follow, and no
    // --held-out offered.
    let error = remedies_work(
        "train",
        &[&TINY[..], &["--data", &none]].concat(),
        "of 0 examples",
        false,
    );
    assert!(!remedy(&error).contains("--held-out"), "{error}");
    train(&["--data", &one], "of 1 examples");
    train(&["--data", &one, "--held-out", "0.5"], "of 1 examples");
    train(&["--data", &two], "of 2 examples");
    // Its number as given, not 300 digits.
    train(
        &["--data", &many, "--held-out", "1e-300"],
        "holding out 1e-300 of 64 examples",
    );
    train(&["--data", &many, "--held-out", "0.999"], "of 64 examples");
    train(&["--data", &many, "--held-out", "1.5"], "not in [0, 1)");
    train(&["--data", &many, "--batch", "100"], "exceeds");
    train(&["--data", &many, "--classes", "2"], "not in 0..2");
    train(&["--held-out", "0.5"], "applies to loaded data");
    // 58 training rows in batches of 27 keep a last batch of 4 rows, fewer than 8 micro-batches.
    train(
        &[
            "--data",
            &many,
            "--keep-last",
            "--batch",
            "27",
            "--micro-batches",
            "8",
        ],
        "the last batch of each epoch has 4 rows",
    );
}

/// An int64 `y` of shape [N, 1] is told to reshape it, not to "save y as int64", which it is;
/// reshaped as told, it trains.
#[test]
fn a_column_of_labels_is_told_to_reshape() {
    let dir = common::scratch("remedies-targets");
    let path = dir.path().join("column.st");
    write_data(&path, 64, true);
    let spec = format!("tensors:{}", path.display());
    let args = [&TINY[..], &["--data", &spec]].concat();
    let error = remedies_work("train", &args, "shape [N, 1]", false);
    let fix = remedy(&error);
    assert!(
        fix.contains("shape [N]") && !fix.contains("as int64"),
        "{error}"
    );
    write_data(&path, 64, false);
    let args: Vec<String> = std::iter::once("train")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    assert_eq!(run(&args), None, "the reshaped labels train");
}
