//! Engine overhead bench: what the engine itself costs per action, with layers that compute
//! (almost) nothing.
//!
//! A pipeline of 8 `Linear(4, 4)` layers (dense: they split their backward unless the backward
//! is fused) on a one-row-per-micro-batch input runs steps of m micro-batches on 1, 2 and 4
//! stages; the wall time of a step divided by the actions
//! of the busiest worker's program is the engine's cost per action (interpreting, autodiff
//! bookkeeping, stashing, channel transfers, gradient accumulation, the optimizer step), with
//! the fused and the split backward. Median of `BENCH_STEPS` (default 20) steps after 3 warm-up
//! steps. Run: `cargo bench --bench engine_overhead`.

use std::time::Instant;

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use pipetrain::{
    Activation, Backward, Batch, Dense, EngineError, Layer, Mse, OptimizerConfig, Pipeline, Remat,
    ScheduleKind,
};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A 4 × 4 linear map: no kernel worth the name.
#[derive(Module, Debug)]
struct Tiny {
    linear: Linear,
}

impl Layer for Tiny {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        Ok(self.linear.forward(input.float::<2>()?).into())
    }

    fn dense(&self) -> Option<Dense<'_>> {
        Some(Dense::linear(&self.linear))
    }
}

const LAYERS: usize = 8;
const FEATURES: usize = 4;

fn step_time(stages: usize, m: usize, backward: Backward, steps: usize) -> f64 {
    let device = Device::flex();
    let layers: Vec<Tiny> = (0..LAYERS)
        .map(|_| Tiny {
            linear: LinearConfig::new(FEATURES, FEATURES).init(&device),
        })
        .collect();
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .balance(vec![LAYERS / stages; stages])
        .micro_batches(m)
        .schedule(ScheduleKind::OneFOneB)
        .remat(Remat::Never)
        .backward(backward)
        .optimizer(OptimizerConfig::sgd())
        .loss(Mse)
        .threads_per_worker(1)
        .build()
        .expect("bench pipeline");
    let batch = Batch {
        inputs: Tensor::<2>::ones([m, FEATURES], &device).into(),
        targets: Tensor::<2>::zeros([m, FEATURES], &device).into(),
    };
    let mut times = Vec::new();
    for step in 0..3 + steps {
        let t = Instant::now();
        pipeline.train_step(&batch).expect("bench step");
        if step >= 3 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let busiest = (0..stages)
        .map(|s| pipeline.plan().program(pipetrain::StageId(s as u32)).len())
        .max()
        .unwrap_or(1);
    times[times.len() / 2] / busiest as f64
}

fn main() {
    let steps: usize = std::env::var("BENCH_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    println!("engine cost per action, µs (median step / actions of the busiest worker)");
    println!("| stages | m | fused | split |");
    println!("|---|---|---|---|");
    for stages in [1, 2, 4] {
        for m in [1, 8, 32] {
            let fused = step_time(stages, m, Backward::Fused, steps) * 1e6;
            let split = step_time(stages, m, Backward::default(), steps) * 1e6;
            println!("| {stages} | {m} | {fused:.1} | {split:.1} |");
        }
    }
}
