//! `pipetrain doctor [--device cuda:N|cpu] [--quick]`: the self-check of a device
//! ([`pipetrain::commands::doctor`]). It prints what it found, one line per case as the case
//! ends, a heartbeat on stderr every 5 s while a case runs, and one table; it exits 0 when
//! every case passed, [`Exit::DoctorFailed`] when one failed.

use std::path::PathBuf;

use pipetrain::commands::doctor::{self, DoctorSettings, Event, SpeedCheck};

use crate::device::DeviceSpec;
use crate::exit::Exit;
use crate::failure::Failure;
use crate::style::Flags;

/// Arguments of `pipetrain doctor`.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// The device to check: `cpu` (burn's flex) or `cuda:N`.
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda:N")]
    pub device: DeviceSpec,
    /// A few cases of each section on small shapes (about a minute on a CPU), instead of the
    /// whole sweep.
    #[arg(long)]
    pub quick: bool,
    /// Only these sections of the sweep (comma-separated); the error for an unknown one lists
    /// them.
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub sections: Option<Vec<String>>,
    /// What f32 matmuls compute in on a GPU (as `train --matmul-precision`).
    #[arg(long, default_value = "fp32", value_name = "fp32|tf32")]
    pub matmul_precision: pipetrain::MatmulPrecision,
    /// Add a short speed check beside PyTorch, run by this Python (skipped, saying why, when it
    /// cannot import torch).
    #[arg(long, value_name = "PY")]
    pub compare_pytorch: Option<PathBuf>,
    /// The folder of the PyTorch peer scripts (default: found as `pipetrain bench` finds it).
    #[arg(long, value_name = "DIR", requires = "compare_pytorch")]
    pub peers: Option<PathBuf>,
    /// Test knob: the cases whose name holds TEXT fail (their weights are moved before the
    /// comparison), to see the failure path and the exit code on a healthy machine.
    #[arg(long, hide = true, value_name = "TEXT")]
    pub perturb: Option<String>,
}

/// Runs `pipetrain doctor`.
///
/// # Errors
/// Usage: a device that cannot run here, an unknown section. Runtime: a scratch folder that
/// cannot be made.
pub fn run(args: &DoctorArgs) -> Result<Exit, Failure> {
    if args.device == DeviceSpec::Cpu && args.matmul_precision != pipetrain::MatmulPrecision::Fp32 {
        return Err(Failure::usage(format!(
            "--matmul-precision {}: a CPU has no TF32, so the doctor would check nothing \
             different; leave it out, or use --device cuda:N",
            args.matmul_precision
        )));
    }
    let mut settings = DoctorSettings::new(
        args.device
            .device(args.matmul_precision)
            .map_err(Failure::usage)?,
        args.device.to_string(),
    );
    settings.precision = args.matmul_precision;
    settings.quick = args.quick;
    settings.sections = args.sections.clone();
    settings.perturb = args.perturb.clone();
    settings.library_path = doctor::search_path(std::env::var("LD_LIBRARY_PATH").ok().as_deref());
    settings.cache = Some(pipetrain::engine::device::kernel_cache_dir());
    settings.speed = args.compare_pytorch.clone().map(|python| SpeedCheck {
        python,
        peers: args.peers.clone(),
    });
    println!(
        "pipetrain doctor on {}{}",
        settings.name,
        if args.quick { " (quick)" } else { "" }
    );
    let report = doctor::run(&settings, &show).map_err(|e| {
        let said = e.render(&Flags);
        match e.class() {
            pipetrain::ErrorClass::Usage => Failure::usage(format!("doctor: {said}")),
            _ => Failure::runtime(format!("doctor: {said}")),
        }
    })?;
    println!();
    print!("{}", report.render());
    if report.passed() {
        return Ok(Exit::Success);
    }
    let failed: Vec<&str> = report.failed().map(|c| c.name.as_str()).collect();
    eprintln!(
        "error: doctor: {} of {} case(s) failed on {}: {}",
        failed.len(),
        report.cases.len(),
        report.on,
        failed.join("; ")
    );
    Ok(Exit::DoctorFailed)
}

/// Prints one event: findings, sections and cases on stdout as they come, heartbeats on
/// stderr.
fn show(event: Event) {
    match event {
        Event::Found(finding) => println!("{finding}"),
        Event::Section(name) => println!("section {name}"),
        Event::Case(case) => println!("{:<6}  {}  ({})", case.verdict(), case.name, case.measured),
        Event::Heartbeat(beat) => eprintln!("{beat}"),
        Event::Speed(line) => println!("{line}"),
    }
}
