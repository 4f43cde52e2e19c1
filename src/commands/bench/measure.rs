//! Running one configuration in this process, fresh: a new pipeline from the same seeded
//! init, warm-up steps, then measured steps timed around `train_step` (wall clock, as the
//! peers time theirs).

use std::path::Path;
use std::time::Instant;

use crate::schedules::simulate;
use crate::{Batch, Layer, OptimizerConfig, Pipeline, Remat};
use burn::prelude::*;
use pipetrain_models::{GptConfig, GptLayer, LlamaLayer, MlpConfig, MlpLayer, synthetic};

use super::configs::{BenchModel, GPT, LLAMA, Shape, Workload};
use super::probe::CpuSnapshot;

/// Seed of the model init (every row starts from the same weights).
const INIT_SEED: u64 = 0;
/// Seed of the synthetic data (the peers' `DATA_SEED`; the generators differ, so the rows are
/// the same data for us, other data for them).
const DATA_SEED: u64 = 1234;
/// Distinct batches, cycled (the peers' `NUM_BATCHES`).
const BATCHES: u64 = 5;

/// What one run of a row measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Samples per second of each measured step.
    pub rates: Vec<f64>,
    /// The mean loss of the last step.
    pub loss: f64,
    /// The largest worker's memory (parameters, gradients, optimizer state, peak stash) in
    /// bytes, as `Pipeline::worker_memory` counts it.
    pub peak_memory: u64,
    /// Cores the other processes of the machine kept busy during the measured steps.
    pub others: Option<f64>,
    /// Per measured step (one-pipeline rows): the samples/s the simulator predicts for the
    /// plan with the F/B/W costs that step measured.
    pub predicted: Vec<f64>,
    /// Per measured step (one-pipeline rows): the seconds its replicas spent summing gradients
    /// and handing values out, per stage (the mean over replica 0's stages): the all-reduce
    /// (`sAR`), or at ZeRO-2/3 the reduce and the unshard together (`sRG` + `sUS`), which is
    /// what the simulator charges as one all-reduce ([`Costs::all_reduce`](crate::schedules::Costs)).
    pub communication: Vec<f64>,
}

impl Measured {
    /// This run's rates and the other's, the later run's loss and memory, the busier reading.
    pub fn merge(&mut self, other: Measured) {
        self.rates.extend(other.rates);
        self.predicted.extend(other.predicted);
        self.communication.extend(other.communication);
        self.loss = other.loss;
        self.peak_memory = self.peak_memory.max(other.peak_memory);
        self.others = match (self.others, other.others) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Runs `shape` on `workload` once, from scratch: in this process, or under `mpirun` with
/// `binary` (the `pipetrain` binary) in each process. `Err` is why the row has no numbers.
pub(crate) fn run_row(
    shape: &Shape,
    workload: &Workload,
    binary: Option<&Path>,
) -> Result<Measured, String> {
    match (shape.processes(), binary) {
        (1, _) => run(shape, workload).map_err(|e| e.to_string()),
        (processes, Some(binary)) => super::mpi::run(binary, shape, processes, workload),
        (processes, None) => Err(format!(
            "a row of {processes} processes needs the pipetrain binary to start under mpirun"
        )),
    }
}

/// Runs `shape` on `workload` once in this process, from scratch.
fn run(shape: &Shape, workload: &Workload) -> crate::Result<Measured> {
    let device = Device::flex();
    if shape.model() == BenchModel::Llama {
        let [vocab, _, context, batch] = LLAMA;
        let data: Vec<Batch> = (0..BATCHES)
            .map(|k| synthetic::tokens(DATA_SEED, k, batch, context, vocab, &device))
            .collect();
        let pipelines = vec![build_llama(shape, workload, &device, &data[0])?];
        return measure(pipelines, &data, batch, workload);
    }
    if !shape.is_mlp() {
        let (vocab, _, _, batch) = GPT;
        let context = workload.gpt_context;
        let data: Vec<Batch> = (0..BATCHES)
            .map(|k| synthetic::tokens(DATA_SEED, k, batch, context, vocab, &device))
            .collect();
        let pipelines = vec![build_gpt(shape, workload, &device, &data[0])?];
        return measure(pipelines, &data, batch, workload);
    }
    let data: Vec<Batch> = (0..BATCHES)
        .map(|k| {
            synthetic::classification(
                DATA_SEED,
                k,
                workload.batch,
                workload.width,
                workload.classes,
                &device,
            )
        })
        .collect();
    let copies = match *shape {
        Shape::Pipeline { .. } => 1,
        Shape::Independent { workers, .. } => workers,
    };
    let pipelines = (0..copies)
        .map(|_| build(shape, workload, &device))
        .collect::<crate::Result<Vec<_>>>()?;
    measure(pipelines, &data, workload.batch, workload)
}

/// Steps `pipelines` at once on `data` (cycled), `batch` rows each: the warm-up, then the
/// timed steps.
fn measure<L: Layer>(
    mut pipelines: Vec<Pipeline<L>>,
    data: &[Batch],
    batch: usize,
    workload: &Workload,
) -> crate::Result<Measured> {
    let copies = pipelines.len();
    let mut measured = Measured::default();
    let mut start = None;
    for step in 0..workload.warmup + workload.steps {
        let batch_data = &data[step % data.len()];
        if step == workload.warmup {
            start = Some(CpuSnapshot::now());
        }
        let t = Instant::now();
        let reports = std::thread::scope(|s| {
            let handles: Vec<_> = pipelines
                .iter_mut()
                .map(|p| s.spawn(move || p.train_step(batch_data)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a bench pipeline panicked"))
                .collect::<crate::Result<Vec<_>>>()
        })?;
        let seconds = t.elapsed().as_secs_f64().max(1e-12);
        if step >= workload.warmup {
            measured.rates.push((copies * batch) as f64 / seconds);
            if let ([pipeline], [report]) = (&pipelines[..], &reports[..]) {
                let costs = report.measured_costs();
                let simulated = simulate(pipeline.plan(), &costs)?;
                let makespan = simulated.makespan.max(1e-12);
                measured.predicted.push(batch as f64 / makespan);
                measured.communication.push(costs.all_reduce);
            }
        }
        measured.loss = reports[0].loss;
        if step + 1 == workload.warmup + workload.steps {
            for (pipeline, report) in pipelines.iter().zip(&reports) {
                let workers = pipeline.worker_memory(report)?;
                let peak = workers.iter().map(|w| w.total()).max().unwrap_or(0);
                measured.peak_memory = measured.peak_memory.max(peak);
            }
        }
    }
    if let Some(start) = start {
        measured.others = start.others_until(&CpuSnapshot::now());
    }
    Ok(measured)
}

/// A fresh GPT pipeline for `shape` (a GPT schedules row): seeded init, blocks split by the
/// measured split (on `first`) over the shape's chunks, SGD at 0.01 like the MLP rows.
fn build_gpt(
    shape: &Shape,
    w: &Workload,
    device: &Device,
    first: &Batch,
) -> crate::Result<Pipeline<GptLayer>> {
    let (vocab, heads, blocks, _) = GPT;
    let heads = if w.gpt_width % heads == 0 { heads } else { 1 };
    device.seed(INIT_SEED);
    let layers = GptConfig::new(vocab, w.gpt_context, w.gpt_width, heads, blocks).init(device);
    build_decoder(layers, shape, w, first)
}

/// A fresh Llama pipeline for `shape` (the Llama row), as [`build_gpt`].
fn build_llama(
    shape: &Shape,
    w: &Workload,
    device: &Device,
    first: &Batch,
) -> crate::Result<Pipeline<LlamaLayer>> {
    device.seed(INIT_SEED);
    let layers = super::configs::llama_config(w.llama_width).init(device);
    build_decoder(layers, shape, w, first)
}

/// A decoder's pipeline for `shape`: split by the measured split (on `first`) over the shape's
/// chunks, remat never, SGD at 0.01 like the MLP rows.
fn build_decoder<L: Layer>(
    layers: Vec<L>,
    shape: &Shape,
    w: &Workload,
    first: &Batch,
) -> crate::Result<Pipeline<L>> {
    let Shape::Pipeline {
        stages,
        micro_batches,
        schedule,
        ..
    } = *shape
    else {
        unreachable!("the decoder rows are pipelines")
    };
    Pipeline::builder()
        .layers(layers)
        .stages(stages)
        .micro_batches(micro_batches)
        .schedule(schedule)
        .remat(Remat::Never)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(0.01)
        .threads_per_worker(w.threads)
        .precision(w.precision)
        .build_with(first)
}

/// A fresh pipeline for `shape` (one of the copies of an independent row): seeded init, the
/// hidden blocks split evenly over the stages and the head on the last one, like the peers.
fn build(shape: &Shape, w: &Workload, device: &Device) -> crate::Result<Pipeline<MlpLayer>> {
    let Shape::Pipeline {
        replicas,
        stages,
        micro_batches: m,
        schedule,
        zero,
        backward,
        threads,
        ..
    } = shape.as_pipeline()
    else {
        unreachable!("as_pipeline gives a pipeline")
    };
    let threads = threads.unwrap_or(w.threads);
    device.seed(INIT_SEED);
    let layers = MlpConfig::new(w.width, w.hidden, w.classes).init(device);
    // Interleaved schedules cut each rank's share into chunks: the balance lists the chunks.
    let chunks = stages * schedule.virtual_stages();
    Pipeline::builder()
        .layers(layers)
        .balance(balance(w.hidden, chunks))
        .micro_batches(m)
        .schedule(schedule)
        .remat(Remat::Never)
        .backward(backward)
        .optimizer(OptimizerConfig::sgd())
        .learning_rate(0.01)
        .threads_per_worker(threads)
        .replicas(replicas)
        .zero(zero)
        .precision(w.precision)
        .build()
}

/// `hidden` blocks over `stages` stages (the first ones take the remainder), plus the head on
/// the last stage: [4, 5] for MLP-8 on 2 stages, as the peers split it.
pub(crate) fn balance(hidden: usize, stages: usize) -> Vec<usize> {
    let stages = stages.max(1);
    let mut balance: Vec<usize> = (0..stages)
        .map(|s| hidden / stages + usize::from(s < hidden % stages))
        .collect();
    *balance.last_mut().expect("at least one stage") += 1;
    balance
}

#[cfg(test)]
mod tests {
    use super::balance;

    #[test]
    fn hidden_blocks_evenly_and_the_head_last() {
        assert_eq!(balance(8, 1), vec![9]);
        assert_eq!(balance(8, 2), vec![4, 5]);
        assert_eq!(balance(7, 2), vec![4, 4]);
        assert_eq!(balance(2, 2), vec![1, 2]);
    }
}
