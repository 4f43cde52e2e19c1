//! `pipetrain tune`: the flags mapped onto [`pipetrain::commands::tune::tune`]'s settings, its cost
//! table, ranking and trial runs printed, and the winner written as a `--config` file.

mod args;
mod command;
mod flags;

pub use args::TuneArgs;
pub use command::run;
