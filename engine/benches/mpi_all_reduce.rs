//! The data-parallel all-reduce over MPI, alone: MLP-8x1024's gradients (8 × 1024² + biases and
//! the 10-class head, 33.6 MB) summed over the ranks in 25 MiB buckets, as a worker's `AR` action
//! does, through [`MpiCollective`](pipetrain_engine::mpi::MpiCollective).
//!
//! ```text
//! cargo bench -p pipetrain-engine --features mpi --bench mpi_all_reduce --no-run
//! mpirun -np 2 target/release/deps/mpi_all_reduce-<hash> [ROUNDS]
//! ```
//!
//! Rank 0 prints each round's time and the median; every rank checks the sums.

use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::prelude::*;
use pipetrain_engine::mpi::{Comm, MpiFabric, Placement};
use pipetrain_engine::{Abort, Fabric, World};

// As the `pipetrain` binary: with the system allocator every received 4 MB buffer is a fresh
// mapping whose pages fault in during the copy, which costs more than the copy.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// MLP-8x1024's parameter tensors, flattened: (weight, bias) × 8 hidden layers, then the head.
fn sizes() -> Vec<usize> {
    let mut sizes = Vec::new();
    for _ in 0..8 {
        sizes.extend([1024 * 1024, 1024]);
    }
    sizes.extend([1024 * 10, 10]);
    sizes
}

/// Consecutive tensor ranges of at most `elems` values (an oversize tensor alone), as the
/// worker's buckets.
fn buckets(sizes: &[usize], elems: usize) -> Vec<std::ops::Range<usize>> {
    let (mut out, mut start, mut filled) = (Vec::new(), 0, 0);
    for (i, &n) in sizes.iter().enumerate() {
        if i > start && filled + n > elems {
            out.push(start..i);
            (start, filled) = (i, 0);
        }
        filled += n;
    }
    out.push(start..sizes.len());
    out
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let comm = Comm::start(Duration::from_secs(60)).expect("MPI starts");
    let me = comm.identity();
    let placement = Placement::new(me.rank, me.size, 1, me.size, 1).expect("one worker per rank");
    let world = World::with_local(me.size, 1, placement.local()).expect("world");
    let mut fabric = MpiFabric::new(comm.clone(), placement);
    let abort = Arc::new(Abort::new());
    let mut links = fabric.connect(&world, &[], &[], &abort).expect("links");
    let collective = &mut links[0].collective;
    let device = Device::flex();
    let sizes = sizes();
    let buckets = buckets(&sizes, 25 * 1024 * 1024 / 4);
    let total: usize = sizes.iter().sum();
    let mut times = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Rank r contributes r + 1 everywhere: the sum is size·(size+1)/2.
        let tensors: Vec<Tensor<1>> = sizes
            .iter()
            .map(|&n| Tensor::full([n], (me.rank + 1) as f32, &device))
            .collect();
        comm.broadcast(Some(vec![0])).expect("barrier");
        let start = Instant::now();
        let mut tensors = tensors.into_iter();
        let mut summed = Vec::with_capacity(sizes.len());
        for bucket in &buckets {
            let part: Vec<Tensor<1>> = tensors.by_ref().take(bucket.len()).collect();
            summed.extend(collective.all_reduce_tensors(part).expect("all-reduce"));
        }
        let elapsed = start.elapsed();
        let expected = (me.size * (me.size + 1) / 2) as f32;
        for t in &summed {
            let values = t
                .clone()
                .into_data()
                .try_to_vec::<f32>()
                .expect("f32 values");
            assert!(
                values.iter().all(|&v| v == expected),
                "round {round}: a sum is not {expected}"
            );
        }
        times.push(elapsed);
        if me.rank == 0 {
            println!(
                "round {round:>2}: {:>7.2} ms ({} buckets, {:.1} MB)",
                elapsed.as_secs_f64() * 1e3,
                buckets.len(),
                (total * 4) as f64 / 1e6
            );
        }
    }
    times.sort();
    if me.rank == 0 {
        println!(
            "median {:.2} ms over {rounds} rounds, {} ranks",
            times[rounds / 2].as_secs_f64() * 1e3,
            me.size
        );
    }
    drop(links);
    comm.shutdown(true);
}
