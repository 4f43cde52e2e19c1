//! `--data`: where the batches come from (the library's [`Data`], opened by [`Data::open`]
//! with the flags' [`DataSettings`]: labels against `--classes` or `--vocab`, finite floats
//! unless `--allow-nonfinite-inputs`, split by `--held-out`, batched by a loader seeded with
//! `--seed`). The binary parses the spec and sorts the library's refusals into usage and
//! runtime errors.

use clap::ValueEnum;
pub use pipetrain::trainer::{Data, Shapes};
use pipetrain::trainer::{DataSettings, Task};
use pipetrain_data::DataSpec;

use crate::args::{ModelKind, TrainArgs};
use crate::failure::Failure;
use crate::run_failure::cli_message;

/// Loads `--data` (nothing for `synthetic`), checks its values (labels and token ids in
/// `0..--classes` or `0..--vocab`, floats finite unless `--allow-nonfinite-inputs`), holds
/// out `--held-out` of it, and batches the rest in mini-batches of `batch` examples shuffled
/// with `--seed`. `--context` is the window length of `text:` data.
///
/// # Errors
/// Usage: a spec that does not parse, and the library's refusals of the command line
/// (`--held-out`, `--keep-last` or `--no-shuffle` with synthetic data, among others)
/// ([`pipetrain::trainer::DataProblem::is_usage`]). Runtime: the files are unreadable or
/// corrupt.
pub fn open(args: &TrainArgs, batch: usize) -> Result<Data, Failure> {
    let spec: DataSpec = args
        .data
        .parse()
        .map_err(|e| Failure::usage(format!("--data: {e}")))?;
    let model = args
        .model
        .to_possible_value()
        .map_or("?".into(), |v| v.get_name().to_string());
    let hf = crate::model::hf_init(args).map_err(Failure::usage)?;
    let task = match (args.model, hf) {
        (_, Some((_, config))) => Task::NextToken {
            model: "llama".into(),
            vocab: config.vocab,
        },
        (ModelKind::Gpt | ModelKind::Llama, None) => Task::NextToken {
            model,
            vocab: args.vocab,
        },
        _ => Task::Classify {
            model,
            classes: args.classes,
        },
    };
    let settings = DataSettings {
        task,
        batch,
        seed: args.seed,
        held_out: args.held_out,
        context: args.context,
        tokenizer: args.tokenizer.clone(),
        keep_last: args.keep_last,
        shuffle: !args.no_shuffle,
        allow_nonfinite: args.allow_nonfinite_inputs,
        parts: args.layout().parts(),
        replicas: args.replicas,
    };
    Data::open(&spec, &settings).map_err(|e| {
        let usage = match &e {
            pipetrain::Error::Run(pipetrain::RunError::Data { problem, .. }) => problem.is_usage(),
            _ => false,
        };
        match usage {
            true => Failure::usage(cli_message(&e)),
            false => Failure::runtime(cli_message(&e)),
        }
    })
}
