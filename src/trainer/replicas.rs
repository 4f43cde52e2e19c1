//! Whether the replicas of a multi-process run hold equal weights: each process sends a digest
//! of every local worker's weights, and the leader compares each stage's replicas with
//! replica 0. A digest, not the weights: the check runs after every step of a verified run.

use std::hash::{DefaultHasher, Hasher};

use crate::engine::parameters;
use crate::{Layer, Pipeline};

/// Bytes per worker in [`digests`]: replica, stage and digest, each a little-endian `u64`.
const ENTRY: usize = 24;

/// This process's workers' digests, for [`first_apart`]: per local worker its replica, stage
/// and a digest of every bit of its float parameters and buffers.
pub fn digests<L: Layer>(pipeline: &Pipeline<L>) -> Vec<u8> {
    let mut bytes = Vec::new();
    // Under ZeRO-3 between steps the replicas hold disjoint shards: nothing to compare, no
    // entry (a stage without replica 0's entry is never apart).
    for w in pipeline
        .runtime()
        .workers()
        .iter()
        .filter(|w| !w.is_sharded())
    {
        // `DefaultHasher::new` has fixed keys: every process of one binary agrees.
        let mut hasher = DefaultHasher::new();
        for values in parameters(&w.layers().to_vec()) {
            hasher.write_usize(values.len());
            for v in values {
                hasher.write_u32(v.to_bits());
            }
        }
        let id = w.id();
        for word in [id.replica.0 as u64, id.stage.0 as u64, hasher.finish()] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
    }
    bytes
}

/// The lowest replica whose digest of some stage differs from replica 0's of that stage, in
/// `all` (every process's [`digests`], concatenated); `None` when each stage's replicas agree.
pub fn first_apart(all: &[u8]) -> Option<usize> {
    let words = |e: &[u8]| -> [u64; 3] {
        std::array::from_fn(|i| u64::from_le_bytes(e[i * 8..i * 8 + 8].try_into().expect("8")))
    };
    let entries: Vec<[u64; 3]> = all.chunks_exact(ENTRY).map(words).collect();
    let zero = |stage: u64| entries.iter().find(|[r, s, _]| *r == 0 && *s == stage);
    entries
        .iter()
        .filter(|[r, s, d]| zero(*s).is_some_and(|[_, _, z]| z != d) && *r > 0)
        .map(|[r, _, _]| *r as usize)
        .min()
}

#[cfg(test)]
mod tests {
    use super::first_apart;

    fn entries(all: &[[u64; 3]]) -> Vec<u8> {
        all.iter().flatten().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Replicas 2 and 1 differ from replica 0 in different stages: the lowest is named; equal
    /// digests, in any process order, name none.
    #[test]
    fn the_lowest_replica_that_differs_is_named() {
        let agree = entries(&[[1, 0, 7], [1, 1, 9], [0, 1, 9], [0, 0, 7]]);
        assert_eq!(first_apart(&agree), None);
        let apart = entries(&[[0, 0, 7], [0, 1, 9], [1, 0, 7], [1, 1, 8], [2, 0, 6]]);
        assert_eq!(first_apart(&apart), Some(1));
        let only_2 = entries(&[[2, 0, 6], [0, 0, 7], [1, 0, 7]]);
        assert_eq!(first_apart(&only_2), Some(2));
    }
}
