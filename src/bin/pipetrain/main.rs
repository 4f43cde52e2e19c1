//! The `pipetrain` command line: `train` (the default command) and `plan`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod plan;
mod profile;
mod trace;
mod train;

// mimalloc as the binary's allocator: burn-flex allocates a fresh buffer per op; the system
// allocator costs ~40 % of MLP throughput on this workload (DESIGN.md, measured).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Pipeline- and data-parallel training for burn.
#[derive(Parser, Debug)]
#[command(name = "pipetrain", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// `pipetrain --stages 2 ...` is `pipetrain train --stages 2 ...`.
    #[command(flatten)]
    train: train::TrainArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train a model through the pipeline (the default command).
    Train(train::TrainArgs),
    /// Print a schedule's plan: grid, simulated bubble and peak stash per stage.
    Plan(plan::PlanArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Plan(args)) => plan::run(&args),
        Some(Command::Train(args)) => train::run(&args),
        None => train::run(&cli.train),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
