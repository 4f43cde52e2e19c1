//! `--data`: where the batches come from (the library's [`Data`], opened by [`Data::open`]
//! with the flags' [`DataSettings`]: labels against `--classes` or `--vocab`, finite floats
//! unless `--allow-nonfinite-inputs`, split by `--held-out`, batched by a loader seeded with
//! `--seed`). The binary parses the spec, refuses flags that only loaded data takes, and sorts
//! the library's refusals into usage and runtime errors.

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
/// Usage: a spec that does not parse, `--held-out`, `--keep-last` or `--no-shuffle` with
/// synthetic data, and the library's refusals of the command line
/// ([`pipetrain::trainer::DataProblem::is_usage`]). Runtime: the files are unreadable or
/// corrupt.
pub fn open(args: &TrainArgs, batch: usize) -> Result<Data, Failure> {
    let spec: DataSpec = args
        .data
        .parse()
        .map_err(|e| Failure::usage(format!("--data: {e}")))?;
    if spec == DataSpec::Synthetic {
        synthetic(args)?;
    }
    let model = args
        .model
        .to_possible_value()
        .map_or("?".into(), |v| v.get_name().to_string());
    let task = match args.model {
        ModelKind::Gpt => Task::NextToken {
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
        keep_last: args.keep_last,
        shuffle: !args.no_shuffle,
        allow_nonfinite: args.allow_nonfinite_inputs,
        parts: args.replicas * args.micro_batches,
    };
    Data::open(&spec, &settings).map_err(|e| {
        let usage = match &e {
            pipetrain::Error::Data { problem, .. } => problem.is_usage(),
            _ => false,
        };
        match usage {
            true => Failure::usage(cli_message(&e)),
            false => Failure::runtime(cli_message(&e)),
        }
    })
}

/// Refuses the flags that only loaded data takes.
fn synthetic(args: &TrainArgs) -> Result<(), Failure> {
    if args.held_out.is_some_and(|h| h != 0.0) {
        return Err(Failure::usage(format!(
            "--held-out {} applies to loaded data; synthetic data holds out one batch of \
             --batch rows (--held-out 0: none): drop --held-out or give --data",
            args.held_out()
        )));
    }
    if args.keep_last {
        return Err(Failure::usage(
            "--keep-last applies to loaded data (synthetic data has no epochs): drop it or give \
             --data",
        ));
    }
    if args.no_shuffle {
        return Err(Failure::usage(
            "--no-shuffle keeps the order of a loaded data set; synthetic data has no order to \
             keep: drop --no-shuffle or give --data",
        ));
    }
    Ok(())
}

/// A batch error of `data` with the flag that names it: `--data SPEC: …`.
pub fn failed(data: &Data, error: pipetrain::Error) -> pipetrain::Error {
    match (error, data.spec()) {
        (pipetrain::Error::Batch { index, reason }, Some(spec)) => pipetrain::Error::Batch {
            index,
            reason: format!("--data {spec}: {reason}"),
        },
        (other, _) => other,
    }
}
