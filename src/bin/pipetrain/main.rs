//! The `pipetrain` command line: `train` (the default command), `eval`, `plan`, `bench`,
//! `export`, `tune` and `doctor`. Its exit
//! codes are [`exit::Exit`]'s.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::exit::Exit;

// `println!`, `print!` and `eprintln!` for every module below (they shadow std's): write to
// stdout or stderr and ignore errors. A closed stdout (`pipetrain train | head -1`) or stderr (a
// terminal that closed, whose SIGHUP stops the run gracefully) must not panic a training run,
// whose checkpoint, metrics and trace still matter; its lines are then simply lost.
macro_rules! println {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
macro_rules! print {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod args;
mod backward;
mod bench;
mod checkpoints;
mod compare;
mod config;
mod conflicts;
mod data;
mod device;
mod distributed;
mod doctor;
mod eval;
mod exit;
mod export;
mod failure;
mod footprint;
mod given;
mod guard;
mod help;
mod interrupt;
mod model;
mod optimizer;
mod outcome;
mod paths;
mod plan;
mod plan_limits;
mod progress;
mod remat;
mod run_failure;
mod schedule;
mod settings;
mod setup;
mod style;
mod train;
mod tune;

// mimalloc as the binary's allocator: burn-flex allocates a fresh buffer per op; the system
// allocator costs ~40 % of MLP throughput on this workload (docs/design.md, measured).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Pipeline- and data-parallel training for burn.
// `args_override_self`: a flag given twice keeps its last value, so the command line overrides
// what `--config` inserted before it.
#[derive(Parser, Debug)]
#[command(
    name = "pipetrain",
    version,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// `pipetrain --stages 2 ...` is `pipetrain train --stages 2 ...`.
    #[command(flatten)]
    train: args::TrainArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train a model through the pipeline (the default command).
    #[command(args_override_self = true)]
    Train(args::TrainArgs),
    /// Evaluate a model built from --seed on the held-out split of --data: accuracy, or
    /// perplexity for --model gpt. Takes the model and data flags of `train`.
    #[command(args_override_self = true)]
    Eval(args::TrainArgs),
    /// Print a schedule's plan: grid, simulated bubble and peak stash per stage; --compare puts
    /// every schedule in one table; --format csv writes the plan for `train --plan`.
    #[command(after_help = Exit::table())]
    Plan(plan::PlanArgs),
    /// Measure the experiment table (single device, data parallel, model parallel, GPipe and
    /// 1F1B at several micro-batch counts, hybrid, ZeRO-1) as a markdown document, optionally
    /// against the PyTorch peers in the same run.
    #[command(args_override_self = true)]
    Bench(bench::BenchArgs),
    /// Write a checkpoint's weights as the state dict of the PyTorch module that mirrors its
    /// model (names and [out, in] Linear weights; docs/pytorch.md).
    #[command(after_help = Exit::table())]
    Export(export::ExportArgs),
    /// Choose replicas × stages × micro-batches × schedule × remat for the model: measure its
    /// costs (cached), rank every configuration by the simulator under --memory-budget, run
    /// the top ones beside their predictions, and --apply FILE writes the winner for --config.
    #[command(args_override_self = true, after_help = Exit::table())]
    Tune(tune::TuneArgs),
    /// Check this machine's device: the libraries it needs (driver, NVRTC, cuBLAS, the kernel
    /// cache), then the equivalence sweep against single-device training on the same device
    /// (schedules × stages × replicas × fp32/bf16, hand-offs, checkpoints), one line per case as
    /// it ends, and one table; --compare-pytorch adds a short speed check.
    #[command(after_help = Exit::table())]
    Doctor(doctor::DoctorArgs),
}

fn main() -> ExitCode {
    run(std::env::args_os().collect()).into()
}

/// Runs the command `argv` names and says how it ended; every error is printed here.
fn run(argv: Vec<std::ffi::OsString>) -> Exit {
    let argv = match config::expand(argv) {
        Ok(argv) => argv,
        Err(error) => {
            eprintln!("error: {error}");
            return Exit::Usage;
        }
    };
    let parsed = Cli::command()
        .try_get_matches_from(argv)
        .and_then(|matches| Cli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let cli = match parsed {
        Ok((cli, matches)) => given::record(cli, &matches),
        Err(error) => {
            // Usage errors, and also `--help` / `--version`, which print to stdout and succeed.
            let _ = error.print();
            return if error.use_stderr() {
                Exit::Usage
            } else {
                Exit::Success
            };
        }
    };
    let result = match cli.command {
        Some(Command::Plan(args)) => plan::run(&args),
        Some(Command::Train(args)) => train::run(&args),
        Some(Command::Eval(args)) => eval::run(&args),
        Some(Command::Bench(args)) => bench::run(&args),
        Some(Command::Export(args)) => export::run(&args),
        Some(Command::Tune(args)) => tune::run(&args),
        Some(Command::Doctor(args)) => doctor::run(&args),
        None => train::run(&cli.train),
    };
    match result {
        Ok(exit) => exit,
        Err(failure) => {
            // The failure words its remedy as flags (`--stages 1`), where the library's own
            // errors say builder calls (`.stages(1)`).
            if !failure.is_printed() {
                eprintln!("error: {failure}");
            }
            failure.exit()
        }
    }
}
