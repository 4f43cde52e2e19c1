//! `DistributedSampler` against PyTorch's rule: hand-computed cases and properties.

use std::collections::BTreeSet;

use pipetrain_data::{DataError, DistributedSampler, ParameterProblem, SamplerConfig};
use pipetrain_schedules::remedy::{Plain, Remedied, Remedy, Setting, Value};
use proptest::prelude::*;

fn sampler(len: usize, replicas: usize, rank: usize, drop_last: bool) -> DistributedSampler {
    SamplerConfig {
        replicas,
        rank,
        shuffle: false,
        seed: 0,
        drop_last,
    }
    .build(len)
    .unwrap()
}

fn shards(len: usize, replicas: usize, config: SamplerConfig, epoch: u64) -> Vec<Vec<usize>> {
    (0..replicas)
        .map(|rank| {
            SamplerConfig {
                replicas,
                rank,
                ..config
            }
            .build(len)
            .unwrap()
            .indices(epoch)
        })
        .collect()
}

#[test]
fn pads_like_pytorch_len_10_replicas_3() {
    // torch DistributedSampler(range(10), num_replicas=3, shuffle=False): total 12.
    assert_eq!(sampler(10, 3, 0, false).indices(0), vec![0, 3, 6, 9]);
    assert_eq!(sampler(10, 3, 1, false).indices(0), vec![1, 4, 7, 0]);
    assert_eq!(sampler(10, 3, 2, false).indices(0), vec![2, 5, 8, 1]);
    assert_eq!(sampler(10, 3, 0, false).num_samples(), 4);
    assert_eq!(sampler(10, 3, 0, false).total_size(), 12);
}

#[test]
fn drops_like_pytorch_len_10_replicas_3() {
    // drop_last=True: num_samples = ceil((10 - 3) / 3) = 3, total 9; example 9 unseen.
    assert_eq!(sampler(10, 3, 0, true).indices(0), vec![0, 3, 6]);
    assert_eq!(sampler(10, 3, 1, true).indices(0), vec![1, 4, 7]);
    assert_eq!(sampler(10, 3, 2, true).indices(0), vec![2, 5, 8]);
}

#[test]
fn pads_cyclically_when_fewer_examples_than_replicas() {
    // len 2, 5 replicas: padded list 0 1 0 1 0 (PyTorch repeats the list ceil(3/2) times).
    let got: Vec<Vec<usize>> = (0..5).map(|r| sampler(2, 5, r, false).indices(0)).collect();
    assert_eq!(got, vec![vec![0], vec![1], vec![0], vec![1], vec![0]]);
    // len 3, 8 replicas: 0 1 2 0 1 2 0 1.
    let got: Vec<usize> = (0..8)
        .map(|r| sampler(3, 8, r, false).indices(0)[0])
        .collect();
    assert_eq!(got, vec![0, 1, 2, 0, 1, 2, 0, 1]);
}

#[test]
fn single_replica_sees_everything_in_order() {
    assert_eq!(sampler(5, 1, 0, false).indices(7), vec![0, 1, 2, 3, 4]);
    assert_eq!(sampler(5, 1, 0, true).indices(7), vec![0, 1, 2, 3, 4]);
}

#[test]
fn rejects_bad_parameters_with_the_value_and_a_remedy() {
    let config = SamplerConfig::default();
    let err = SamplerConfig {
        replicas: 0,
        ..config
    }
    .build(10)
    .unwrap_err();
    assert!(matches!(
        err,
        DataError::BadParameter {
            name: "replicas",
            problem: ParameterProblem::NoReplicas,
            ..
        }
    ));
    // The facts alone, and the fix as a setting, which each front end words itself.
    assert_eq!(
        err.to_string(),
        "replicas = 0 is invalid: at least one replica is needed"
    );
    assert_eq!(
        err.remedy(),
        Some(Remedy::set(Setting::Replicas, Value::Count(1)))
    );
    assert_eq!(
        err.explain(&Plain),
        "replicas = 0 is invalid: at least one replica is needed; use replicas = 1"
    );
    let err = SamplerConfig {
        replicas: 4,
        rank: 4,
        ..config
    }
    .build(10)
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("rank = 4") && text.contains("0..4"), "{text}");
    let err = config.build(0).unwrap_err();
    assert!(err.to_string().contains("len = 0"), "{err}");
    let err = SamplerConfig {
        replicas: 4,
        drop_last: true,
        ..config
    }
    .build(3)
    .unwrap_err();
    let text = err.explain(&Plain);
    assert!(text.contains("drop_last = false"), "{text}");
}

#[test]
fn shuffled_order_is_a_fixed_function_of_seed_and_epoch() {
    // Golden values: a change here breaks bit-for-bit resume of saved runs.
    let s = SamplerConfig {
        seed: 42,
        ..Default::default()
    }
    .build(10)
    .unwrap();
    assert_eq!(s.indices(0), vec![9, 7, 2, 5, 0, 1, 4, 3, 8, 6]);
    assert_eq!(s.indices(1), vec![8, 2, 4, 6, 9, 0, 5, 3, 1, 7]);
    // Every rank shards the same permutation.
    let rank1 = SamplerConfig {
        seed: 42,
        replicas: 3,
        rank: 1,
        ..Default::default()
    }
    .build(10)
    .unwrap();
    assert_eq!(rank1.indices(0), vec![7, 0, 3, 9]); // positions 1, 4, 7, 10 (= 0, padded)
}

fn config_strategy() -> impl Strategy<Value = (usize, usize, SamplerConfig, u64)> {
    (
        1usize..120,
        1usize..9,
        any::<bool>(),
        any::<u64>(),
        any::<bool>(),
        0u64..1000,
    )
        .prop_filter_map(
            "drop_last needs len >= replicas",
            |(len, replicas, shuffle, seed, drop_last, epoch)| {
                (!drop_last || len >= replicas).then_some((
                    len,
                    replicas,
                    SamplerConfig {
                        replicas,
                        rank: 0,
                        shuffle,
                        seed,
                        drop_last,
                    },
                    epoch,
                ))
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn shards_have_num_samples_and_cover_the_dataset((len, replicas, config, epoch) in config_strategy()) {
        let all = shards(len, replicas, config, epoch);
        let num_samples = config.build(len).unwrap().num_samples();
        for shard in &all {
            prop_assert_eq!(shard.len(), num_samples);
            prop_assert!(shard.iter().all(|&i| i < len));
        }
        let union: BTreeSet<usize> = all.iter().flatten().copied().collect();
        if config.drop_last {
            prop_assert_eq!(union.len(), len / replicas * replicas);
        } else {
            prop_assert_eq!(union, (0..len).collect::<BTreeSet<_>>());
        }
        if config.drop_last || len % replicas == 0 {
            // Disjoint: no index appears twice across all shards.
            let total: usize = all.iter().map(Vec::len).sum();
            let distinct: BTreeSet<usize> = all.iter().flatten().copied().collect();
            prop_assert_eq!(total, distinct.len());
        }
    }

    #[test]
    fn same_seed_and_epoch_give_the_same_order((len, replicas, config, epoch) in config_strategy()) {
        prop_assert_eq!(shards(len, replicas, config, epoch), shards(len, replicas, config, epoch));
    }

    #[test]
    fn epochs_reshuffle(len in 10usize..200, seed in any::<u64>(), epoch in 0u64..1000) {
        let s = SamplerConfig { seed, ..Default::default() }.build(len).unwrap();
        prop_assert_ne!(s.indices(epoch), s.indices(epoch + 1));
        let mut sorted = s.indices(epoch);
        sorted.sort_unstable();
        prop_assert_eq!(sorted, (0..len).collect::<Vec<_>>());
    }

    #[test]
    fn seeds_differ(len in 10usize..200, seed in any::<u64>(), epoch in 0u64..1000) {
        let a = SamplerConfig { seed, ..Default::default() }.build(len).unwrap();
        let b = SamplerConfig { seed: seed.wrapping_add(1), ..Default::default() }.build(len).unwrap();
        prop_assert_ne!(a.indices(epoch), b.indices(epoch));
    }

    #[test]
    fn no_shuffle_is_strided((len, replicas, config, epoch) in config_strategy()) {
        let config = SamplerConfig { shuffle: false, ..config };
        for (rank, shard) in shards(len, replicas, config, epoch).into_iter().enumerate() {
            let expected: Vec<usize> = (0..shard.len()).map(|k| (rank + k * replicas) % len).collect();
            prop_assert_eq!(shard, expected);
        }
    }
}

/// `torch.utils.data.DistributedSampler.__iter__` after the shuffle, transcribed step by step
/// (list slicing and all) as an oracle for the sampler's pad / drop / stride rule.
fn pytorch_oracle(order: Vec<usize>, replicas: usize, rank: usize, drop_last: bool) -> Vec<usize> {
    let len = order.len();
    // __init__: num_samples = ceil((len - replicas) / replicas) if drop_last and uneven,
    // else ceil(len / replicas).
    let num_samples = if drop_last && len % replicas != 0 {
        ((len - replicas) as f64 / replicas as f64).ceil() as usize
    } else {
        (len as f64 / replicas as f64).ceil() as usize
    };
    let total_size = num_samples * replicas;
    let mut indices = order;
    if !drop_last {
        let padding_size = total_size - indices.len();
        if padding_size <= indices.len() {
            let head = indices[..padding_size].to_vec();
            indices.extend(head);
        } else {
            let times = (padding_size as f64 / indices.len() as f64).ceil() as usize;
            let repeated = indices.repeat(times);
            indices.extend_from_slice(&repeated[..padding_size]);
        }
    } else {
        indices.truncate(total_size);
    }
    assert_eq!(indices.len(), total_size);
    // indices[rank:total_size:num_replicas]
    indices[rank..total_size]
        .iter()
        .step_by(replicas)
        .copied()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn matches_the_pytorch_oracle((len, replicas, config, epoch) in config_strategy(), rank_seed in any::<usize>()) {
        let rank = rank_seed % replicas;
        let sampler = SamplerConfig { rank, ..config }.build(len).unwrap();
        let expected = pytorch_oracle(sampler.order(epoch), replicas, rank, config.drop_last);
        prop_assert_eq!(sampler.num_samples(), expected.len());
        prop_assert_eq!(sampler.indices(epoch), expected);
    }
}
