//! `--schedule`: the schedules the command line offers, as clap values.
//!
//! The names are those of [`ScheduleKind`]'s `FromStr` and `Display` (`gpipe`, `1f1b`, and
//! the aliases it accepts); the test below holds the two to each other. The library stays free
//! of clap: the mapping is the `From` here.

use clap::ValueEnum;
use pipetrain::ScheduleKind;

/// A pipeline schedule, as `--schedule` spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ScheduleArg {
    /// GPipe fill-drain: all forwards, then all backwards; every stage stashes all micro-batches.
    #[value(name = "gpipe", alias = "fill-drain")]
    Gpipe,
    /// 1F1B (PipeDream-Flush): warm-up forwards, then one forward and one backward in turn;
    /// same bubble as GPipe, stage s stashes at most p − s micro-batches.
    #[default]
    #[value(name = "1f1b", aliases = ["one-f-one-b", "pipedream-flush"])]
    OneFOneB,
}

impl From<ScheduleArg> for ScheduleKind {
    fn from(schedule: ScheduleArg) -> Self {
        match schedule {
            ScheduleArg::Gpipe => ScheduleKind::GPipe,
            ScheduleArg::OneFOneB => ScheduleKind::OneFOneB,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;
    use pipetrain::ScheduleKind;

    use super::ScheduleArg;

    #[test]
    fn every_kind_is_offered_under_its_library_name_and_aliases() {
        let kinds: Vec<ScheduleKind> = ScheduleArg::value_variants()
            .iter()
            .map(|&s| ScheduleKind::from(s))
            .collect();
        assert_eq!(kinds, ScheduleKind::ALL);
        for &arg in ScheduleArg::value_variants() {
            let value = arg.to_possible_value().unwrap();
            assert_eq!(value.get_name(), ScheduleKind::from(arg).to_string());
            for name in value.get_name_and_aliases() {
                let parsed: ScheduleKind = name.parse().unwrap();
                assert_eq!(parsed, ScheduleKind::from(arg), "{name}");
            }
        }
    }
}
