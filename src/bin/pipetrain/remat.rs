//! `--remat`: the re-materialization modes the command line offers, as clap values.
//!
//! The names are those of [`Remat`]'s `FromStr` and `Display` (`never`, `except_last` or
//! `except-last`, `always`); the test below holds the two to each other. The library stays free
//! of clap: the mapping is the `From` here.

use clap::ValueEnum;
use pipetrain::Remat;

/// What a stage keeps between a micro-batch's forward and its backward, as `--remat` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RematArg {
    /// Keep every micro-batch's autodiff graph (needed by batch norm and dropout).
    Never,
    /// Recompute the forward in the backward for every micro-batch but the last.
    #[value(name = "except_last", alias = "except-last")]
    ExceptLast,
    /// Recompute the forward in the backward for every micro-batch.
    Always,
}

impl From<RematArg> for Remat {
    fn from(remat: RematArg) -> Self {
        match remat {
            RematArg::Never => Remat::Never,
            RematArg::ExceptLast => Remat::ExceptLast,
            RematArg::Always => Remat::Always,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;
    use pipetrain::Remat;

    use super::RematArg;

    #[test]
    fn every_mode_is_offered_under_its_library_name_and_aliases() {
        for &arg in RematArg::value_variants() {
            let value = arg.to_possible_value().unwrap();
            assert_eq!(value.get_name(), Remat::from(arg).to_string());
            for name in value.get_name_and_aliases() {
                let parsed: Remat = name.parse().unwrap();
                assert_eq!(parsed, Remat::from(arg), "{name}");
            }
        }
        // An exhaustive match on the library's modes: a new mode fails to compile here until
        // the command line offers it.
        let offered = |mode: Remat| match mode {
            Remat::Never => RematArg::Never,
            Remat::ExceptLast => RematArg::ExceptLast,
            Remat::Always => RematArg::Always,
        };
        for &arg in RematArg::value_variants() {
            assert_eq!(offered(arg.into()), arg);
        }
    }
}
