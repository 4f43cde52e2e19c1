//! Which flags a command gave, as opposed to left at their defaults: clap's derive fills every
//! field, so [`record`] reads the value sources of its matches into [`TrainArgs::given`]. A
//! `--config` file's flags are inserted into the command line, so they count as given.
//!
//! [`TrainArgs::given`]: crate::args::TrainArgs::given

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args as _};

use crate::args::TrainArgs;
use crate::{Cli, Command};

/// A train flag given: its key (the long name with `_`, the `--config` file's key) and its
/// values as given.
#[derive(Clone, Debug, Default)]
pub struct GivenFlag {
    /// `hidden_layers`, `lr`, `no_shuffle`.
    pub key: String,
    /// The values as given (one, or a list's items); none for a switch.
    pub values: Vec<String>,
}

impl GivenFlag {
    /// The flag as its user gave it: `--hidden-layers 3`, `--no-shuffle`.
    pub fn shown(&self) -> String {
        let flag = format!("--{}", self.key.replace('_', "-"));
        match self.values.is_empty() {
            true => flag,
            false => format!("{flag} {}", self.values.join(",")),
        }
    }
}

/// `cli` with the ids of the flags given recorded in its train flags (those of `train`,
/// `eval`, `tune` and the bare `pipetrain --stages 2 ...`), from the `matches` it was parsed
/// from.
pub fn record(mut cli: Cli, matches: &ArgMatches) -> Cli {
    let sub = matches.subcommand().map(|(_, sub)| sub);
    match (&mut cli.command, sub) {
        (Some(Command::Train(args) | Command::Eval(args)), Some(sub)) => {
            (args.given, args.given_flags) = (given(sub), flags(sub));
        }
        (Some(Command::Tune(args)), Some(sub)) => {
            (args.train.given, args.train.given_flags) = (given(sub), flags(sub));
        }
        (None, _) => (cli.train.given, cli.train.given_flags) = (given(matches), flags(matches)),
        _ => {}
    }
    cli
}

/// The ids of the arguments in `matches` whose values came from the command line.
fn given(matches: &ArgMatches) -> Vec<String> {
    matches
        .ids()
        .filter(|id| matches.value_source(id.as_str()) == Some(ValueSource::CommandLine))
        .map(ToString::to_string)
        .collect()
}

/// The train flags in `matches` whose values came from the command line (or `--config`), with
/// their keys and values as given; a subcommand's own flags (`tune --top`) are left out.
fn flags(matches: &ArgMatches) -> Vec<GivenFlag> {
    let train = TrainArgs::augment_args(clap::Command::new("train"));
    matches
        .ids()
        .filter(|id| matches.value_source(id.as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|id| {
            let arg = train.get_arguments().find(|a| a.get_id() == id)?;
            let key = arg.get_long()?.replace('-', "_");
            let switch = matches!(arg.get_action(), ArgAction::SetTrue);
            let values = match switch {
                true => Vec::new(),
                false => matches
                    .get_raw(id.as_str())
                    .into_iter()
                    .flatten()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect(),
            };
            Some(GivenFlag { key, values })
        })
        .collect()
}
