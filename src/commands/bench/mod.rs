//! Measuring throughput: the experiment table of `pipetrain bench` as a library.
//!
//! [`run`] measures every configuration of the table (single device, data parallel, model
//! parallel, GPipe and 1F1B at several micro-batch counts, the schedules beyond 1F1B on the MLP
//! and a GPT, hybrid, ZeRO-1, the backward variants; with an MPI launcher the data-parallel and
//! hybrid layouts across processes) in this process, each from a fresh pipeline, optionally
//! alternating row by row with the PyTorch peers ([`Peers`]). Each [`Line`] carries the row's
//! measurements, its limit and ceiling (from the reference rows) and its peer's result;
//! [`render`] writes them as the markdown document of `docs/benchmarks.md`. [`run_gpu`] measures
//! the GPU rows on one device instead. Nothing here prints: progress comes through a callback.
//!
//! ```no_run
//! let settings = pipetrain::commands::bench::BenchSettings {
//!     width: 16,
//!     hidden_layers: 2,
//!     batch: 32,
//!     only: Some("1f1b".into()),
//!     ..Default::default()
//! };
//! let report = pipetrain::commands::bench::run(&settings, &mut |_| {})?;
//! for line in &report.lines {
//!     println!("{}: {:.0} samples/s", line.row.label(), pipetrain::commands::bench::median(&line.ours.rates));
//! }
//! # Ok::<(), pipetrain::Error>(())
//! ```

mod child;
mod configs;
mod gpu;
mod measure;
mod mpi;
mod peers;
mod probe;
mod rows;
mod run;
mod settings;
mod table;

#[cfg(feature = "trainer")]
pub use configs::table_models;
pub use configs::{BenchModel, GPT, Peer, Row, Shape, Workload};
pub use gpu::{GpuLine, GpuPeer, GpuReport, gpu_peers_dir, run_gpu};
pub use measure::Measured;
pub use peers::{HOW_TO_GET_TORCH, PeerResult, Peers};
pub use probe::{CpuSnapshot, cores, cpu_model, gpu_model};
pub use run::{BenchReport, Progress, run};
pub use settings::BenchSettings;
pub use table::{Header, Line, median, render};
