//! `pipetrain tune` end to end on a small MLP: the ranked table with the exact `train` flags,
//! the trial runs beside their predictions, the cache, `--apply` read back by
//! `train --config`, and a budget that rules out the fastest configuration.

use crate::common;

use common::{USAGE, failure_with, success};

/// The model and search every test here tunes (small, dev profile, fast).
const MODEL: [&str; 12] = [
    "--width",
    "16",
    "--hidden-layers",
    "3",
    "--batch",
    "32",
    "--workers",
    "2",
    "--max-micro-batches",
    "4",
    "--run-steps",
    "1",
];

fn tune(dir: &str, extra: &[&str]) -> String {
    let mut args = vec!["tune", "--cache-dir", dir];
    args.extend(MODEL);
    args.extend(extra);
    success(&args)
}

/// The (predicted/s, peak bytes-as-printed, flags) of each ranked row of `out`.
fn ranked(out: &str) -> Vec<(f64, String)> {
    let head = out
        .find("train flags (after the model flags)")
        .expect("the table");
    out[head..]
        .lines()
        .skip(1)
        .take_while(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let flags = &l[l.find("--replicas").expect("the train flags")..];
            (cols[1].parse().unwrap(), flags.to_string())
        })
        .collect()
}

#[test]
fn table_runs_cache_and_apply_round_trip() {
    let dir = common::scratch("tune");
    let cache = dir.path().to_str().unwrap();
    let best = dir.path().join("best.toml");
    let best = best.to_str().unwrap();
    let out = tune(cache, &["--top", "3", "--run", "2", "--apply", best]);
    assert!(
        out.contains("cost table: measured at [32, 16, 8, 4] rows"),
        "{out}"
    );
    assert!(
        out.contains(
            "model flags: --model mlp --width 16 --hidden-layers 3 --classes 10 --batch 32"
        ),
        "{out}"
    );
    let rows = ranked(&out);
    assert_eq!(rows.len(), 3, "{out}");
    assert!(
        rows.windows(2).all(|w| w[0].0 >= w[1].0),
        "ranked fastest first: {out}"
    );
    // The runs: measured beside predicted for the first two, then the winner.
    let runs = &out[out.find("meas/pred").expect("the runs' table")..];
    let measured: Vec<Vec<&str>> = runs
        .lines()
        .skip(1)
        .take(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    for (i, cols) in measured.iter().enumerate() {
        assert_eq!(cols[0], (i + 1).to_string(), "{runs}");
        assert_eq!(cols[1].parse::<f64>().unwrap(), rows[i].0, "{runs}");
        assert!(cols[2].parse::<f64>().unwrap() > 0.0, "{runs}");
    }
    assert!(runs.contains("winner: rank "), "{runs}");
    assert!(out.contains(&format!("apply: wrote {best}")), "{out}");
    // The file is the winner's flags, and train takes it.
    let toml = std::fs::read_to_string(best).unwrap();
    let winner: usize = runs["winner: rank ".len() + runs.find("winner: rank ").unwrap()..]
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for flag in rows[winner - 1]
        .1
        .split("--")
        .filter(|f| !f.trim().is_empty())
    {
        let (key, value) = flag.trim().split_once(' ').unwrap();
        let key = key.replace('-', "_");
        assert!(
            toml.lines().any(|l| l.starts_with(&format!("{key} = "))
                && l.replace(['"', ' ', '[', ']'], "")
                    .ends_with(&format!("={value}"))),
            "{key} {value} not in:\n{toml}"
        );
    }
    let trained = success(&["train", "--config", best, "--steps", "1"]);
    assert!(trained.contains("MLP-3x16"), "{trained}");
    assert!(trained.contains("done: 1 steps"), "{trained}");
    // Second time: the cached table.
    let again = tune(cache, &["--top", "1", "--run", "0"]);
    assert!(again.contains("cost table: cached"), "{again}");
    // Issue 38: a poisoned table (times of 0, or of 1e308) was used as it was; it is refused
    // naming the file and --remeasure, which measures it again.
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tune-")
        })
        .expect("the cache file");
    let good = std::fs::read_to_string(&file).unwrap();
    for (poison, said) in [
        ("0.0", "forward time at 32 rows is 0 s"),
        ("1e308", "forward time at 32 rows is 1e308 s"),
    ] {
        let mut entry: serde_json::Value = serde_json::from_str(&good).unwrap();
        entry["table"]["rows"][0]["layers"][0]["forward"] = serde_json::from_str(poison).unwrap();
        std::fs::write(&file, entry.to_string()).unwrap();
        let args = [&["tune", "--cache-dir", cache][..], &MODEL, &["--run", "0"]].concat();
        let err = failure_with(USAGE, &args);
        assert!(
            err.contains(&format!("tune cache {}: ", file.display()))
                && err.contains(said)
                && err.contains("use --remeasure"),
            "{poison}: {err}"
        );
    }
    // A table without a micro-batch size the search needs was reported without the file, in
    // the library's internal names (`Space::rows_in_play`).
    let mut entry: serde_json::Value = serde_json::from_str(&good).unwrap();
    let rows = entry["table"]["rows"].as_array_mut().unwrap();
    let dropped = rows.remove(0)["rows"].clone();
    std::fs::write(&file, entry.to_string()).unwrap();
    let args = [&["tune", "--cache-dir", cache][..], &MODEL, &["--run", "0"]].concat();
    let err = failure_with(USAGE, &args);
    assert!(
        err.contains(&format!("tune cache {}: ", file.display()))
            && err.contains(&format!("no times at {dropped} rows"))
            && err.contains("use --remeasure"),
        "{err}"
    );
    assert!(!err.contains("Space::"), "{err}");
    let remeasured = tune(cache, &["--top", "1", "--run", "0", "--remeasure"]);
    assert!(remeasured.contains("cost table: measured"), "{remeasured}");
    let again = tune(cache, &["--top", "1", "--run", "0"]);
    assert!(again.contains("cost table: cached"), "{again}");
}

#[test]
fn a_budget_that_rules_out_the_fastest_picks_a_feasible_one() {
    let dir = common::scratch("tune-budget");
    let cache = dir.path().to_str().unwrap();
    let free = tune(cache, &["--top", "1", "--run", "0"]);
    assert!(
        !free.contains("left out: 1 replica(s) x 1 stage(s), m=1, 1f1b"),
        "{free}"
    );
    // MLP-3x16 on one worker at m = 1 holds 32720 bytes (SGD): 20 KiB rules it out.
    let out = tune(
        cache,
        &["--top", "3", "--run", "1", "--memory-budget", "20KiB"],
    );
    assert!(
        out.contains(
            "left out: 1 replica(s) x 1 stage(s), m=1, 1f1b, remat never: over budget on stage 0 by"
        ),
        "{out}"
    );
    let runs = &out[out.find("meas/pred").expect("the run")..];
    let cols: Vec<&str> = runs.lines().nth(1).unwrap().split_whitespace().collect();
    // rank, predicted/s, measured/s, meas/pred, predicted peak (2 cols), measured peak (2 cols)
    let kib =
        |v: &str, unit: &str| v.parse::<f64>().unwrap() * if unit == "KiB" { 1024.0 } else { 1.0 };
    assert!(
        kib(cols[6], cols[7]) <= 20.0 * 1024.0,
        "measured peak over budget: {runs}"
    );
    let mut args = vec!["tune", "--cache-dir", cache, "--memory-budget", "2KiB"];
    args.extend(MODEL);
    let err = failure_with(USAGE, &args);
    assert!(err.contains("no configuration fits"), "{err}");
    assert!(err.contains("over budget on stage"), "{err}");
}

#[test]
fn tune_apply_never_overwrites_a_file_the_command_reads() {
    // Issue 47, class 1: `tune --apply FILE` overwrote the run's own --data file, a file of an
    // `mnist:` data set and the --config file with rc 0 (--plan and --init are refused as
    // flags tune does not read, `tests/cli/unread.rs`).
    let dir = common::scratch("tune-apply-inputs");
    let cache = dir.path().to_str().unwrap();
    let data = dir.path().join("d.st");
    common::data_file(&data, 64);
    let mnist = dir.path().join("mnist");
    std::fs::create_dir(&mnist).unwrap();
    let labels = mnist.join("train-labels-idx1-ubyte");
    std::fs::write(&labels, b"labels").unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "width = 16\n").unwrap();
    let (d, l, c) = (
        data.to_str().unwrap(),
        labels.to_str().unwrap(),
        config.to_str().unwrap(),
    );
    let tensors = format!("tensors:{d}");
    let mnist_spec = format!("mnist:{}", mnist.display());
    for (extra, victim, flag) in [
        (vec!["--data", tensors.as_str(), "--apply", d], d, "--data"),
        (
            vec!["--data", mnist_spec.as_str(), "--apply", l],
            l,
            "--data",
        ),
        (vec!["--config", c, "--apply", c], c, "--config"),
    ] {
        let before = std::fs::read(victim).unwrap();
        let args = [
            &["tune", "--cache-dir", cache][..],
            &MODEL,
            &["--run", "0"],
            &extra,
        ]
        .concat();
        let e = failure_with(USAGE, &args);
        assert!(
            e.contains(flag) && e.contains(&format!("--apply {victim}")),
            "{args:?}: {e}"
        );
        assert_eq!(
            std::fs::read(victim).unwrap(),
            before,
            "{victim} left as it was"
        );
    }
}

#[test]
fn tune_apply_carries_every_setting_it_did_not_choose() {
    // Issue 47, class 2: the applied file dropped --data, --momentum, --weight-decay, --seed,
    // --lr-schedule, --min-lr and --clip-grad-norm, so the command it printed trained
    // something else.
    let dir = common::scratch("tune-apply-carries");
    let cache = dir.path().to_str().unwrap();
    let data = dir.path().join("d.st");
    common::data_file(&data, 64);
    let spec = format!("tensors:{}", data.display());
    let best = dir.path().join("best.toml");
    let b = best.to_str().unwrap();
    let settings = [
        "--data",
        &spec,
        "--optimizer",
        "sgd",
        "--momentum",
        "0.5",
        "--weight-decay",
        "0.01",
        "--seed",
        "7",
        "--lr-schedule",
        "cosine",
        "--min-lr",
        "0.001",
        "--clip-grad-norm",
        "2.5",
        "--steps",
        "3",
    ];
    let args = [
        &["tune", "--cache-dir", cache][..],
        &MODEL,
        &["--top", "1", "--run", "0", "--apply", b],
        &settings,
    ]
    .concat();
    success(&args);
    let file: toml::Table = std::fs::read_to_string(&best).unwrap().parse().unwrap();
    for (key, value) in [
        ("data", toml::Value::String(spec.clone())),
        ("optimizer", toml::Value::String("sgd".into())),
        ("momentum", toml::Value::Float(0.5)),
        ("weight_decay", toml::Value::Float(0.01)),
        ("seed", toml::Value::Integer(7)),
        ("lr_schedule", toml::Value::String("cosine".into())),
        ("min_lr", toml::Value::Float(0.001)),
        ("clip_grad_norm", toml::Value::Float(2.5)),
        ("steps", toml::Value::Integer(3)),
    ] {
        assert_eq!(file.get(key), Some(&value), "{key} in {file}");
    }
    // The file trains: `train --config FILE` with nothing else is the tuned run.
    let out = success(&["train", "--config", b]);
    assert!(out.contains("step    3/3"), "{out}");
}

#[test]
fn a_fifo_at_the_tune_cache_path_is_refused_not_waited_on() {
    // Issue 47, class 4: a FIFO at the cache file's path blocked tune for ever.
    let dir = common::scratch("tune-cache-fifo");
    let cache = dir.path().to_str().unwrap();
    let file = cache_file(cache);
    std::fs::remove_file(&file).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&file).status();
    assert!(made.unwrap().success());
    let args = [&["tune", "--cache-dir", cache][..], &MODEL, &["--run", "0"]].concat();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pipetrain"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("tune waited on the FIFO at {}", file.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(USAGE), "{err}");
    assert!(
        err.contains(&format!("tune cache {}", file.display())) && err.contains("FIFO"),
        "{err}"
    );
}

#[test]
fn the_tune_cache_never_overwrites_a_file_the_command_reads() {
    // Issue 47, class 1: the cache file is an output like --apply; a --data file at its path
    // was replaced by the measured table.
    let dir = common::scratch("tune-cache-data");
    let cache = dir.path().to_str().unwrap();
    let file = cache_file(cache);
    common::data_file(&file, 64);
    let before = std::fs::read(&file).unwrap();
    let spec = format!("tensors:{}", file.display());
    let apply = dir.path().join("best.toml");
    let args = [
        &["tune", "--cache-dir", cache][..],
        &MODEL,
        &["--run", "0", "--remeasure", "--data", &spec, "--apply"],
        &[apply.to_str().unwrap()],
    ]
    .concat();
    let e = failure_with(USAGE, &args);
    assert!(
        e.contains("--data") && e.contains("tune cache") && e.contains("are the same file"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the data left as it was"
    );
}

/// Tunes once with the cache in `cache`, and returns the cache file it wrote.
fn cache_file(cache: &str) -> std::path::PathBuf {
    tune(cache, &["--top", "1", "--run", "0"]);
    std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("the cache file")
}
