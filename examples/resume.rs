//! Data parallelism, a checkpoint, and a resume under another layout.
//!
//! Trains an MLP on 2 replicas × 2 stages with ZeRO-1 and Adam for 3 steps, saves a checkpoint,
//! then resumes it on 1 replica × 1 stage and on the original layout and trains 2 more steps on
//! each: the original layout continues bit for bit (checked against a run that never stopped),
//! the single worker within rounding.
//!
//! ```text
//! cargo run --release --example resume
//! ```

use std::collections::BTreeMap;

use burn::prelude::*;
use pipetrain::engine::difference;
use pipetrain::{OptimizerConfig, Pipeline, Remat};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

fn pipeline(
    layers: Vec<MlpLayer>,
    replicas: usize,
    stages: usize,
) -> pipetrain::Result<Pipeline<MlpLayer>> {
    // A fixed split: a measured one (`.stages(n)`) may differ from run to run.
    let balance = if stages == 1 { vec![5] } else { vec![3, 2] };
    Pipeline::builder()
        .layers(layers)
        .balance(balance)
        .replicas(replicas)
        .zero(u8::from(replicas > 1))
        .micro_batches(2)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(1e-3)
        .build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Device::flex();
    let init = MlpConfig::new(64, 4, 10).init(&device);
    let batch = |i| synthetic::classification(7, i, 32, 64, 10, &device);
    let path = std::env::temp_dir().join(format!("pipetrain-example-{}.st", std::process::id()));

    // A run that never stops, for comparison.
    let mut uninterrupted = pipeline(init.clone(), 2, 2)?;
    for i in 0..5 {
        uninterrupted.train_step(&batch(i))?;
    }

    // 3 steps, then a checkpoint (weights, ZeRO-sharded Adam state merged by name, step).
    let mut first = pipeline(init.clone(), 2, 2)?;
    for i in 0..3 {
        let report = first.train_step(&batch(i))?;
        println!(
            "2 x 2  step {}  loss {:.4}  all-reduce overlapped {:.0}%",
            i + 1,
            report.loss,
            100.0 * report.all_reduce_overlap.unwrap_or(0.0)
        );
    }
    let extra = BTreeMap::from([("note".to_string(), "example".to_string())]);
    first.save_checkpoint(&path, extra)?;
    println!("saved {}", path.display());

    for (replicas, stages) in [(2, 2), (1, 1)] {
        let mut resumed = pipeline(init.clone(), replicas, stages)?;
        let progress = resumed.load_checkpoint(&path)?;
        for i in progress.step..5 {
            resumed.train_step(&batch(i))?;
        }
        let d = difference(&resumed.parameters(), &uninterrupted.parameters());
        println!(
            "resumed at {replicas} x {stages} from step {}: max relative difference to the \
             uninterrupted run {:.2e}{}",
            progress.step,
            d.max_relative,
            if d.max_relative == 0.0 {
                " (bit for bit)"
            } else {
                ""
            }
        );
    }
    std::fs::remove_file(&path)?;
    Ok(())
}
