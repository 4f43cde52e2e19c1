//! `pipetrain plan` (being written).

use std::process::ExitCode;

/// Arguments of `pipetrain plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {}

pub fn run(_args: &PlanArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    Ok(ExitCode::SUCCESS)
}
