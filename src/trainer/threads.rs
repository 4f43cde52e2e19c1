//! Compute threads per worker (`pipetrain`'s `--threads`), capped by the machine's cores.
//! Workers already share the cores (docs/design.md: on CPU, parallelism belongs to workers); more threads
//! than cores only oversubscribe them (`--threads 1000` ran 100× slower), and
//! `--threads 100000` spent minutes spawning threads.

/// `--threads`, capped so that this process's `workers` together use at most `cores` threads
/// (each worker keeps at least one), with the warning to print when the cap applies.
pub fn capped(requested: usize, workers: usize, cores: usize) -> (usize, Option<String>) {
    let workers = workers.max(1);
    let cap = (cores / workers).max(1);
    if requested <= cap {
        return (requested, None);
    }
    let warning = format!(
        "warning: --threads {requested} × {workers} workers would run {} threads on {cores} \
         cores; using {cap} per worker (more only oversubscribes the cores)",
        requested.saturating_mul(workers)
    );
    (cap, Some(warning))
}

/// The cores this process may use (the engine's count).
pub use crate::engine::pool::cores;

#[cfg(test)]
mod tests {
    use super::capped;

    #[test]
    fn threads_within_the_cores_are_kept() {
        assert_eq!(capped(2, 2, 4), (2, None));
        assert_eq!(capped(1, 8, 2), (1, None));
    }

    #[test]
    fn too_many_threads_are_capped_with_a_warning() {
        let (threads, warning) = capped(100_000, 4, 16);
        assert_eq!(threads, 4);
        let warning = warning.unwrap();
        assert!(
            warning.contains("--threads 100000") && warning.contains("using 4"),
            "{warning}"
        );
    }
}
