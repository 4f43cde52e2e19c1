//! The command line end to end: each module runs the `pipetrain` binary (feature `cli`) on tiny
//! shapes and checks its exit code, output and files; `commands` calls the subcommands' library
//! side (bench, tune, plan, export) in this process.
//!
//! One test binary for the area (docs/design.md, "Test layout"). Nothing here needs the process
//! to itself: the runs are child processes, and the one draw from burn's generator outside
//! `common`'s lock (`bench::run`, in `commands`) feeds no comparison of weights.

#[path = "../common/mod.rs"]
mod common;

mod bad_inputs;
mod bench;
mod causes;
mod checkpoint;
mod checkpoint_writes;
mod commands;
mod config;
mod conflicts;
mod data_order;
mod disk_full;
mod doctor;
mod exit;
mod limits;
mod llama;
mod lockstep;
mod memory_budget;
mod metrics;
mod models;
mod nonfinite;
mod outputs;
mod plan;
mod plot;
mod process;
mod profile;
mod pytorch;
mod remedies;
mod schedules;
mod signals;
mod torch_optim;
mod torchrun;
mod train;
mod tune;
mod unread;
