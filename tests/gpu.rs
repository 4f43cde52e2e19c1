//! The GPU suite: the doctor's sweep (`pipetrain::commands::doctor`, also `pipetrain doctor
//! --device cuda:0`) on CUDA GPU 0, against single-device training on that same GPU (same init,
//! same data), at the CPU suite's bars: within 1e-5 (norm-wise relative, per parameter tensor)
//! with SGD and with Adam, and bitwise equal across schedules at the same micro-batch count and
//! weight-gradient group. The cases live in the library (`src/commands/doctor/cases/`), so the
//! device check needs only the release binary; this test runs the same code from `cargo test`.
//!
//! Without a GPU it prints one line, `skipped: no CUDA device (...)`, and passes: that is the
//! case in a build without the `cuda` feature, and on a machine without a driver or GPU.
//! Its twin, `the_suites_cases_pass_on_the_cpu`, runs the whole sweep on the CPU (burn's
//! `flex`) in every CI run. `PIPETRAIN_GPU_SUITE_TABLE=PATH` also writes the GPU run's table to
//! PATH; `PIPETRAIN_GPU_SUITE_SECTIONS="handoffs models"` runs only the sections named;
//! `PIPETRAIN_GPU_SUITE_PRECISION=tf32` starts the GPU at TF32.

use std::sync::Mutex;

use burn::prelude::Device;
use pipetrain::MatmulPrecision;
use pipetrain::commands::doctor::{self, DoctorSettings, Event};

/// burn-flex has one random generator per process, from which every model of a sweep is drawn:
/// the two tests of this binary take turns.
static SWEEP: Mutex<()> = Mutex::new(());

/// The matmul precision the suite runs at: `PIPETRAIN_GPU_SUITE_PRECISION` (fp32 or tf32),
/// else the default (fp32).
fn precision() -> MatmulPrecision {
    std::env::var("PIPETRAIN_GPU_SUITE_PRECISION")
        .ok()
        .map(|p| {
            p.parse()
                .expect("PIPETRAIN_GPU_SUITE_PRECISION: fp32 or tf32")
        })
        .unwrap_or_default()
}

/// Runs the whole sweep (or `PIPETRAIN_GPU_SUITE_SECTIONS`) on `device`, printing each verdict
/// as it ends and the table at the end; the failed cases' names.
fn sweep(device: Device, on: &str, table_file: Option<String>) -> Vec<String> {
    let _turn = SWEEP.lock().unwrap_or_else(|e| e.into_inner());
    let mut settings = DoctorSettings::new(device, on);
    settings.precision = precision();
    settings.sections = std::env::var("PIPETRAIN_GPU_SUITE_SECTIONS").ok().map(|s| {
        s.split([' ', ','])
            .filter(|w| !w.is_empty())
            .map(String::from)
            .collect()
    });
    let report = doctor::run(&settings, &|event| match event {
        Event::Case(c) => eprintln!("{}: {} ({})", c.verdict(), c.name, c.measured),
        Event::Section(name) => eprintln!("section {name}: started"),
        Event::Heartbeat(beat) => eprintln!("{beat}"),
        Event::Found(found) => eprintln!("{found}"),
        Event::Speed(line) => eprintln!("{line}"),
    })
    .unwrap_or_else(|e| panic!("the sweep did not run: {e}"));
    let rendered = report.render();
    println!("{rendered}");
    if let Some(path) = table_file {
        std::fs::write(&path, &rendered)
            .unwrap_or_else(|e| panic!("writing the table to {path}: {e}"));
    }
    assert!(!report.cases.is_empty(), "the sweep ran no case");
    report.failed().map(|c| c.name.clone()).collect()
}

#[test]
fn every_equivalence_case_on_the_gpu_matches_the_same_gpu_alone() {
    let device = match pipetrain::engine::device::cuda_with(0, precision()) {
        Ok(device) => device,
        Err(why) => return println!("skipped: no CUDA device ({why})"),
    };
    let failed = sweep(
        device,
        "cuda:0",
        std::env::var("PIPETRAIN_GPU_SUITE_TABLE").ok(),
    );
    assert!(
        failed.is_empty(),
        "{} case(s) failed on cuda:0: {failed:#?}",
        failed.len()
    );
}

#[test]
fn the_suites_cases_pass_on_the_cpu() {
    let failed = sweep(Device::flex(), "cpu (the suite's own check)", None);
    assert!(
        failed.is_empty(),
        "{} case(s) failed on the cpu: {failed:#?}",
        failed.len()
    );
}
