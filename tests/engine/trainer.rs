//! The library's run loop (`pipetrain::trainer::Trainer`): a run of N steps straight equals N/2
//! steps, a checkpoint, a resume into a fresh pipeline and N/2 more, bit for bit; a stop request
//! ends a run after its step with a final checkpoint; the metrics file gets a row per step.

use std::path::{Path, PathBuf};

use burn::prelude::*;
use pipetrain::trainer::{Event, Mode, Outcome, Signal, Source, Stop, Trainer, TrainerSettings};
use pipetrain::{Batch, Layer, OptimizerConfig, Pipeline, Remat};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

use crate::common;

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pipetrain-trainer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn pipeline(layers: Vec<MlpLayer>) -> Pipeline<MlpLayer> {
    Pipeline::builder()
        .layers(layers)
        .balance([2, 2])
        .micro_batches(4)
        .accumulation(2)
        .remat(Remat::ExceptLast)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(1e-3)
        .build()
        .unwrap()
}

/// Seeded synthetic batches: batch `i` is a function of `i` alone.
fn batch(i: u64) -> pipetrain::Result<Batch> {
    Ok(synthetic::classification(5, i, 16, 12, 4, &Device::flex()))
}

fn init() -> Vec<MlpLayer> {
    // Under the generator's lock: the other modules of this test binary draw from it too.
    common::seeded(3, |device| {
        MlpConfig::new(12, 3, 4).with_input(12).init(device)
    })
}

fn run<L: Layer>(
    pipeline: &mut Pipeline<L>,
    settings: TrainerSettings,
) -> pipetrain::Result<Outcome<L>> {
    Trainer::new(pipeline, &batch, settings).run()
}

fn settings(steps: u64, dir: &Path) -> TrainerSettings {
    TrainerSettings {
        checkpoint: Some(dir.join("run.safetensors")),
        metrics: Some(dir.join("run.csv")),
        ..TrainerSettings::new(steps)
    }
}

#[test]
fn half_a_run_a_checkpoint_and_a_resume_equal_the_straight_run_bit_for_bit() {
    let dir = scratch("resume");
    let layers = init();
    let mut straight = pipeline(layers.clone());
    let done = run(&mut straight, TrainerSettings::new(6)).unwrap();
    assert_eq!((done.first_step, done.step, done.losses.len()), (0, 6, 6));

    let mut first = pipeline(layers.clone());
    let half = run(&mut first, settings(3, &dir)).unwrap();
    assert_eq!(half.step, 3);
    // A fresh pipeline from other weights: the checkpoint brings the weights, the optimizer
    // state and the step.
    let mut second = pipeline(common::seeded(4, |device| {
        MlpConfig::new(12, 3, 4).with_input(12).init(device)
    }));
    let resumed = run(
        &mut second,
        TrainerSettings {
            resume: Some(dir.join("run.safetensors")),
            ..settings(6, &dir)
        },
    )
    .unwrap();
    assert_eq!((resumed.first_step, resumed.step), (3, 6));
    assert_eq!(second.parameters(), straight.parameters());
    assert_eq!(
        [half.losses, resumed.losses].concat(),
        done.losses,
        "the same batches at the same rates"
    );
    let csv = std::fs::read_to_string(dir.join("run.csv")).unwrap();
    let steps: Vec<&str> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(steps, ["1", "2", "3", "4", "5", "6"], "{csv}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_resume_of_another_run_is_refused_naming_the_setting() {
    let dir = scratch("identity");
    let identity = pipetrain::trainer::RunIdentity::new().with("seed", 5);
    let mut first = pipeline(init());
    Trainer::new(&mut first, &batch, settings(2, &dir))
        .identity(identity)
        .run()
        .unwrap();
    let mut second = pipeline(init());
    let resume = TrainerSettings {
        resume: Some(dir.join("run.safetensors")),
        ..TrainerSettings::new(4)
    };
    let other = pipetrain::trainer::RunIdentity::new().with("seed", 6);
    let e = Trainer::new(&mut second, &batch, resume)
        .identity(other)
        .run()
        .err()
        .unwrap();
    assert!(
        matches!(&e, pipetrain::Error::Run(pipetrain::RunError::ResumeMismatch { setting, saved, ours, .. })
            if setting == "seed" && saved == "5" && ours == "6"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stop_request_ends_the_run_after_its_step_with_a_final_checkpoint() {
    let dir = scratch("stop");
    let mut pipeline = pipeline(init());
    let mut events = Vec::new();
    let outcome = Trainer::new(&mut pipeline, &batch, settings(50, &dir))
        .stop(Stop::install().unwrap())
        .on_event(|event| match event {
            Event::Step(record) => {
                events.push(format!("step {}", record.step));
                // After the first step a signal lets the current step finish.
                if record.step == 2 {
                    let pid = std::process::id().to_string();
                    let sent = std::process::Command::new("kill")
                        .args(["-INT", &pid])
                        .status();
                    assert!(sent.unwrap().success());
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
            Event::Checkpoint { step, .. } => events.push(format!("checkpoint {step}")),
            _ => {}
        })
        .run()
        .unwrap();
    assert_eq!(outcome.stopped, Some(Signal::Interrupt));
    assert_eq!(outcome.step, 2);
    assert_eq!(events, ["step 1", "step 2", "checkpoint 2"]);
    let saved = pipetrain::Checkpoint::read(dir.join("run.safetensors")).unwrap();
    assert_eq!(saved.progress().step, 2);
    let rows = std::fs::read_to_string(dir.join("run.csv")).unwrap();
    assert_eq!(rows.lines().count(), 3, "a header and 2 rows: {rows}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_per_step_verification_agrees_with_a_single_device_copy() {
    let layers = init();
    let mut pipeline = pipeline(layers.clone());
    let single =
        pipetrain::engine::SingleDevice::new(layers, &Device::flex(), &OptimizerConfig::adam());
    let reference = pipetrain::trainer::Reference::new(single, None, Mode::PerStep);
    let outcome = Trainer::new(&mut pipeline, &batch, TrainerSettings::new(3))
        .verify(Mode::PerStep, Some(reference))
        .run()
        .unwrap();
    let reference = outcome.reference.unwrap();
    let after = pipetrain::trainer::verify::after_step(&pipeline);
    let verdict = pipetrain::trainer::verify::verdict(&reference, &after);
    assert!(verdict.passes(1e-5), "{verdict:?}");
}

/// 64 examples of 12 features in 4 classes, batched by a seeded loader of `batch` rows.
fn epochs(batch: usize) -> pipetrain::trainer::Epochs<std::sync::Arc<pipetrain_data::InMemory>> {
    use pipetrain_data::{InMemory, LoaderConfig, Values};
    let x: Vec<f32> = (0..64 * 12).map(|i| (i % 13) as f32 / 13.0).collect();
    let y: Vec<i64> = (0..64).map(|i| i % 4).collect();
    let data = InMemory::new(Values::Float(x), vec![12], Values::Int(y), vec![]).unwrap();
    let loader = LoaderConfig {
        seed: 1,
        ..LoaderConfig::new(batch)
    }
    .build(std::sync::Arc::new(data))
    .unwrap();
    pipetrain::trainer::Epochs::new(loader, Device::flex())
}

#[test]
fn a_loader_runs_epoch_after_epoch_and_a_resume_on_other_batches_is_refused() {
    let dir = scratch("epochs");
    let source = epochs(16);
    assert_eq!(source.position(5), "epoch 1, batch 1", "4 batches an epoch");
    let mut first = pipeline(init());
    // 3 optimizer steps of 2 accumulated batches: into the second epoch.
    let done = Trainer::new(&mut first, &source, settings(3, &dir))
        .run()
        .unwrap();
    assert_eq!(done.step, 3);
    let saved = pipetrain::Checkpoint::read(dir.join("run.safetensors")).unwrap();
    assert_eq!(
        saved
            .progress()
            .extra
            .get(pipetrain::trainer::DATA_POSITION),
        Some(&"epoch 1, batch 2".to_string())
    );
    // Batches of 8 rows: 8 an epoch, so step 3 starts elsewhere in the data.
    let other = epochs(8);
    let mut second = pipeline(init());
    let resume = TrainerSettings {
        resume: Some(dir.join("run.safetensors")),
        ..TrainerSettings::new(6)
    };
    let e = Trainer::new(&mut second, &other, resume)
        .run()
        .err()
        .unwrap();
    assert!(
        matches!(&e, pipetrain::Error::Run(pipetrain::RunError::ResumeData { saved, expected, step: 3, .. })
            if saved == "epoch 1, batch 2" && expected == "epoch 0, batch 6"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
