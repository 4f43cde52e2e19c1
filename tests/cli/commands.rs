//! The subcommands' library side, called the way a library user calls it: `pipetrain::commands::bench`
//! on a few tiny CPU rows (no peers, no MPI), `pipetrain::commands::tune::tune` on a small MLP (measured,
//! then read back from its cache), `pipetrain::commands::plan` on GPipe, and `pipetrain::commands::export` on a
//! checkpoint of an MLP. Nothing here asserts a speed: only that the numbers are real.

use crate::common;

use pipetrain::CommandError;
use std::collections::BTreeMap;

use burn::prelude::*;
use pipetrain::commands::bench::{self, BenchSettings, Header, Progress};
use pipetrain::commands::plan::{PlanCosts, PlanReport, PlanSettings};
use pipetrain::commands::tune::{Calibration, TableSource, TuneSettings, default_space};
use pipetrain::{Error, OptimizerConfig, Pipeline, ScheduleKind};
use pipetrain_models::{MlpConfig, synthetic};

/// A bench that runs in seconds in the dev profile: MLP-2x16 on 32 rows, the 1F1B rows at
/// m ∈ {1, 4} and the single-device rows their limits need.
fn tiny() -> BenchSettings {
    BenchSettings {
        width: 16,
        hidden_layers: 2,
        gpt_width: 0,
        llama_width: 0,
        batch: 32,
        steps: 2,
        warmup: 1,
        micro_batches: vec![1, 4],
        only: Some("1f1b".into()),
        ..BenchSettings::default()
    }
}

#[test]
fn bench_measures_tiny_rows_and_renders_the_table() {
    let mut rows_seen = 0;
    let report = bench::run(&tiny(), &mut |p| {
        if let Progress::Row { .. } = p {
            rows_seen += 1;
        }
    })
    .unwrap();
    assert_eq!(rows_seen, report.lines.len());
    assert_eq!(
        report.mpi_left_out.as_deref(),
        Some("no pipetrain binary to start under mpirun was given")
    );
    let labels: Vec<String> = report.lines.iter().map(|l| l.row.label()).collect();
    assert!(
        labels.contains(&"pipelined: 1F1B, 2 stages, m=4".to_string()),
        "{labels:?}"
    );
    assert!(labels.iter().any(|l| l.starts_with("single device")));
    for line in &report.lines {
        let rate = bench::median(&line.ours.rates);
        assert!(
            rate.is_finite() && rate > 0.0,
            "{}: {rate}",
            line.row.label()
        );
        assert!(line.ours.loss.is_finite(), "{}", line.row.label());
        assert!(line.peer.is_none(), "no peers were given");
    }
    let pipelined = report
        .lines
        .iter()
        .find(|l| l.row.label() == "pipelined: 1F1B, 2 stages, m=4")
        .unwrap();
    assert!(pipelined.limit.is_some_and(|l| l > 0.0));
    let header = Header {
        command: "a test".into(),
        cpu: bench::cpu_model(),
        cores: bench::cores(),
        workload: report.workload,
        reps: 1,
        release: false,
        pytorch: None,
        mpi: report.mpi_left_out.clone(),
    };
    let document = bench::render(&header, &report.lines);
    assert!(
        document.starts_with("# pipetrain bench: MLP-2x16, batch 32"),
        "{document}"
    );
    assert!(
        document.contains("| pipelined: 1F1B, 2 stages, m=4 | 2 |"),
        "{document}"
    );
}

/// A progress callback for a bench that must refuse before any row runs.
fn no_rows(progress: Progress) {
    assert!(
        !matches!(progress, Progress::Row { .. } | Progress::Peer { .. }),
        "{progress:?}"
    );
}

#[test]
fn bench_settings_no_row_runs_with_are_refused_before_anything_runs() {
    let split = BenchSettings {
        batch: 10,
        ..tiny()
    };
    let err = bench::run(&split, &mut no_rows).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Command(CommandError::BenchBatchSplit {
                batch: 10,
                micro_batches: 4,
                ..
            })
        ),
        "{err}"
    );
    let zero = BenchSettings { steps: 0, ..tiny() };
    let err = bench::run(&zero, &mut no_rows).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Command(CommandError::BenchZero { setting: "steps" })
        ),
        "{err}"
    );
    let none = BenchSettings {
        only: Some("no such row".into()),
        ..tiny()
    };
    let err = bench::run(&none, &mut no_rows).unwrap_err();
    assert!(
        matches!(&err, Error::Command(CommandError::BenchNoRow { rows, .. }) if !rows.is_empty()),
        "{err}"
    );
}

#[test]
fn tune_measures_ranks_runs_and_reads_its_cache_back() {
    let device = Device::flex();
    let layers = common::seeded(5, |device| MlpConfig::new(16, 2, 4).init(device));
    let batches: Vec<_> = (0..2)
        .map(|k| synthetic::classification(3, k, 16, 16, 4, &device))
        .collect();
    let cache = common::scratch("tune-cache");
    let mut space = default_space(16, 2, None);
    space.max_micro_batches = 2;
    space.schedules = vec![ScheduleKind::OneFOneB];
    let settings = TuneSettings {
        space,
        model: "MLP-2x16, 4 classes".into(),
        optimizer: OptimizerConfig::sgd(),
        optimizer_name: "sgd".into(),
        learning_rate: 0.01,
        runs: 2,
        run_steps: 4,
        cache_dir: Some(cache.path().to_path_buf()),
        remeasure: false,
        files: Vec::new(),
        calibration: Calibration {
            steps: 1,
            repeats: 1,
            passes: 1,
        },
    };
    let mut ranked = 0;
    let report = pipetrain::commands::tune::tune(&layers, &batches, &settings, &device, &mut |p| {
        if let pipetrain::commands::tune::TuneProgress::Ranked(r) = p {
            ranked = r.candidates.len();
        }
    })
    .unwrap();
    assert_eq!(ranked, report.ranking.candidates.len());
    assert!(
        matches!(
            &report.source,
            TableSource::Measured {
                cached: Some(Ok(_)),
                ..
            }
        ),
        "{:?}",
        report.source
    );
    assert_eq!(report.trials.len(), 2.min(ranked));
    let fastest = report
        .trials
        .iter()
        .map(|t| t.samples_per_sec)
        .fold(0.0, f64::max);
    assert_eq!(report.trials[report.winner].samples_per_sec, fastest);
    assert!(report.trials.iter().all(|t| t.peak_memory > 0));
    let again = pipetrain::commands::tune::tune(
        &layers,
        &batches,
        &TuneSettings {
            runs: 0,
            ..settings
        },
        &device,
        &mut |_| {},
    )
    .unwrap();
    assert!(
        matches!(again.source, TableSource::Cached { factor, .. } if factor > 0.0),
        "{:?}",
        again.source
    );
    assert!(again.trials.is_empty());
    assert_eq!(again.winner, 0, "without runs the top prediction wins");
}

#[test]
fn plan_report_of_gpipe_and_its_bad_costs() {
    let compute = ScheduleKind::GPipe.plan(2, 2).unwrap();
    let report = PlanReport::build("gpipe".into(), &compute, &PlanSettings::default()).unwrap();
    assert_eq!((report.stages, report.micro_batches), (2, 2));
    assert_eq!(report.makespan, 9.0);
    assert_eq!(report.peak_stash, vec![2, 2]);
    assert!((report.bubble_fraction - 1.0 / 3.0).abs() < 1e-9);
    let text = report.text();
    assert!(text.contains("makespan  9"), "{text}");
    let costs = PlanCosts {
        weight: Some(3.0),
        ..PlanCosts::default()
    };
    let settings = PlanSettings {
        costs,
        ..PlanSettings::default()
    };
    let err = PlanReport::build("gpipe".into(), &compute, &settings).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Command(CommandError::PlanCost {
                cost: "weight",
                value: 3.0,
                ..
            })
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("--"), "no flag names: {err}");
    // Issue 38: costs far apart asked for a grid of 1e300 columns, or of 384 GB.
    let apart = |transfer| PlanSettings {
        costs: PlanCosts {
            transfer,
            ..PlanCosts::default()
        },
        ..PlanSettings::default()
    };
    let err = PlanReport::build("gpipe".into(), &compute, &apart(1e9)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Command(CommandError::PlanCost {
                cost: "transfer",
                value: 1e9,
                ..
            })
        ),
        "{err}"
    );
    assert!(err.to_string().starts_with("transfer cost 1e9: "), "{err}");
    let report = PlanReport::build("gpipe".into(), &compute, &apart(1e6)).unwrap();
    let omitted = report
        .grid_omitted
        .expect("a grid of 2 x 3000009 columns is left out");
    assert_eq!((omitted.rows, omitted.columns), (2, 2000009));
    assert!(report.grid.is_empty() && report.text().contains("(no grid: "));
}

#[test]
fn export_gives_pytorch_names_and_transposed_linears() {
    let dir = common::scratch("export");
    let path = dir.path().join("mlp.ckpt");
    let layers = common::seeded(9, |device| MlpConfig::new(3, 1, 2).init(device));
    let pipeline = Pipeline::builder()
        .layers(layers)
        .stages(1)
        .build()
        .unwrap();
    let extra = BTreeMap::from([("model".to_string(), "MLP-1x3, 2 classes".to_string())]);
    pipeline.save_checkpoint(&path, extra).unwrap();
    let export = pipetrain::commands::export::to_pytorch(&path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&export.bytes).unwrap();
    let mut names = file.names();
    names.sort();
    assert_eq!(names, ["0.bias", "0.weight", "2.bias", "2.weight"]);
    assert_eq!(export.tensors, 4);
    // The head: [in 3, out 2] in pipetrain, [out 2, in 3] in PyTorch.
    assert_eq!(file.tensor("2.weight").unwrap().shape(), [2, 3]);
    let unnamed = dir.path().join("unnamed.ckpt");
    pipeline.save_checkpoint(&unnamed, BTreeMap::new()).unwrap();
    let err = pipetrain::commands::export::to_pytorch(&unnamed).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Command(CommandError::ExportModel { model: None })
        ),
        "{err}"
    );
}
