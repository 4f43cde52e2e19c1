//! One rayon pool per worker, so that p workers share the cores without oversubscription.
//!
//! burn's CPU kernels use rayon. Measured on this project's machine: two one-thread workers on
//! two cores run ~1.9× one worker, while one two-thread step scales only 1.3× — on CPU,
//! parallelism belongs to workers. Each worker computes inside its own pool of
//! `max(1, cores / workers)` threads (overridable).

use rayon::{ThreadPool, ThreadPoolBuilder};

/// The cores this process may use (its CPU affinity and quota; 1 if unknown). The one count of
/// cores in pipetrain: the worker pools, the binary's `--threads` cap and the bench read it.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Threads per worker for `workers` workers on this machine.
pub fn threads_per_worker(workers: usize) -> usize {
    (cores() / workers.max(1)).max(1)
}

/// A pool of `threads` threads named after the worker.
pub(crate) fn worker_pool(name: &str, threads: usize) -> ThreadPool {
    let name = name.to_string();
    ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .expect("cannot start a rayon pool")
}
