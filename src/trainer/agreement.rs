//! The settings every process of a multi-process run must share: rank 0 sends its settings to
//! every process at start ([`Distributed::start`](crate::trainer::Distributed::start)), and a
//! process given other ones is refused, naming each setting and both values. Only where a
//! process runs and what it writes may differ ([`PER_PROCESS`]).

/// Settings that may differ between the processes of a run, by key: where each process runs
/// and what it writes (only rank 0 writes metrics and plots; each rank its own trace), and
/// `init`, whose weights rank 0's broadcast replaces.
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

/// The `(field, value)` pairs of a struct's pretty `Debug` form (`format!("{x:#?}")`, every
/// setting a field), values joined onto one line, without the [`PER_PROCESS`] fields and those
/// `left_out` (fields that are no setting).
pub fn fields_of_debug(text: &str, left_out: &[&str]) -> Vec<(String, String)> {
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
    // Which settings a process was given is no setting: a setting given on one process only is
    // compared by its value, which is the default on the others.
    out.retain(|(name, _)| {
        !PER_PROCESS.contains(&name.as_str()) && !left_out.contains(&name.as_str())
    });
    out
}

/// A `Debug` value as a user writes it: `Some(0.01)` → `0.01`, `None` → `unset`.
pub fn shown(value: &str) -> &str {
    match value {
        "None" => "unset",
        v => v
            .strip_prefix("Some(")
            .and_then(|v| v.strip_suffix(')'))
            .unwrap_or(v),
    }
}

/// `settings` as bytes for the wire: one `name<TAB>value` line each (a value must hold neither
/// a tab nor a newline: `Debug` forms escape them).
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

/// The refusal of process `rank` whose settings `mine` differ from rank 0's `theirs`, naming
/// every differing setting with both values; `None` if they agree.
pub fn disagreement(
    rank: usize,
    mine: &[(String, String)],
    theirs: &[(String, String)],
) -> Option<String> {
    let differ: Vec<String> = mine
        .iter()
        .zip(theirs)
        .filter(|(a, b)| a != b)
        .map(|((name, ours), (_, zero))| format!("{name} {ours} (rank 0: {zero})"))
        .collect();
    if differ.is_empty() && mine.len() == theirs.len() {
        return None;
    }
    Some(format!(
        "rank {rank} trains with other settings than rank 0: {}; every process of a run must \
         train the same model on the same data: give every process the same settings (an MPMD \
         command line `mpirun -np 1 pipetrain ... : -np 3 pipetrain ...` must repeat them)",
        differ.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(lr: &str) -> Vec<(String, String)> {
        vec![
            ("batch".to_string(), "16".to_string()),
            ("lr".to_string(), lr.to_string()),
        ]
    }

    #[test]
    fn debug_fields_are_read_without_the_per_process_ones() {
        #[derive(Debug)]
        #[expect(dead_code, reason = "the fields are read through Debug only")]
        struct Args {
            lr: Option<f64>,
            betas: (f64, f64),
            metrics: Option<String>,
            given: Vec<String>,
        }
        let args = Args {
            lr: Some(0.01),
            betas: (0.9, 0.999),
            metrics: Some("m.csv".into()),
            given: vec!["lr".into()],
        };
        let fields = fields_of_debug(&format!("{args:#?}"), &["given"]);
        assert_eq!(
            fields,
            [
                ("lr".to_string(), "Some(0.01)".to_string()),
                ("betas".to_string(), "(0.9, 0.999)".to_string()),
            ]
        );
        assert_eq!((shown("Some(0.01)"), shown("None")), ("0.01", "unset"));
    }

    #[test]
    fn settings_that_differ_are_named_with_both_values() {
        let zero = pairs("0.01");
        assert_eq!(parse(&encode(&zero)), zero);
        assert_eq!(disagreement(1, &pairs("0.01"), &zero), None);
        let e = disagreement(2, &pairs("0.02"), &zero).unwrap();
        assert!(
            e.starts_with("rank 2 trains with other settings than rank 0: lr 0.02 (rank 0: 0.01)"),
            "{e}"
        );
    }
}
