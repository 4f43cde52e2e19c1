//! The training flags every process of a multi-process run must share, as the library's
//! [`Launch::settings`](pipetrain::trainer::Launch::settings): rank 0 sends them to every
//! process at start, and a process given other ones (an MPMD command line that does not repeat
//! them) is refused with a usage error naming each flag and both values. Only where a process
//! runs and what it writes may differ (the library's
//! [`PER_PROCESS`](pipetrain::trainer::agreement::PER_PROCESS)).

use pipetrain::trainer::agreement::{fields_of_debug, shown};

use crate::args::TrainArgs;

/// Fields of [`TrainArgs`] that are no flag: which flags were given.
const BOOKKEEPING: [&str; 2] = ["given", "given_flags"];

/// The training flags of `args` as `(flag, value)` pairs as a user writes them (`--lr`,
/// `0.01`), from their `Debug` form (every flag is a field), without the
/// [`PER_PROCESS`](pipetrain::trainer::agreement::PER_PROCESS) ones.
pub fn of(args: &TrainArgs) -> Vec<(String, String)> {
    fields_of_debug(&format!("{args:#?}"), &BOOKKEEPING)
        .into_iter()
        .map(|(name, value)| (flag(&name), shown(&value).to_string()))
        .collect()
}

/// The flag a `TrainArgs` field stands for.
fn flag(field: &str) -> String {
    match field {
        "lr_flag" => "--lr".to_string(),
        _ => format!("--{}", field.replace('_', "-")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_named_and_shown_as_typed_without_per_process_ones() {
        let args = |lr: f64, metrics: &str| TrainArgs {
            lr_flag: Some(lr),
            metrics: Some(metrics.into()),
            batch: 16,
            ..Default::default()
        };
        let zero = of(&args(0.01, "a.csv"));
        assert!(
            zero.iter().any(|(n, v)| n == "--batch" && v == "16"),
            "{zero:?}"
        );
        assert!(
            zero.iter().any(|(n, v)| n == "--lr" && v == "0.01"),
            "{zero:?}"
        );
        assert!(!zero.iter().any(|(n, _)| n == "--metrics"), "{zero:?}");
        assert_eq!(of(&args(0.01, "b.csv")), zero);
    }
}
