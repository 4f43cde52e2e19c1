//! `pipetrain tune`: measure the model's costs (cached), rank every configuration by the
//! simulator, run the top ones and print measured beside predicted, and write the winner as a
//! `--config` file.

mod args;
mod cache;
mod command;
mod flags;
mod trial;

pub use args::TuneArgs;
pub use command::run;
