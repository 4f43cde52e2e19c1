//! The library's run loop: epochs over a data loader with a checkpoint, then a resume.
//!
//! Trains an MLP on a small in-memory dataset (a pipetrain-data `Loader`, reshuffled every
//! epoch) for 8 optimizer steps with a checkpoint every 4 and a metrics file, then continues the
//! run from its checkpoint in a fresh pipeline to 16 steps: the step, the optimizer state and
//! the data position carry over, and the metrics file keeps the first run's rows.
//!
//! ```text
//! cargo run --release --example train_loop
//! ```

use std::sync::Arc;

use burn::prelude::*;
use pipetrain::trainer::{Epochs, Event, RunIdentity, Trainer, TrainerSettings};
use pipetrain::{OptimizerConfig, Pipeline};
use pipetrain_data::{InMemory, LoaderConfig, Values};
use pipetrain_models::{MlpConfig, MlpLayer};

/// 512 examples of 16 features in 4 classes: the class is the largest of the first 4 features.
fn dataset() -> Result<InMemory, pipetrain_data::DataError> {
    let (n, features) = (512, 16);
    let x: Vec<f32> = (0..n * features)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    let y: Vec<i64> = x
        .chunks(features)
        .map(|row| {
            let best = row[..4]
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1));
            best.map_or(0, |(i, _)| i as i64)
        })
        .collect();
    InMemory::new(Values::Float(x), vec![features], Values::Int(y), vec![])
}

fn pipeline(layers: Vec<MlpLayer>) -> pipetrain::Result<Pipeline<MlpLayer>> {
    Pipeline::builder()
        .layers(layers)
        .balance([2, 2])
        .micro_batches(4)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(1e-2)
        .build()
}

/// Prints the loop's events: the library itself prints nothing.
fn show(event: Event<'_, MlpLayer>) {
    match event {
        Event::Step(r) => println!(
            "step {:>2}/{}  loss {:.4}  {:.0} samples/s",
            r.step, r.steps, r.totals.loss, r.samples_per_sec
        ),
        Event::Checkpoint { path, step } => {
            println!("checkpoint: {} (step {step})", path.display());
        }
        Event::Resumed { step, position, .. } => {
            println!(
                "resumed at step {step} (next data: {})",
                position.unwrap_or("?")
            );
        }
        _ => {}
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex();
    let loader = LoaderConfig {
        seed: 7,
        ..LoaderConfig::new(64)
    }
    .build(Arc::new(dataset()?))?;
    let source = Epochs::new(loader, device.clone());
    // What a resumed run must share with the saved one: checked when it resumes.
    let identity = RunIdentity::new().with("data", "example").with("seed", 7);
    let dir = std::env::temp_dir().join(format!("pipetrain-train-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let settings = TrainerSettings {
        learning_rate: 1e-2,
        checkpoint: Some(dir.join("run.safetensors")),
        checkpoint_every: 4,
        metrics: Some(dir.join("run.csv")),
        ..TrainerSettings::new(8)
    };

    // 8 steps (an epoch is 8 batches), a checkpoint at steps 4 and 8.
    let mut first = pipeline(MlpConfig::new(32, 3, 4).with_input(16).init(&device))?;
    Trainer::new(&mut first, &source, settings.clone())
        .identity(identity.clone())
        .on_event(show)
        .run()?;

    // A fresh pipeline (fresh weights) continues the run to 16 steps from the checkpoint.
    let mut second = pipeline(MlpConfig::new(32, 3, 4).with_input(16).init(&device))?;
    let outcome = Trainer::new(
        &mut second,
        &source,
        TrainerSettings {
            resume: settings.checkpoint.clone(),
            ..TrainerSettings {
                steps: 16,
                ..settings
            }
        },
    )
    .identity(identity)
    .on_event(show)
    .run()?;
    let rows = std::fs::read_to_string(dir.join("run.csv"))?
        .lines()
        .count()
        - 1;
    println!(
        "done: steps {}..{}, median {:.0} samples/s; {} metrics rows in {}",
        outcome.first_step,
        outcome.step,
        outcome.median_samples_per_sec,
        rows,
        dir.join("run.csv").display()
    );
    assert_eq!(rows, 16, "the first run's 8 rows and the resumed run's 8");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
