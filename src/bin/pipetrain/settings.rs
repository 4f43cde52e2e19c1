//! The training flags every process of a multi-process run must share, as the library's
//! [`Launch::settings`](pipetrain::trainer::Launch::settings): rank 0 sends them to every
//! process at start, and a process given other ones (an MPMD command line that does not repeat
//! them) is refused with a usage error naming each flag and both values. Only where a process
//! runs and what it writes may differ ([`PER_PROCESS`]).

use crate::args::TrainArgs;

/// Flags that may differ between the processes of a run: where each process runs and what it
/// writes (only rank 0 writes metrics and plots; each rank its own trace), and `--init`, whose
/// weights rank 0's broadcast replaces.
pub const PER_PROCESS: [&str; 8] = [
    "config",
    "init",
    "device",
    "threads",
    "profile",
    "metrics",
    "plot",
    "comm_timeout",
];

/// Fields of [`TrainArgs`] that are no flag: which flags were given.
const BOOKKEEPING: [&str; 2] = ["given", "given_flags"];

/// The training flags of `args` as `(flag, value)` pairs as a user writes them (`--lr`,
/// `0.01`), without the [`PER_PROCESS`] ones.
pub fn of(args: &TrainArgs) -> Vec<(String, String)> {
    fields(args)
        .into_iter()
        .map(|(name, value)| (flag(&name), shown(&value).to_string()))
        .collect()
}

/// The training flags of `args` as `(field, value)` pairs, from their `Debug` form (every
/// flag is a field), without the [`PER_PROCESS`] ones.
fn fields(args: &TrainArgs) -> Vec<(String, String)> {
    let text = format!("{args:#?}");
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines().skip(1) {
        let field = line
            .strip_prefix("    ")
            .filter(|l| !l.starts_with(' '))
            .and_then(|l| l.split_once(": "));
        match (field, out.last_mut()) {
            (Some((name, value)), _) => out.push((name.to_string(), value.to_string())),
            (None, Some((_, value))) if line != "}" => value.push_str(line.trim()),
            _ => {}
        }
    }
    for (_, value) in &mut out {
        // `Some(\n 0.01,\n)` joined: `Some(0.01,)` → `Some(0.01)`.
        *value = value
            .trim_end_matches(',')
            .replace(",)", ")")
            .replace(",]", "]")
            .replace(",}", "}")
            .replace(',', ", ");
    }
    // Which flags a process was given is no setting: a flag given on one process only is
    // compared by its value, which is the default on the others.
    out.retain(|(name, _)| {
        !PER_PROCESS.contains(&name.as_str()) && !BOOKKEEPING.contains(&name.as_str())
    });
    out
}

/// The flag a `TrainArgs` field stands for.
fn flag(field: &str) -> String {
    match field {
        "lr_flag" => "--lr".to_string(),
        _ => format!("--{}", field.replace('_', "-")),
    }
}

/// A `Debug` value as a user writes it: `Some(0.01)` → `0.01`, `None` → `unset`.
fn shown(value: &str) -> &str {
    match value {
        "None" => "unset",
        v => v
            .strip_prefix("Some(")
            .and_then(|v| v.strip_suffix(')'))
            .unwrap_or(v),
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
