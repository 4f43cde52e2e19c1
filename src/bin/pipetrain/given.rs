//! Which flags a command gave, as opposed to left at their defaults: clap's derive fills every
//! field, so [`record`] reads the value sources of its matches into [`TrainArgs::given`]. A
//! `--config` file's flags are inserted into the command line, so they count as given.
//!
//! [`TrainArgs::given`]: crate::args::TrainArgs::given

use clap::ArgMatches;
use clap::parser::ValueSource;

use crate::{Cli, Command};

/// `cli` with the ids of the flags given recorded in its train flags (those of `train`,
/// `eval`, `tune` and the bare `pipetrain --stages 2 ...`), from the `matches` it was parsed
/// from.
pub fn record(mut cli: Cli, matches: &ArgMatches) -> Cli {
    let sub = matches.subcommand().map(|(_, sub)| sub);
    match (&mut cli.command, sub) {
        (Some(Command::Train(args) | Command::Eval(args)), Some(sub)) => args.given = given(sub),
        (Some(Command::Tune(args)), Some(sub)) => args.train.given = given(sub),
        (None, _) => cli.train.given = given(matches),
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
