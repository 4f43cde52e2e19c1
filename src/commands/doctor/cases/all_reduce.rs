//! The in-process all-reduce alone, between two threads whose sums are scaled in place at once.

use burn::prelude::*;

use super::Scope;
use crate::commands::doctor::table::Table;

/// The in-process all-reduce between two member threads, as replicas run it: each round, both
/// members sum four tensors and at once scale their result in place (the only handle, as an
/// optimizer step does with a gradient), then read it. Both must hold the rank-order sum's bits
/// every round (halving is exact). Two ways to break it on a GPU, both closed since the H100
/// check (`engine::handoff`): an owner that adds into the first peer's own buffer on its
/// stream and sends it back, and a lazy device read that an in-place write overtakes.
pub(super) fn all_reduce_between_threads(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    use crate::engine::{Abort, ChannelCollective, Collective};
    let (rounds, big) = match crate::engine::device::is_cpu(device.device) {
        true => (10, 1 << 14),
        false => (50, 1 << 22),
    };
    let lens = [big, big / 16, 4096, 1000];
    let value = |rank: usize, k: usize, i: usize| {
        ((i * 7 + k * 31 + rank * 29) % 1021) as f32 / 1024.0 - 0.5
    };
    let inputs = |rank: usize| -> Vec<Vec<f32>> {
        let n = lens.iter().enumerate();
        n.map(|(k, &n)| (0..n).map(|i| value(rank, k, i)).collect())
            .collect()
    };
    // The rank-order sum, halved (exact), as bits.
    let expected: Vec<Vec<u32>> = inputs(0)
        .iter()
        .zip(inputs(1))
        .map(|(a, b)| {
            a.iter()
                .zip(b)
                .map(|(a, b)| ((a + b) * 0.5).to_bits())
                .collect()
        })
        .collect();
    let case = format!(
        "regression: all-reduce between 2 threads, {rounds} rounds, sums scaled in place at once"
    );
    let abort = std::sync::Arc::new(Abort::new());
    let members = ChannelCollective::group(2, &abort);
    // Per member: the rounds whose result differs from the rank-order sum.
    let outcome: Result<Vec<Vec<usize>>, String> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .into_iter()
            .map(|mut c| {
                let (mine, expected) = (inputs(c.rank()), &expected);
                s.spawn(move || -> Result<Vec<usize>, String> {
                    let mut wrong = Vec::new();
                    for round in 1..=rounds {
                        let tensors = mine
                            .iter()
                            .map(|v| {
                                Tensor::<1>::from_data(
                                    TensorData::new(v.clone(), [v.len()]),
                                    device.device,
                                )
                            })
                            .collect();
                        let sums = c.all_reduce_tensors(tensors).map_err(|e| e.to_string())?;
                        // As an optimizer step does with a gradient: scale in place at once.
                        let halves: Vec<Tensor<1>> =
                            sums.into_iter().map(|s| s.mul_scalar(0.5)).collect();
                        let exact = halves.into_iter().zip(expected).all(|(h, bits)| {
                            let got = h.into_data().try_to_vec::<f32>().expect("f32 values");
                            got.iter().map(|g| g.to_bits()).eq(bits.iter().copied())
                        });
                        if !exact {
                            wrong.push(round);
                        }
                    }
                    Ok(wrong)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a member panicked".into())))
            .collect()
    });
    match outcome {
        Err(e) => t.failed(case, e),
        Ok(wrong) => t.verdict(
            case,
            match wrong.iter().all(Vec::is_empty) {
                true => "bitwise equal every round".into(),
                false => wrong
                    .iter()
                    .enumerate()
                    .map(|(rank, w)| format!("rank {rank}: {} wrong {w:?}", w.len()))
                    .collect::<Vec<_>>()
                    .join("; "),
            },
            "bitwise",
            wrong.iter().all(Vec::is_empty),
        ),
    }
}
