//! `pipetrain bench`: picks the rows, runs them (ours, then the peer's, row by row), and prints
//! the document.

use std::collections::BTreeSet;

use super::args::BenchArgs;
use super::configs::{self, Row, Shape, Workload};
use super::measure::{self, Measured};
use super::peers::{PeerResult, Peers};
use super::probe;
use super::table::{self, Header, Line};
use crate::exit::Exit;
use crate::failure::Failure;
use crate::paths;

/// Runs the bench `args` describe and prints its markdown document (and writes it to `--out`).
pub fn run(args: &BenchArgs) -> Result<Exit, Failure> {
    paths::distinct(
        &[("--compare-pytorch", args.compare_pytorch.as_deref())],
        &[("--out", args.out.as_deref())],
        &[],
    )?;
    paths::outputs_writable(&[("--out", &args.out)]).map_err(Failure::usage)?;
    if args.device != crate::device::DeviceSpec::Cpu {
        let device = args.device.device().map_err(Failure::usage)?;
        return super::gpu::run(args, &args.device.to_string(), &device);
    }
    check(args).map_err(Failure::usage)?;
    let workload = Workload::of(args);
    let mpi = super::mpi::available();
    if let Err(why) = &mpi {
        eprintln!("bench: MPI rows left out: {why}");
    }
    let rows = select(args, mpi.is_ok()).map_err(Failure::usage)?;
    let peers = args
        .compare_pytorch
        .as_ref()
        .map(|python| Peers::find(python, args.peers.as_deref()));
    if let Some(Err(why)) = &peers {
        eprintln!("bench: {why}");
    }
    let ready = peers.as_ref().and_then(|p| p.as_ref().ok());
    let mut ours: Vec<Measured> = vec![Measured::default(); rows.len()];
    let mut theirs: Vec<Vec<Result<PeerResult, String>>> = vec![Vec::new(); rows.len()];
    let total = rows.len() * args.reps;
    for rep in 0..args.reps {
        for (i, row) in rows.iter().enumerate() {
            let measured = measure::run_row(&row.shape, &workload)
                .map_err(|e| Failure::runtime(format!("{}: {e}", row.label())))?;
            eprintln!(
                "bench: [{}/{total}] {}: {:.0} samples/s",
                rep * rows.len() + i + 1,
                row.label(),
                table::median(&measured.rates)
            );
            ours[i].merge(measured);
            if let (Some(peers), Some(peer)) = (ready, &row.peer) {
                let result = peers.run(peer, &workload);
                match &result {
                    Ok(r) => eprintln!(
                        "bench:   PyTorch {}: {:.0} samples/s",
                        peer.script, r.median
                    ),
                    Err(why) => eprintln!("bench:   PyTorch {}: {why}", peer.script),
                }
                theirs[i].push(result);
            }
        }
    }
    let lines = lines(&rows, ours, theirs, workload.batch);
    let header = Header {
        command: command_line(),
        cpu: probe::cpu_model(),
        cores: probe::cores(),
        workload,
        reps: args.reps,
        release: !cfg!(debug_assertions),
        pytorch: peers.map(|p| p.map(|p| (p.torch.clone(), p.dir().display().to_string()))),
        mpi: mpi.err(),
    };
    let document = table::render(&header, &lines);
    print!("{document}");
    if let Some(path) = &args.out {
        pipetrain::engine::output::write_atomically(path, document.as_bytes())
            .map_err(|e| Failure::runtime(format!("--out {}: {e}", path.display())))?;
    }
    Ok(Exit::Success)
}

/// Refuses settings no row could run with, naming the flag and the remedy.
fn check(args: &BenchArgs) -> Result<(), String> {
    for (flag, value) in [
        ("--batch", args.batch),
        ("--steps", args.steps),
        ("--reps", args.reps),
        ("--threads", args.threads),
        ("--width", args.width),
        ("--classes", args.classes),
        // The 2-stage rows need 2 layers: a hidden block and the head.
        ("--hidden-layers", args.hidden_layers),
    ] {
        if value == 0 {
            return Err(format!("{flag} 0: give at least 1"));
        }
    }
    if let Some(&m) = args.micro_batches.iter().find(|&&m| m == 0) {
        return Err(format!(
            "--micro-batches {m}: each count must be at least 1 (e.g. 1,4,8,32)"
        ));
    }
    Ok(())
}

/// The rows to run, in order: the single-device and independent-worker rows the others'
/// limits need (and any `--only` names), then the configurations.
fn select(args: &BenchArgs, mpi: bool) -> Result<Vec<Row>, String> {
    let batch = args.batch;
    let matches = |row: &Row| {
        args.only
            .as_ref()
            .is_none_or(|only| row.label().to_lowercase().contains(&only.to_lowercase()))
    };
    // A row that cuts more chunks than the model has layers (hidden blocks + head) cannot run.
    let all: Vec<Row> = super::rows::rows(&args.micro_batches, args.threads, mpi)
        .into_iter()
        .filter(|r| match r.shape.is_mlp() {
            true => r.shape.chunks() <= args.hidden_layers + 1,
            false => args.gpt_width > 0,
        })
        .collect();
    let mut main: Vec<Row> = all.iter().filter(|r| matches(r)).cloned().collect();
    // An MPI row is read against the same layout in this process: that row runs too.
    let twins: Vec<Row> = all
        .iter()
        .filter(|r| {
            !main.contains(r)
                && main
                    .iter()
                    .any(|m| m.shape.processes() > 1 && m.shape.in_process() == r.shape)
        })
        .cloned()
        .collect();
    main.splice(0..0, twins);
    for row in main.iter().filter(|r| r.shape.is_mlp()) {
        if let Shape::Pipeline {
            replicas,
            micro_batches,
            ..
        } = row.shape
            && batch % (replicas * micro_batches) != 0
        {
            return Err(format!(
                "--batch {batch} does not split into {replicas} replica(s) × {micro_batches} \
                 micro-batches (row `{}`); give a --batch that is a multiple of {}, or leave \
                 {micro_batches} out of --micro-batches",
                row.label(),
                replicas * micro_batches
            ));
        }
    }
    // Rows per micro-batch of every single-device reference, and (workers, rows) of every
    // independent-workers reference.
    let mut singles: BTreeSet<usize> = BTreeSet::new();
    let mut independents: BTreeSet<(usize, usize)> = BTreeSet::new();
    for row in main.iter().filter(|r| r.shape.is_mlp()) {
        let rows = row.shape.rows_per_micro_batch(batch);
        singles.insert(rows);
        if row.shape.workers() > 1 {
            independents.insert((row.shape.workers(), rows));
        }
    }
    // The whole batch at once is everyone's baseline; every micro-batch count is a row too.
    singles.insert(batch);
    for &m in &args.micro_batches {
        if batch % m == 0 {
            singles.insert(batch / m);
        }
    }
    let mut refs: Vec<Row> = singles
        .iter()
        .rev()
        .map(|&rows| configs::single(batch, rows, args.threads))
        .collect();
    refs.extend(
        independents
            .iter()
            .rev()
            .map(|&(workers, rows)| configs::independent(batch, workers, rows)),
    );
    let needed = |row: &Row| {
        args.only.is_none()
            || matches(row)
            || main.iter().filter(|m| m.shape.is_mlp()).any(|m| {
                let rows = m.shape.rows_per_micro_batch(batch);
                let r = row.shape.rows_per_micro_batch(batch);
                rows == r && (row.shape.workers() == 1 || row.shape.workers() == m.shape.workers())
            })
    };
    let mut rows: Vec<Row> = refs.into_iter().filter(|r| needed(r)).collect();
    rows.extend(main);
    if rows.is_empty() {
        let names: Vec<String> = all.iter().map(Row::label).collect();
        return Err(format!(
            "--only {:?} matches no row; rows are: {}",
            args.only.as_deref().unwrap_or(""),
            names.join("; ")
        ));
    }
    Ok(rows)
}

/// Each row with its limit and ceiling (from the reference rows) and its peer's pooled result.
fn lines(
    rows: &[Row],
    ours: Vec<Measured>,
    theirs: Vec<Vec<Result<PeerResult, String>>>,
    batch: usize,
) -> Vec<Line> {
    let median_of = |want: &dyn Fn(&Shape) -> bool| {
        rows.iter()
            .zip(&ours)
            .find(|(r, _)| want(&r.shape))
            .map(|(_, m)| table::median(&m.rates))
    };
    rows.iter()
        .zip(ours.iter())
        .zip(theirs)
        .map(|((row, measured), peer)| {
            let shape = row.shape;
            let rows_mb = shape.rows_per_micro_batch(batch);
            let workers = shape.workers();
            let is_single = matches!(
                shape,
                Shape::Pipeline {
                    replicas: 1,
                    stages: 1,
                    ..
                }
            );
            let single = median_of(&|s: &Shape| {
                matches!(
                    s,
                    Shape::Pipeline {
                        replicas: 1,
                        stages: 1,
                        threads: None,
                        ..
                    }
                ) && s.rows_per_micro_batch(batch) == rows_mb
            });
            // The GPT rows have no single-device or independent reference rows.
            let is_single = is_single || !shape.is_mlp();
            let limit = (!is_single)
                .then(|| single.map(|t| workers as f64 * t * shape.bubble_bound()))
                .flatten();
            let ceiling =
                (workers > 1 && shape.is_mlp() && !matches!(shape, Shape::Independent { .. }))
                    .then(|| {
                        median_of(&|s: &Shape| {
                            matches!(s, Shape::Independent { .. })
                                && s.workers() == workers
                                && s.rows_per_micro_batch(batch) == rows_mb
                        })
                        .map(|t| t * shape.bubble_bound())
                    })
                    .flatten();
            Line {
                row: row.clone(),
                ours: measured.clone(),
                limit,
                ceiling,
                peer: pool(peer),
            }
        })
        .collect()
}

/// A row's peer runs as one: median of medians, min of mins, max of maxes, the busiest
/// `others`; the first failure if none succeeded; `None` if the row had no peer run.
fn pool(runs: Vec<Result<PeerResult, String>>) -> Option<Result<PeerResult, String>> {
    let first_error = runs.iter().find_map(|r| r.as_ref().err().cloned());
    let ok: Vec<PeerResult> = runs.into_iter().filter_map(Result::ok).collect();
    if ok.is_empty() {
        return first_error.map(Err);
    }
    let medians: Vec<f64> = ok.iter().map(|r| r.median).collect();
    Some(Ok(PeerResult {
        median: table::median(&medians),
        min: ok.iter().map(|r| r.min).fold(f64::INFINITY, f64::min),
        max: ok.iter().map(|r| r.max).fold(0.0, f64::max),
        others: ok.iter().filter_map(|r| r.others).reduce(f64::max),
    }))
}

/// `pipetrain bench ...` as this process was started (the binary's path shortened to its name).
fn command_line() -> String {
    let mut words: Vec<String> = std::env::args().collect();
    if let Some(first) = words.first_mut() {
        *first = "pipetrain".into();
    }
    words.join(" ")
}
