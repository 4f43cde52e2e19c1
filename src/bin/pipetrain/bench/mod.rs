//! `pipetrain bench`: the experiment table (single device, data parallel, model parallel,
//! GPipe and 1F1B at several micro-batch counts, hybrid, ZeRO-1, the backward variants) for one
//! model, measured in this process through the library — and, with the `mpi` feature, the
//! data-parallel and hybrid layouts again across processes under `mpirun` — optionally
//! alternating row by row with the PyTorch peers. `--device cuda:N` measures the GPU rows
//! instead, each beside PyTorch on the same GPU.

mod args;
mod command;
mod configs;
mod gpu;
mod measure;
mod mpi;
mod peers;
mod probe;
mod rows;
mod table;

pub use args::BenchArgs;
pub use command::run;
pub(crate) use probe::{CpuSnapshot, cpu_model};
