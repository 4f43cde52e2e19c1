//! `pipetrain bench`: the flags ([`BenchArgs`]) mapped onto [`pipetrain::commands::bench`]'s settings,
//! its progress and document printed. `--device cuda:N` measures the GPU rows instead.

mod args;
mod command;

pub use args::BenchArgs;
pub use command::run;
