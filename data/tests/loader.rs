//! `Loader`: positions, resume, epochs, shards; `collate` and `split`.

use std::collections::BTreeSet;
use std::sync::Arc;

use burn::prelude::*;
use pipetrain_data::{
    DataError, Dataset, InMemory, LoaderConfig, Position, Values, collate, split,
};
use proptest::prelude::*;

/// `len` examples whose input is `[i, i + 0.5]` and whose label is `i`: a batch shows which
/// examples it holds.
fn numbered(len: usize) -> InMemory {
    InMemory::new(
        Values::Float((0..len).flat_map(|i| [i as f32, i as f32 + 0.5]).collect()),
        vec![2],
        Values::Int((0..len as i64).collect()),
        vec![],
    )
    .unwrap()
}

fn labels(batch: &pipetrain_engine::Batch) -> Vec<usize> {
    batch
        .targets
        .to_f64_vec()
        .into_iter()
        .map(|v| v as usize)
        .collect()
}

#[test]
fn resuming_at_a_position_gives_the_batches_iteration_reaches() {
    let loader = LoaderConfig {
        seed: 9,
        ..LoaderConfig::new(3)
    }
    .build(numbered(11))
    .unwrap();
    assert_eq!(loader.batches_per_epoch(), 3);
    let device = Device::flex();
    let from_start: Vec<(Position, Vec<f64>, Vec<f64>)> = loader
        .iter_from(Position::START, &device)
        .unwrap()
        .take(10)
        .map(|item| {
            let (p, b) = item.unwrap();
            (p, b.inputs.to_f64_vec(), b.targets.to_f64_vec())
        })
        .collect();
    for (k, (position, inputs, targets)) in from_start.iter().enumerate() {
        assert_eq!(*position, Position::from_step(k as u64, 3));
        let direct = loader.batch_at(*position, &device).unwrap();
        assert_eq!(&direct.inputs.to_f64_vec(), inputs);
        assert_eq!(&direct.targets.to_f64_vec(), targets);
        // Resuming the iterator there yields the same stream from then on.
        let resumed: Vec<Vec<f64>> = loader
            .iter_from(*position, &device)
            .unwrap()
            .take(10 - k)
            .map(|item| item.unwrap().1.targets.to_f64_vec())
            .collect();
        let expected: Vec<Vec<f64>> = from_start[k..].iter().map(|(_, _, t)| t.clone()).collect();
        assert_eq!(resumed, expected);
    }
    // Inputs and labels stay paired.
    let batch = loader
        .batch_at(Position { epoch: 2, batch: 1 }, &device)
        .unwrap();
    let inputs = batch.inputs.to_f64_vec();
    for (row, label) in labels(&batch).into_iter().enumerate() {
        assert_eq!(inputs[2 * row], label as f64);
        assert_eq!(inputs[2 * row + 1], label as f64 + 0.5);
    }
}

#[test]
fn an_epoch_visits_distinct_examples_and_epochs_reshuffle() {
    let loader = LoaderConfig {
        seed: 3,
        ..LoaderConfig::new(4)
    }
    .build(numbered(20))
    .unwrap();
    let device = Device::flex();
    let epoch = |e: u64| -> Vec<usize> {
        (0..loader.batches_per_epoch())
            .flat_map(|b| {
                labels(
                    &loader
                        .batch_at(Position { epoch: e, batch: b }, &device)
                        .unwrap(),
                )
            })
            .collect()
    };
    let first = epoch(0);
    assert_eq!(
        first.iter().copied().collect::<BTreeSet<_>>(),
        (0..20).collect()
    );
    assert_ne!(first, epoch(1));
    assert_eq!(first, epoch(0));
}

#[test]
fn drop_last_drops_the_short_batch_unless_asked_to_keep_it() {
    let device = Device::flex();
    let dropping = LoaderConfig {
        shuffle: false,
        ..LoaderConfig::new(4)
    }
    .build(numbered(10))
    .unwrap();
    assert_eq!(dropping.batches_per_epoch(), 2);
    let keeping = LoaderConfig {
        shuffle: false,
        drop_last: false,
        ..LoaderConfig::new(4)
    }
    .build(numbered(10))
    .unwrap();
    assert_eq!(keeping.batches_per_epoch(), 3);
    let short = keeping
        .batch_at(Position { epoch: 0, batch: 2 }, &device)
        .unwrap();
    assert_eq!(labels(&short), vec![8, 9]);
    let err = dropping
        .batch_at(Position { epoch: 0, batch: 2 }, &device)
        .unwrap_err();
    assert!(matches!(
        err,
        DataError::PositionOutOfRange {
            batch: 2,
            batches_per_epoch: 2,
            ..
        }
    ));
    assert!(
        dropping
            .iter_from(Position { epoch: 5, batch: 2 }, &device)
            .is_err()
    );
}

#[test]
fn replicas_get_disjoint_shards_batched() {
    let device = Device::flex();
    let per_rank: Vec<Vec<usize>> = (0..3)
        .map(|rank| {
            let loader = LoaderConfig {
                seed: 5,
                replicas: 3,
                rank,
                ..LoaderConfig::new(2)
            }
            .build(numbered(12))
            .unwrap();
            assert_eq!(loader.batches_per_epoch(), 2);
            (0..2)
                .flat_map(|b| {
                    labels(
                        &loader
                            .batch_at(Position { epoch: 4, batch: b }, &device)
                            .unwrap(),
                    )
                })
                .collect()
        })
        .collect();
    let all: BTreeSet<usize> = per_rank.iter().flatten().copied().collect();
    assert_eq!(all, (0..12).collect());
}

#[test]
fn batch_larger_than_the_shard_is_an_error_with_the_numbers() {
    let err = LoaderConfig {
        replicas: 4,
        rank: 0,
        ..LoaderConfig::new(4)
    }
    .build(numbered(10))
    .unwrap_err();
    let text =
        pipetrain_schedules::remedy::Remedied::explain(&err, &pipetrain_schedules::remedy::Plain);
    assert!(
        matches!(
            err,
            DataError::BatchTooLarge {
                batch_size: 4,
                shard: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(text.contains("use batch = 3"), "{text}");
    assert!(LoaderConfig::new(0).build(numbered(10)).is_err());
    assert!(
        LoaderConfig {
            rank: 1,
            ..LoaderConfig::new(1)
        }
        .build(numbered(10))
        .is_err()
    );
}

#[test]
fn collate_builds_the_activation_of_each_rank_and_kind() {
    let device = Device::flex();
    let case = |inputs: Values, in_shape: Vec<usize>, targets: Values, tgt_shape: Vec<usize>| {
        let data = InMemory::new(inputs, in_shape, targets, tgt_shape).unwrap();
        let batch = collate(&data, &[1, 0], &device).unwrap();
        (
            batch.inputs.describe(),
            batch.inputs.dims(),
            batch.targets.describe(),
            batch.targets.dims(),
        )
    };
    let f = |n: usize| Values::Float(vec![0.0; n]);
    let i = |n: usize| Values::Int(vec![0; n]);
    assert_eq!(
        case(f(2), vec![], i(2), vec![]),
        ("rank-1 float".into(), vec![2], "rank-1 int".into(), vec![2])
    );
    assert_eq!(
        case(f(24), vec![2, 3, 2], i(8), vec![4]).1,
        vec![2, 2, 3, 2]
    );
    assert_eq!(case(f(24), vec![2, 3, 2], i(8), vec![4]).2, "rank-2 int");
    assert_eq!(case(i(6), vec![3], i(12), vec![2, 3]).2, "rank-3 int");
    assert_eq!(case(f(4), vec![2], f(6), vec![3]).2, "rank-2 float");

    let data = numbered(3);
    let batch = collate(&data, &[2, 2, 0], &device).unwrap();
    assert_eq!(
        batch.inputs.to_f64_vec(),
        vec![2.0, 2.5, 2.0, 2.5, 0.0, 0.5]
    );
    assert!(collate(&data, &[], &device).is_err());
}

#[test]
fn in_memory_rejects_inconsistent_shapes() {
    let bad = |inputs: Values, s: Vec<usize>, targets: Values, t: Vec<usize>| {
        InMemory::new(inputs, s, targets, t).is_err()
    };
    assert!(bad(
        Values::Float(vec![0.0; 5]),
        vec![2],
        Values::Int(vec![0; 2]),
        vec![]
    ));
    assert!(bad(
        Values::Float(vec![0.0; 4]),
        vec![2],
        Values::Int(vec![0; 3]),
        vec![]
    ));
    assert!(bad(
        Values::Float(vec![0.0; 4]),
        vec![0],
        Values::Int(vec![0; 2]),
        vec![]
    ));
    assert!(bad(
        Values::Float(vec![0.0; 16]),
        vec![1, 2, 2, 2],
        Values::Int(vec![0; 2]),
        vec![]
    ));
    assert!(bad(
        Values::Float(vec![0.0; 2]),
        vec![],
        Values::Int(vec![0; 16]),
        vec![2, 2, 2]
    ));
}

/// The held-out fractions an empty split's remedy offers split the data set, whatever its
/// size and the fraction given; a set of one example is offered 0, one of none no fraction.
#[test]
fn an_empty_splits_remedy_splits() {
    use pipetrain_schedules::remedy::{Remedied, Remedy, Value};
    fn fractions(remedy: Remedy) -> Vec<f64> {
        match remedy {
            Remedy::OneOf(all) => all.into_iter().flat_map(fractions).collect(),
            Remedy::Set {
                value: Value::Number(x),
                ..
            } => vec![x],
            _ => vec![],
        }
    }
    for len in 0..300 {
        let data = Arc::new(numbered(len));
        for given in [1e-300, 0.001, 0.1, 0.5, 0.9, 0.999, 0.9999] {
            let Err(err) = split(Arc::clone(&data), given) else {
                continue;
            };
            let offered = fractions(err.remedy().expect("a remedy"));
            assert_eq!(offered.is_empty(), len == 0, "{len} {given}: {err:?}");
            for fraction in offered {
                assert_ne!(fraction, given, "{len}: {err:?}");
                assert!(
                    split(Arc::clone(&data), fraction).is_ok(),
                    "{len} {given} {fraction}"
                );
                assert!(format!("{fraction:?}").len() <= 7, "short: {fraction:?}");
            }
        }
    }
}

#[test]
fn split_holds_out_the_tail_and_rejects_empty_sides() {
    let data = Arc::new(numbered(10));
    let (train, held) = split(Arc::clone(&data), 0.25).unwrap();
    assert_eq!((train.len(), held.len()), (7, 3)); // round(2.5) = 3
    assert_eq!(held.get(0).target, Values::Int(vec![7]));
    assert_eq!(train.get(6).target, Values::Int(vec![6]));
    assert_eq!(held.input_shape(), &[2]);
    // A split view loads like any dataset.
    let loader = LoaderConfig::new(2).build(held).unwrap();
    assert_eq!(loader.batches_per_epoch(), 1);

    // 0 trains on everything.
    let (train, held) = split(Arc::clone(&data), 0.0).unwrap();
    assert_eq!((train.len(), held.len()), (10, 0));
    for fraction in [1.0, -0.5, 1.5, f64::NAN] {
        assert!(matches!(
            split(Arc::clone(&data), fraction),
            Err(DataError::BadFraction { .. })
        ));
    }
    let err = split(Arc::clone(&data), 0.01).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::EmptySplit {
                held: 0,
                train: 10,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        split(data, 0.99),
        Err(DataError::EmptySplit { train: 0, .. })
    ));
    // Trait objects split too.
    let erased: Arc<dyn Dataset> = Arc::new(numbered(4));
    let (train, held) = split(erased, 0.5).unwrap();
    assert_eq!((train.len(), held.len()), (2, 2));
    let batch = collate(&held, &[1], &Device::flex()).unwrap();
    assert_eq!(labels(&batch), vec![3]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn positions_step_round_trip(step in 0u64..1_000_000, per in 1usize..50) {
        let p = Position::from_step(step, per);
        prop_assert!(p.batch < per);
        prop_assert_eq!(p.step(per), step);
        prop_assert_eq!(p.next(per).step(per), step + 1);
        prop_assert_eq!(p.to_string().parse::<Position>().unwrap(), p);
    }

    #[test]
    fn indices_at_matches_the_sampler_order(
        len in 12usize..60, batch in 1usize..4, seed in any::<u64>(), epoch in 0u64..100,
        replicas in 1usize..4, drop_last in any::<bool>(),
    ) {
        let rank = (seed as usize) % replicas;
        let config = LoaderConfig { seed, replicas, rank, drop_last, ..LoaderConfig::new(batch) };
        let loader = config.build(numbered(len)).unwrap();
        let visited: Vec<usize> = (0..loader.batches_per_epoch())
            .flat_map(|b| loader.indices_at(Position { epoch, batch: b }).unwrap())
            .collect();
        let order = loader.sampler().indices(epoch);
        prop_assert_eq!(&visited[..], &order[..visited.len()]);
        if !drop_last {
            prop_assert_eq!(visited.len(), order.len());
        } else {
            prop_assert!(order.len() - visited.len() < batch);
        }
    }
}
