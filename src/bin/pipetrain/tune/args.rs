//! The flags of `pipetrain tune`.

use std::path::PathBuf;

use clap::Args;

use crate::args::TrainArgs;

/// `pipetrain tune`: the model, batch, optimizer and `--memory-budget` flags of `train`, and
/// what to search and run.
#[derive(Args, Debug)]
pub struct TuneArgs {
    /// The model and its training settings (`train`'s flags; the knobs tune chooses —
    /// --stages, --replicas, --micro-batches, --schedule, --balance — and the flags only
    /// `train` reads are refused; the data and schedule flags need --apply, whose file carries
    /// them; --remat, when given, is the only mode tried).
    #[command(flatten)]
    pub train: TrainArgs,
    /// Workers (cores) to plan for, one compute thread each [default: this machine's cores].
    #[arg(long, help_heading = "Tune")]
    pub workers: Option<usize>,
    /// Rows of the ranked table to print.
    #[arg(long, default_value_t = 5, help_heading = "Tune")]
    pub top: usize,
    /// How many of the top configurations to run (0: none) [default: --top].
    #[arg(long, help_heading = "Tune")]
    pub run: Option<usize>,
    /// Timed steps of each run (over 4 alternating rounds, each after an untimed step).
    #[arg(long, default_value_t = 24, help_heading = "Tune")]
    pub run_steps: usize,
    /// Largest micro-batch count tried (powers of two that split the batch evenly).
    #[arg(long, default_value_t = 32, help_heading = "Tune")]
    pub max_micro_batches: usize,
    /// Schedules tried, comma-separated [default: 1f1b,gpipe,zb-h1,interleaved,zb-v].
    #[arg(long, value_delimiter = ',', help_heading = "Tune")]
    pub schedules: Option<Vec<String>>,
    /// Write the winner (the fastest measured run, or the top prediction with --run 0) as a
    /// TOML file that `pipetrain train --config FILE` reads.
    #[arg(long, value_name = "FILE", help_heading = "Tune")]
    pub apply: Option<PathBuf>,
    /// Where measured cost tables are cached [default: $XDG_CACHE_HOME/pipetrain, else
    /// ~/.cache/pipetrain].
    #[arg(long, value_name = "DIR", help_heading = "Tune")]
    pub cache_dir: Option<PathBuf>,
    /// Measure again even when a cached cost table exists (and replace it).
    #[arg(long, help_heading = "Tune")]
    pub remeasure: bool,
}
