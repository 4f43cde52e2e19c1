//! `pipetrain doctor`: a self-check every user can run on their device. It says which of the
//! libraries the device needs were found (the NVIDIA driver, NVRTC, cuBLAS, the kernel cache;
//! on a CPU, none, and why), then runs the equivalence sweep on that device against
//! single-device training on the same device: schedules × stages × replicas × fp32/bf16,
//! hand-offs, checkpoints across devices. Each case's verdict is told as the case ends, a
//! heartbeat every few seconds while one runs, and the report ends with one table.
//!
//! The GPU suite (`tests/gpu.rs`) runs this sweep on `cuda:0`, and its CPU twin on flex; CI
//! runs `pipetrain doctor --quick` on the CPU. Nothing here prints: the caller gets
//! [`Event`]s.
//!
//! ```no_run
//! use burn::prelude::Device;
//! use pipetrain::commands::doctor::{self, DoctorSettings, Event};
//!
//! let mut settings = DoctorSettings::new(Device::flex(), "cpu");
//! settings.quick = true;
//! let report = doctor::run(&settings, &|event| {
//!     if let Event::Case(case) = event {
//!         println!("{}: {}", case.verdict(), case.name);
//!     }
//! })?;
//! print!("{}", report.render());
//! assert!(report.passed());
//! # Ok::<(), pipetrain::Error>(())
//! ```

mod cases;
mod fixtures;
mod heartbeat;
mod libraries;
mod progress;
mod run;
mod settings;
mod speed;
mod table;

pub use libraries::{Finding, find_library, findings, search_path};
pub use progress::{Event, Heartbeat};
pub use run::{DoctorReport, run, section_names};
pub use settings::DoctorSettings;
pub use speed::SpeedCheck;
pub use table::{Case, render};
