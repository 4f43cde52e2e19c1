//! The settings every process of a multi-process run must share: rank 0 sends its settings to
//! every process at start ([`Distributed::start`](crate::trainer::Distributed::start)), and a
//! process given other ones is refused, naming each setting and both values.

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
