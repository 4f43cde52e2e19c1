//! The U-Net: long skips that cross stage boundaries. Every split of its 6 layers into 2, 3 and
//! 4 stages (so each skip is cut at every boundary it can be), GPipe and 1F1B, every remat mode
//! and 2 replicas train like one device; the skip declarations are checked at build time.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::{
    Activation, Batch, CrossEntropy, EngineError, Error, Layer, OptimizerConfig, Pipeline, Remat,
    ScheduleKind,
};
use pipetrain_models::{UNetConfig, UNetLayer, synthetic};

const SEED: u64 = 4242;
const CLASSES: usize = 3;
const LR: f64 = 0.05;

/// Stem, down 0, down 1, up 1, up 0, head: `skip0` from layer 1 to 4, `skip1` from 2 to 3.
fn model() -> Vec<UNetLayer> {
    common::seeded(SEED, |d| {
        UNetConfig::new(2, 2, CLASSES).with_image(1, 4).init(d)
    })
}

fn batches() -> Vec<Batch> {
    (0..2)
        .map(|k| synthetic::images(SEED, k, 6, 1, 4, CLASSES, &Device::flex()))
        .collect()
}

/// Every way to cut `layers` layers into `stages` non-empty contiguous stages.
fn balances(layers: usize, stages: usize) -> Vec<Vec<usize>> {
    if stages == 1 {
        return vec![vec![layers]];
    }
    (1..=layers - (stages - 1))
        .flat_map(|first| {
            balances(layers - first, stages - 1)
                .into_iter()
                .map(move |rest| [vec![first], rest].concat())
        })
        .collect()
}

fn train(
    balance: &[usize],
    replicas: usize,
    schedule: ScheduleKind,
    remat: Remat,
) -> Vec<Vec<f32>> {
    let mut pipeline = Pipeline::builder()
        .layers(model())
        .balance(balance.to_vec())
        .replicas(replicas)
        .micro_batches(3)
        .schedule(schedule)
        .remat(remat)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(LR)
        .build()
        .unwrap();
    for b in &batches() {
        pipeline.train_step(b).unwrap();
    }
    pipeline.parameters()
}

#[test]
fn skips_cut_at_every_boundary_train_like_one_device() {
    let mut single = SingleDevice::new(model(), &Device::flex(), &OptimizerConfig::sgd());
    for b in &batches() {
        single
            .step(b.inputs.clone(), b.targets.clone(), &CrossEntropy, LR)
            .unwrap();
    }
    let expected = single.parameters();
    let layers = model().len();
    for stages in 2..=4 {
        for balance in balances(layers, stages) {
            let got = train(&balance, 1, ScheduleKind::OneFOneB, Remat::Never);
            let d = difference(&got, &expected);
            assert!(d.max_relative <= common::TOLERANCE, "{balance:?}: {d:?}");
        }
    }
    // Both schedules, every remat mode, replicas: on splits that cut both skips.
    for balance in [vec![2, 2, 2], vec![1, 2, 2, 1], vec![3, 3]] {
        for replicas in [1, 2] {
            for remat in [Remat::Never, Remat::ExceptLast, Remat::Always] {
                let gpipe = train(&balance, replicas, ScheduleKind::GPipe, remat);
                let one_f_one_b = train(&balance, replicas, ScheduleKind::OneFOneB, remat);
                let d = difference(&gpipe, &expected);
                let case = format!("{balance:?} × {replicas}, {remat:?}");
                assert!(d.max_relative <= common::TOLERANCE, "{case}: {d:?}");
                assert_eq!(gpipe, one_f_one_b, "{case}: GPipe and 1F1B bitwise equal");
            }
        }
    }
}

/// A layer that stashes or pops `s` (role 0 or 1) and passes its input on.
#[derive(Module, Debug)]
struct Skip {
    role: usize,
}

impl Layer for Skip {
    fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
        Ok(x)
    }
    fn stashes(&self) -> Vec<String> {
        (self.role == 0)
            .then(|| "s".to_string())
            .into_iter()
            .collect()
    }
    fn pops(&self) -> Vec<String> {
        (self.role == 1)
            .then(|| "s".to_string())
            .into_iter()
            .collect()
    }
}

#[test]
fn unpaired_skips_are_build_errors_naming_both_layers() {
    let build = |roles: &[usize]| {
        let layers: Vec<Skip> = roles.iter().map(|&role| Skip { role }).collect();
        match Pipeline::builder().layers(layers).stages(2).build() {
            Err(Error::Engine(e)) => e.to_string(),
            Err(other) => panic!("another error: {other}"),
            Ok(_) => panic!("built"),
        }
    };
    assert_eq!(
        build(&[0, 2, 0, 1]),
        "layers 0 and 2 both stash skip `s`; give each skip its own name"
    );
    assert_eq!(
        build(&[1, 2, 0]),
        "layer 0 pops skip `s`, which no earlier layer stashes (layer 2 stashes it, after the \
         pop); stash it in a layer before 0 or drop the pop"
    );
    assert!(build(&[1, 2]).contains("no earlier layer stashes"));
    assert!(build(&[0, 2]).contains("layer 0 stashes skip `s`, which no later layer pops"));
}
