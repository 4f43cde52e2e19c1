//! The training settings every process of a multi-process run must share: rank 0 sends its
//! flags to every process at start (`distributed`), and a process given other ones (an MPMD
//! command line that does not repeat them) is refused with a usage error naming each flag and
//! both values. Only where a process runs and what it writes may differ ([`PER_PROCESS`]).

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

/// The training flags of `args` as `(field, value)` pairs, from their `Debug` form (every
/// flag is a field), without the [`PER_PROCESS`] ones.
pub fn of(args: &TrainArgs) -> Vec<(String, String)> {
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
    out.retain(|(name, _)| !PER_PROCESS.contains(&name.as_str()));
    out
}

/// [`of`] as bytes for the wire: one `field<TAB>value` line each (a `Debug` value has
/// neither a tab nor a newline: it escapes them).
pub fn encode(settings: &[(String, String)]) -> Vec<u8> {
    settings
        .iter()
        .map(|(name, value)| format!("{name}\t{value}\n"))
        .collect::<String>()
        .into_bytes()
}

/// The settings [`encode`] wrote.
pub fn parse(bytes: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
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

/// The usage error for process `rank` whose settings `mine` differ from rank 0's `theirs`
/// (both from [`of`]), naming every differing flag with both values; `None` if they
/// agree.
pub fn disagreement(
    rank: usize,
    mine: &[(String, String)],
    theirs: &[(String, String)],
) -> Option<String> {
    let differ: Vec<String> = mine
        .iter()
        .zip(theirs)
        .filter(|(a, b)| a != b)
        .map(|((name, ours), (_, zero))| {
            format!("{} {} (rank 0: {})", flag(name), shown(ours), shown(zero))
        })
        .collect();
    if differ.is_empty() && mine.len() == theirs.len() {
        return None;
    }
    Some(format!(
        "rank {rank} trains with other settings than rank 0: {}; every process of a run must \
         train the same model on the same data: give every process the same flags (an MPMD \
         command line `mpirun -np 1 pipetrain ... : -np 3 pipetrain ...` must repeat them)",
        differ.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_differ_are_named_with_both_values() {
        let args = |lr: f64, metrics: &str| TrainArgs {
            lr_flag: Some(lr),
            metrics: Some(metrics.into()),
            batch: 16,
            ..Default::default()
        };
        let zero = of(&args(0.01, "a.csv"));
        assert!(
            zero.iter().any(|(n, v)| n == "batch" && v == "16"),
            "{zero:?}"
        );
        assert!(!zero.iter().any(|(n, _)| n == "metrics"), "{zero:?}");
        assert_eq!(parse(&encode(&zero)), zero);
        assert_eq!(disagreement(1, &of(&args(0.01, "b.csv")), &zero), None);
        let e = disagreement(2, &of(&args(0.02, "a.csv")), &zero).unwrap();
        assert!(
            e.starts_with(
                "rank 2 trains with other settings than rank 0: --lr 0.02 (rank 0: 0.01)"
            ),
            "{e}"
        );
    }
}
