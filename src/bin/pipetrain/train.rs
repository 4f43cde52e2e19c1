//! `pipetrain train` (being written).

use std::process::ExitCode;

/// Arguments of `pipetrain train`.
#[derive(clap::Args, Debug, Default)]
pub struct TrainArgs {}

pub fn run(_args: &TrainArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    Ok(ExitCode::SUCCESS)
}
