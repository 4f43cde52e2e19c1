//! The memory model against the allocator: `Pipeline::worker_memory` and `Setup::memory` (the
//! accounting the budget, `tune` and `--memory-budget` use) are a model, not a reading, so
//! this test measures them with a counting global allocator ([`counter`], on
//! `tracking-allocator`'s hooks), which tells each worker's bytes apart by the thread that
//! allocated them and logs a step's allocations and frees.
//!
//! ## What is compared
//!
//! A step's peak: the most bytes live during a step (the third: the first two set up the
//! workers, the optimizer state and the threads' caches) above what was live just before it,
//! less what the step left live after it, against the model's [`WorkerMemory::per_step`]
//! (gradients, and the larger of the activations held and the all-reduce's sums), both
//! `worker_memory` (after the step) and `Setup::memory` (before any), each held ([`Hold`]):
//! - where the process is one worker, its peak to ±15 % ([`LOW`], [`HIGH`]);
//! - where several share it, **each worker's** peak to ±15 % of its model, a worker's bytes
//!   being those it holds ([`counter::Owner::Holder`]): what its threads made, except what
//!   another stage of its replica handed it (an activation received, a gradient sent back,
//!   which the receiver frees; the model charges received inputs to the receiver), and the
//!   process's peak to not above their models' sum over [`LOW`] (their peaks fall at
//!   different times, so the process's is lower);
//! - where messages are on the way between the workers at their peaks (a weight-gradient group
//!   of one, ZB-H1, ZB-V, interleaved: [`Hold::Between`]), each worker's model to within
//!   ±15 % of some reading between the bytes it alone held and every byte it held at either
//!   end: who holds a message at a worker's peak is then the workers' relative speed (the
//!   same layout's stage 0 read 1.12 and 1.25 by the holder);
//! - not at all where the model has a known gap, printed with its reading (activation-heavy
//!   bf16, the fused backward with re-materialization, the GPT on 2 stages under 1F1B). What
//!   each layer's graph keeps of one micro-batch, and its backward above it, is measured and
//!   printed beside the model's charge ([`graph_bytes`]) and held to it (an MLP's, a GPT's, a
//!   ResNet's and a Llama's layers).
//!
//! Why a worker's bytes are the holder's, not simply the maker's: a message between stages is
//! made by one worker's thread and freed by the other's, and by the maker the same layout read
//! 1.00 / 1.00 on one run and 1.25 / 0.86 on the next (stage 1's input gradients, 8 × 32 KiB,
//! still waiting for stage 0's backward or not). By the receiver, 0.99–1.00 on every run. A
//! collective's sums are the maker's: the replica that owns a share sums it and the others
//! read it, and by the freer 2 replicas read 0.75–1.66.
//!
//! On every row, `Setup::memory` is held to what the step's own counters give (2 %), and a
//! rank's chunks to one weight pass's copies at a time. Parameters are held to the bytes the
//! layers take as made (one copy a replica), Adam's state to what the pipeline's drop frees
//! above the same layout's under SGD, both where they are 256 KiB or more
//! ([`ALLOCATOR_FLOOR`]).
//!
//! Why not the whole peak above what was live before the pipeline was built: the live level
//! between steps also holds the host's per-thread caches, which the model leaves out
//! (`pipetrain::memory`, "Not counted"): `gemm` 0.19 (burn-flex's GEMM) keeps an `L2_SLAB`
//! buffer the size of the core's L2 cache (2 MiB a thread here) in every thread that has run a
//! large enough product, for the thread's life. They are the machine's, persistent, and
//! allocated by the warm-up steps, so the step measured starts with them in its baseline (and
//! one allocated in the measured step, a second compute thread's, is its residue).
//!
//! Per term, each within ±15 %: Adam minus SGD, live between steps (2 × the parameter bytes);
//! 4 micro-batches minus 1 at 512 rows each (the activations held); remat `Always` minus
//! `Never` under `Backward::Split { weight_group: 1 }` (the stash). And `--memory-budget`: a
//! run split under the least budget that fits keeps each worker under it at its measured peak
//! (an MLP's and a GPT's, each layer charged its graph).
//!
//! The readings, before and after issue 48's changes to the model, are in docs/memory.md.
//!
//! Each test takes [`SERIAL`]: the allocator counts the whole process (the test's own thread
//! is nobody's worker: its bytes count in the process's total only).

mod common;
#[path = "memory_measured/counter.rs"]
mod counter;

use std::sync::{Mutex, MutexGuard};

use burn::prelude::*;
use pipetrain::memory::WorkerMemory;
use pipetrain::{
    Activation, Backward, Layer, OptimizerConfig, Pipeline, Precision, Remat, ScheduleKind,
    WorkerId,
};
use pipetrain_models::Batch;
use pipetrain_models::{GptConfig, LlamaConfig, MlpConfig, ResNetConfig, synthetic};

/// The allocator is the process's: one measurement at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Takes [`SERIAL`] (a test that failed while holding it does not stop the others) and runs
/// one layout once, unmeasured, so that the process's first-use buffers exist before any
/// measurement.
fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    counter::start();
    measure(Layout { m: 4, ..BASE });
    guard
}

/// Parameters and optimizer state below this many bytes are not held to the allocator: the
/// modules' and the optimizer's bookkeeping is not small beside them.
const ALLOCATOR_FLOOR: u64 = 256 << 10;

/// The model must be within this factor of the measurement, both ways (±15 %).
const LOW: f64 = 0.85;
/// See [`LOW`].
const HIGH: f64 = 1.15;

/// Waits until the threads of a dropped pipeline have exited (each frees its caches as it
/// ends; a rayon pool's threads outlive its drop) and the live bytes stop moving, so that a
/// measurement does not see another pipeline's memory freed in its middle.
fn settle() {
    for _ in 0..500 {
        if workers_alive() == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut last = counter::current_usage();
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = counter::current_usage();
        if now == last {
            return;
        }
        last = now;
    }
}

/// The process's threads named as a worker's or its compute pool's (`pipetrain-r…`).
fn workers_alive() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("pipetrain-r"))
        .count()
}

/// The model a layout trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    /// `MlpConfig::new(width, 4, 8)` on `rows` rows of `width` features.
    Mlp,
    /// `GptConfig::new(64, 16, width, 2, 2)` on `rows` sequences of 16 tokens.
    Gpt,
    /// `ResNetConfig::new(width, 2, 3)` on `rows` 3×16×16 images.
    ResNet,
    /// `LlamaConfig::new(64, width, 2 · width, 2, 4, 2)` on `rows` sequences of 16 tokens.
    Llama,
    /// `MlpConfig::new(width, 31, 8)` (32 layers: 4 a chunk of 4 ranks × 2 chunks) on `rows`
    /// rows of `width` features.
    DeepMlp,
}

/// One layout of the sweep.
#[derive(Clone, Copy, Debug)]
struct Layout {
    net: Arch,
    width: usize,
    rows: usize,
    stages: usize,
    m: usize,
    schedule: ScheduleKind,
    remat: Remat,
    adam: bool,
    precision: Precision,
    /// `None`: the builder's.
    backward: Option<Backward>,
    /// Replicas of the pipeline.
    replicas: usize,
    /// ZeRO stage (0 or 1).
    zero: u8,
    /// Compute threads per worker.
    threads: usize,
}

/// What one layout measured, and what the model says of it.
struct Measured {
    layout: Layout,
    /// Live bytes of the layers as made, before the pipeline takes them: one replica's
    /// parameters (and the modules' bookkeeping), as the allocator counts them.
    made: i64,
    /// Bytes the pipeline's drop freed once its threads had exited: its parameters, optimizer
    /// state and sample, and its threads' caches.
    freed: i64,
    /// Live bytes between steps (before the measured one), above what was live before.
    between: i64,
    /// The most bytes live during the measured step above `between`, less what the step left
    /// live after it (`residue`).
    step: u64,
    /// Bytes live after the measured step above `between`: a buffer the step allocated and
    /// kept, a compute thread's first GEMM cache (0 when every cache was made by the warm-up).
    residue: i64,
    /// The model after the measured step.
    model: Vec<WorkerMemory>,
    /// The model before any step (`Setup::memory`).
    predicted: Vec<WorkerMemory>,
    /// Each worker's own step (a pipeline rank's chunks together), measured by
    /// [`counter`]: the bytes its threads allocated.
    own: Vec<Own>,
    /// The measured step's peak of what no worker's thread allocated (the test's thread: the
    /// batch's shards), less what it left live.
    other: u64,
    /// The step of what one worker made and another freed ([`counter::Owner::OwnOnly`]).
    crossed: u64,
}

/// One worker's own step (a pipeline rank's chunks together: they take turns) against the model.
struct Own {
    /// The workers counted together: one, or a rank's chunks.
    workers: Vec<WorkerId>,
    /// The most bytes its threads had allocated and not yet seen freed during the step, above
    /// what they held before it, less what they left live after it.
    step: u64,
    /// From the step's log ([`counter::steps`]): the same by the maker (as `step`), by the
    /// holder, by the maker where it freed them too, and every byte it made or freed.
    by_maker: u64,
    holder: u64,
    own_only: u64,
    touched: u64,
    /// [`WorkerMemory::per_step`] of its workers after the step, summed.
    model: u64,
    /// The same before any step (`Setup::memory`).
    predicted: u64,
}

/// A slot's step: its most bytes live above `base`, less what it left live (`after`).
fn step_of(base: i64, peak: i64, after: i64) -> u64 {
    let residue = (after - base).max(0);
    (peak - base - residue).max(0) as u64
}

/// The sweep's Llama at width `d` (`Arch::Llama`): 64 tokens, 2 blocks, 4 query heads sharing
/// 2 key/value heads, a SwiGLU of twice the width.
fn llama(d: usize) -> LlamaConfig {
    LlamaConfig::new(64, d, 2 * d, 2, 4, 2)
}

fn measure(layout: Layout) -> Measured {
    let device = Device::flex();
    let width = layout.width;
    match layout.net {
        Arch::Mlp => {
            let batch = synthetic::classification(5, 0, layout.rows, width, 8, &device);
            run(layout, &batch, |d| MlpConfig::new(width, 4, 8).init(d))
        }
        Arch::DeepMlp => {
            let batch = synthetic::classification(5, 0, layout.rows, width, 8, &device);
            run(layout, &batch, |d| MlpConfig::new(width, 31, 8).init(d))
        }
        Arch::Gpt => {
            let batch = synthetic::tokens(5, 0, layout.rows, 16, 64, &device);
            run(layout, &batch, |d| {
                GptConfig::new(64, 16, width, 2, 2).init(d)
            })
        }
        Arch::Llama => {
            let batch = synthetic::tokens(5, 0, layout.rows, 16, 64, &device);
            run(layout, &batch, |d| llama(width).init(d))
        }
        Arch::ResNet => {
            let batch = synthetic::images(5, 0, layout.rows, 3, 16, 3, &device);
            run(layout, &batch, |d| {
                ResNetConfig::new(width, 2, 3).with_image(3, 16).init(d)
            })
        }
    }
}

fn run<L: Layer>(layout: Layout, batch: &Batch, init: impl FnOnce(&Device) -> Vec<L>) -> Measured {
    let Layout {
        stages,
        m,
        schedule,
        remat,
        adam,
        precision,
        backward,
        replicas,
        zero,
        threads,
        ..
    } = layout;
    settle();
    // A rank's chunks take turns: counted together, in the slot of its first.
    let plan = schedule.plan(stages, m).unwrap();
    let rank_of = |chunk: usize| {
        let stage = pipetrain::StageId::from(chunk);
        plan.rank_of(stage).unwrap_or(chunk)
    };
    let slot_of = |w: WorkerId| counter::slot(w.replica.index(), rank_of(w.stage.index()));
    counter::count_apart();
    for replica in 0..replicas {
        for chunk in 0..stages * schedule.virtual_stages() {
            let own = counter::slot(replica, chunk);
            counter::count_as(own, counter::slot(replica, rank_of(chunk)));
        }
    }
    let before = counter::current_usage();
    let layers = common::seeded(3, init);
    let made = counter::current_usage() - before;
    let optimizer = match adam {
        false => OptimizerConfig::sgd(),
        true => OptimizerConfig::adam(),
    };
    let mut builder = Pipeline::builder()
        .layers(layers)
        .stages(stages)
        .micro_batches(m)
        .schedule(schedule)
        .remat(remat)
        .optimizer(optimizer)
        .precision(precision)
        .replicas(replicas)
        .zero(zero)
        .threads_per_worker(threads);
    if let Some(backward) = backward {
        builder = builder.backward(backward);
    }
    let mut pipeline = builder.build_with(batch).unwrap();
    let predicted = pipeline.setup().memory().to_vec();
    for _ in 0..2 {
        pipeline.train_step(batch).unwrap();
    }
    counter::record();
    let base = counter::current_usage();
    let bases = counter::live();
    counter::reset_peaks();
    let report = pipeline.train_step(batch).unwrap();
    let log = counter::recorded();
    let by = |owner| counter::steps(&log, owner);
    let (by_maker, holder, own_only, touched) = (
        by(counter::Owner::Maker),
        by(counter::Owner::Holder),
        by(counter::Owner::OwnOnly),
        by(counter::Owner::Touched),
    );
    drop(log);
    let peak = counter::peak_usage() - base;
    let residue = counter::current_usage() - base;
    let step = (peak - residue.max(0)) as u64;
    let (peaks, afters) = (counter::peaks(), counter::live());
    let slot_step = |slot: usize| step_of(bases[slot], peaks[slot], afters[slot]);
    let model = pipeline.worker_memory(&report).unwrap();
    let mut own: Vec<Own> = Vec::new();
    for (w, p) in model.iter().zip(&predicted) {
        let slot = slot_of(w.worker);
        match own.iter_mut().find(|o| slot_of(o.workers[0]) == slot) {
            Some(o) => {
                o.workers.push(w.worker);
                o.model += w.per_step();
                o.predicted += p.per_step();
            }
            None => own.push(Own {
                workers: vec![w.worker],
                step: slot_step(slot),
                by_maker: by_maker[slot],
                holder: holder[slot],
                own_only: own_only[slot],
                touched: touched[slot],
                model: w.per_step(),
                predicted: p.per_step(),
            }),
        }
    }
    let other = slot_step(counter::OTHER);
    let crossed = own_only[counter::CROSSED];
    let held = counter::current_usage();
    drop(pipeline);
    settle();
    counter::count_apart();
    let freed = held - counter::current_usage();
    Measured {
        layout,
        made,
        freed,
        between: base - before,
        step,
        residue,
        model,
        predicted,
        own,
        other,
        crossed,
    }
}

fn sum(w: &[WorkerMemory], f: impl Fn(&WorkerMemory) -> u64) -> u64 {
    w.iter().map(f).sum()
}

impl Layout {
    /// The layout in a few words, for the table and the failures.
    fn label(&self) -> String {
        let Layout {
            net,
            width,
            rows,
            stages,
            m,
            schedule,
            remat,
            adam,
            precision,
            backward,
            replicas,
            zero,
            threads,
        } = *self;
        let opt = if adam { "adam" } else { "sgd" };
        let backward = backward.map_or("split".into(), |b| format!("{b:?}"));
        format!(
            "{net:?}-{width} b{rows} r{replicas} zero{zero} p{stages} m{m} t{threads} {schedule} \
             remat {remat:?} {opt} {precision} {backward}"
        )
    }
}

impl Measured {
    fn line(&self) -> String {
        let per_step = sum(&self.model, WorkerMemory::per_step);
        let pred_step = sum(&self.predicted, WorkerMemory::per_step);
        format!(
            "{}: step {} B (residue {}), model {per_step} ({:.2}), predicted {pred_step} ({:.2}) \
             | grads {} stash {} deferred {} copies {} held {} reduced {} | made {} freed {} between {} \
             | per worker (stash, deferred, copies): {:?} | own steps (model/measured): {} other {} crossed {}",
            self.layout.label(),
            self.step,
            self.residue,
            per_step as f64 / self.step as f64,
            pred_step as f64 / self.step as f64,
            sum(&self.model, |w| w.gradients),
            sum(&self.model, |w| w.stash),
            sum(&self.model, |w| w.deferred),
            sum(&self.model, |w| w.weight_copies),
            sum(&self.model, |w| w.held),
            sum(&self.model, |w| w.reduced),
            self.made,
            self.freed,
            self.between,
            self.model
                .iter()
                .map(|w| (w.stash, w.deferred, w.weight_copies))
                .collect::<Vec<_>>(),
            self.own
                .iter()
                .map(|o| {
                    let r = |b: u64| o.model as f64 / b as f64;
                    format!(
                        "{} {}/{} ({:.2}; log: maker {:.2} holder {:.2} own-only {:.2} touched {:.2})",
                        o.workers[0],
                        o.model,
                        o.step,
                        r(o.step),
                        r(o.by_maker),
                        r(o.holder),
                        r(o.own_only),
                        r(o.touched)
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
            self.other,
            self.crossed,
        )
    }
}

/// Parameters dominate (MLP-4x256, batch 64), on one stage, one micro-batch, GPipe, SGD, fp32,
/// the builder's backward (split).
const BASE: Layout = Layout {
    net: Arch::Mlp,
    width: 256,
    rows: 64,
    stages: 1,
    m: 1,
    schedule: ScheduleKind::GPipe,
    remat: Remat::Never,
    adam: false,
    precision: Precision::Fp32,
    backward: None,
    replicas: 1,
    zero: 0,
    threads: 1,
};

/// Activations dominate (MLP-4x32, batch 2048).
const SMALL: Layout = Layout {
    width: 32,
    rows: 2048,
    ..BASE
};

/// How the sweep holds a row.
#[derive(Clone, Copy, Debug)]
enum Hold {
    /// Each worker within ±15 % both ways of the bytes it holds ([`counter::Owner::Holder`]: a
    /// message is its receiver's, a collective's sum its maker's); one worker is the process.
    /// With several, the process's peak is held too, to not above the sum of their models
    /// over [`LOW`] (their peaks fall at different times, so the process peaks lower).
    Band,
    /// Each worker's model within ±15 % of some reading between the bytes it alone held
    /// ([`counter::Owner::OwnOnly`]) and every byte it held at either end
    /// ([`counter::Owner::Touched`]): rows whose workers' peaks fall while messages are on the
    /// way between them (a group of one micro-batch, the schedules that place their `W`s,
    /// chunks taking turns), so who holds those bytes at a worker's peak is the workers'
    /// relative speed (the same layout read 1.12 and 1.25 by the holder). The process as in
    /// [`Hold::Band`].
    Between,
    /// Measured and printed, not held: a part the model does not count yet (named).
    Gap(&'static str),
}

/// `model / measured`, with `what` named, not under [`LOW`] (the process's peak under
/// several workers).
fn at_least(what: &str, model: u64, measured: u64, table: &str) -> Result<(), String> {
    let ratio = model as f64 / measured as f64;
    match ratio >= LOW {
        true => Ok(()),
        false => Err(format!(
            "{what}: model {model} B, measured {measured} B: {ratio:.2}, under {LOW}\n{table}"
        )),
    }
}

/// `model` within ±15 % of some reading between `alone` and `touched` (see [`Hold::Between`]):
/// not under [`LOW`] × `alone`, nor over [`HIGH`] × `touched`.
fn between(
    what: &str,
    model: u64,
    (alone, touched): (u64, u64),
    table: &str,
) -> Result<(), String> {
    let (low, high) = (LOW * alone as f64, HIGH * touched as f64);
    match (low..=high).contains(&(model as f64)) {
        true => Ok(()),
        false => Err(format!(
            "{what}: model {model} B, outside [{LOW} × {alone} B held alone, {HIGH} × {touched} B \
             held at either end]\n{table}"
        )),
    }
}

/// `model / measured`, with `what` named, within [`LOW`, `HIGH`]; the table when not.
fn check(what: &str, model: u64, measured: u64, table: &str) -> Result<(), String> {
    let ratio = model as f64 / measured as f64;
    match (LOW..=HIGH).contains(&ratio) {
        true => Ok(()),
        false => Err(format!(
            "{what}: model {model} B, measured {measured} B: {ratio:.2}, outside [{LOW}, {HIGH}]\n{table}"
        )),
    }
}

#[test]
fn the_model_is_within_15_percent_of_each_step_s_peak() {
    let _serial = serial();
    let (gpipe, one_f_one_b) = (ScheduleKind::GPipe, ScheduleKind::OneFOneB);
    let two = |schedule| Layout {
        stages: 2,
        m: 8,
        schedule,
        adam: true,
        ..SMALL
    };
    let band = Hold::Band;
    // Messages on the way at a worker's peak (see `Hold::Between`).
    let apart = Hold::Between;
    // One worker: the process is the worker.
    let one = |m, remat, backward, threads| Layout {
        m,
        remat,
        backward,
        threads,
        adam: true,
        ..SMALL
    };
    let (never, always, fused) = (Remat::Never, Remat::Always, Some(Backward::Fused));
    let group_of_one = Some(Backward::Split { weight_group: 1 });
    let gpt = |stages, schedule| Layout {
        net: Arch::Gpt,
        width: 64,
        rows: 64,
        stages,
        ..two(schedule)
    };
    let llama = |stages, schedule| Layout {
        net: Arch::Llama,
        ..gpt(stages, schedule)
    };
    let rows = [
        (BASE, band),
        (
            Layout {
                m: 4,
                adam: true,
                ..BASE
            },
            band,
        ),
        // bf16: half-width activations and each stashed micro-batch's bf16 weight copy; the
        // layers keep the autodiff path.
        (
            Layout {
                m: 4,
                adam: true,
                precision: Precision::Bf16,
                ..BASE
            },
            band,
        ),
        (SMALL, band),
        (one(8, never, None, 1), band),
        (one(8, always, None, 1), band),
        // The fused backward: the layers on burn's autodiff path.
        (one(8, never, fused, 1), band),
        // The stash at the step's peak (issue 48 item 3: it was so in 2 rows of 9): each
        // micro-batch's weight gradients at its backward, so the stash is not traded for
        // deferred inputs; with and without re-materialization.
        (one(8, never, group_of_one, 1), band),
        (one(8, always, group_of_one, 1), band),
        // Two compute threads (issue 48 item 3).
        (one(8, never, None, 2), band),
        // Several workers: each by what it holds ([`counter`]).
        (
            Layout {
                stages: 2,
                m: 8,
                schedule: one_f_one_b,
                adam: true,
                ..BASE
            },
            band,
        ),
        (two(gpipe), band),
        (two(one_f_one_b), band),
        (
            Layout {
                remat: always,
                ..two(one_f_one_b)
            },
            band,
        ),
        // The fused backward: stage 0 read 0.88 by the holder on most runs and 0.81 once in
        // the whole suite (the same 0.88 by what it alone held): its peak can fall while stage
        // 1's input gradients are on the way, as the rows below.
        (
            Layout {
                backward: fused,
                ..two(gpipe)
            },
            apart,
        ),
        // A group of one: each `W` as its micro-batch's gradients arrive (see `Hold::Between`).
        (
            Layout {
                backward: group_of_one,
                ..two(gpipe)
            },
            apart,
        ),
        (
            Layout {
                remat: always,
                backward: group_of_one,
                ..two(gpipe)
            },
            apart,
        ),
        (
            Layout {
                threads: 2,
                ..two(one_f_one_b)
            },
            band,
        ),
        // Issue 48 item 3: the layouts the model claims and no row swept. The schedules that
        // place their weight gradients (ZB-H1; ZB-V, 4 chunks on 2 ranks), interleaved.
        (two(ScheduleKind::ZbH1), apart),
        (two(ScheduleKind::ZbV), apart),
        // Issue 51: the controllable-memory V schedules (4 chunks on 2 ranks) and ZB-2P.
        (two(ScheduleKind::VMin), apart),
        (two(ScheduleKind::VHalf), apart),
        (two(ScheduleKind::Zb2p), apart),
        (two(ScheduleKind::Interleaved { virtual_stages: 2 }), apart),
        // Replicas, with and without ZeRO-1, on one stage and on two.
        // The all-reduce's sums at the step's peak (`WorkerMemory::reduced`: each replica sums
        // its share, half the gradients): few activations beside them, so the term decides the
        // row (0.71 a replica with it made 0; on the rows above the activations outweigh it).
        (
            Layout {
                rows: 16,
                replicas: 2,
                ..BASE
            },
            band,
        ),
        (
            Layout {
                m: 4,
                adam: true,
                replicas: 2,
                ..BASE
            },
            band,
        ),
        (
            Layout {
                m: 4,
                adam: true,
                replicas: 2,
                zero: 1,
                ..BASE
            },
            band,
        ),
        (
            Layout {
                replicas: 2,
                ..two(one_f_one_b)
            },
            band,
        ),
        (
            Layout {
                replicas: 2,
                zero: 1,
                ..two(one_f_one_b)
            },
            band,
        ),
        // Issue 50: ZeRO-2 and ZeRO-3 (the step holds the stage whole from its unshard to its
        // reshard, and its gradients until its reduce: the step's model is level 1's), on 2 and
        // 3 replicas.
        (
            Layout {
                m: 4,
                adam: true,
                replicas: 2,
                zero: 2,
                ..BASE
            },
            band,
        ),
        (
            Layout {
                replicas: 2,
                zero: 3,
                adam: true,
                ..two(one_f_one_b)
            },
            band,
        ),
        (
            Layout {
                replicas: 3,
                zero: 3,
                adam: true,
                ..two(one_f_one_b)
            },
            band,
        ),
        // What the model does not count yet (docs/memory.md, issue 48 item 3).
        (
            Layout {
                remat: always,
                backward: fused,
                ..two(gpipe)
            },
            Hold::Gap(
                "the fused backward with re-materialization: the last stage holds more than its \
                 model (0.78 by the holder, stage 0 0.87; before the first forward stopped \
                 recording its graph, stage 0 read 0.11)",
            ),
        ),
        (
            Layout {
                precision: Precision::Bf16,
                ..two(gpipe)
            },
            Hold::Gap(
                "bf16 where activations dominate: 0.88, 0.83 a worker (0.65, 0.76 before stage \
                 0's cast input and the backward's gradients were counted)",
            ),
        ),
        // Issue 48 item 3: the GPT and the conv model, each layer charged what its graph
        // keeps (`Layer::graph_bytes`; before, its output: 0.64 and 0.19).
        (gpt(1, gpipe), band),
        // The deferred inputs dominate: q, k and v keep their shared input once
        // (`Linears::forward_each`; counted three times before, 1.19 and 1.22).
        (gpt(2, one_f_one_b), band),
        (
            Layout {
                net: Arch::ResNet,
                width: 8,
                rows: 64,
                ..two(gpipe)
            },
            band,
        ),
        // The Llama (issue 48 item 3), each layer charged what its graph keeps (before, its
        // output): one worker, and 2 stages under GPipe, where the stash outweighs the
        // deferred inputs.
        (llama(1, gpipe), band),
        (llama(2, gpipe), band),
    ];
    // Each row; each Adam row with its twin under SGD, measured right after it: the optimizer
    // state by the allocator.
    let (measured, twins): (Vec<Measured>, Vec<Option<Measured>>) = rows
        .iter()
        .map(|&(layout, _)| {
            let sgd = Layout {
                adam: false,
                ..layout
            };
            (measure(layout), layout.adam.then(|| measure(sgd)))
        })
        .unzip();
    let table: Vec<String> = measured.iter().map(Measured::line).collect();
    let table = table.join("\n");
    println!("{}\n{table}", cpu());
    let mut failures = Vec::new();
    for ((m, twin), (_, hold)) in measured.iter().zip(&twins).zip(&rows) {
        let per_step = WorkerMemory::per_step;
        let name = m.layout.label();
        let one = m.layout.stages * m.layout.replicas == 1;
        let check = |what: &str, model: u64| match hold {
            Hold::Gap(_) => Ok(()),
            _ if one => check(what, model, m.step, &table),
            _ => at_least(what, model, m.step, &table),
        };
        // Each worker (a rank's chunks together): by what it holds, or between what it alone
        // held and what it held at either end.
        for o in m.own.iter().filter(|_| !one) {
            let what = format!("{name}, {}", o.workers[0]);
            for (when, model) in [("after the step", o.model), ("Setup::memory", o.predicted)] {
                let what = format!("{what} ({when})");
                failures.extend(
                    match hold {
                        Hold::Gap(_) => Ok(()),
                        Hold::Band => self::check(&what, model, o.holder, &table),
                        Hold::Between => between(&what, model, (o.own_only, o.touched), &table),
                    }
                    .err(),
                );
            }
        }
        let checks = [
            check(&format!("{name}, per step"), sum(&m.model, per_step)),
            check(
                &format!("{name}, per step, Setup::memory"),
                sum(&m.predicted, per_step),
            ),
        ];
        failures.extend(checks.into_iter().filter_map(Result::err));
        // The prediction before any step against the accounting of the step's own counters
        // (its peak stash and deferred bytes): the plan's walk (ZB's stash to its `I`, its
        // deferred inputs from `I` to `W`) gives what the step held.
        let (before, after) = (sum(&m.predicted, per_step), sum(&m.model, per_step));
        if !matches!(hold, Hold::Gap(_)) && before.abs_diff(after) > after / 50 {
            failures.push(format!(
                "{name}: Setup::memory predicts {before} B a step, the step's counters give \
                 {after} B\n{table}"
            ));
        }
        // A rank's chunks take turns: one `W`'s copies a rank at a time.
        let chunks = m.layout.schedule.virtual_stages();
        let copying = m.model.iter().filter(|w| w.weight_copies > 0).count();
        if copying > m.layout.stages * m.layout.replicas {
            failures.push(format!(
                "{name}: {copying} workers of {chunks} chunks a rank hold `W`'s copies at once"
            ));
        }
        // The parameters by the allocator: the layers as made, one copy a replica. Where the
        // modules' own bookkeeping (names, ids: 9 kB on MLP-4x32) is not small beside them,
        // the row does not hold them to the band.
        let parameters = sum(&m.predicted, |w| w.parameters);
        if parameters >= ALLOCATOR_FLOOR {
            let made = m.made.max(1) as u64 * m.layout.replicas as u64;
            let what = format!("{name}, parameters (allocator: the layers as made × replicas)");
            failures.extend(self::check(&what, parameters, made, &table).err());
        }
        // Adam's state by the allocator: the bytes the pipeline's drop frees above the same
        // layout's under SGD (the caches and everything else the same); above the same floor
        // (Adam keeps per-tensor records, 7 kB on MLP-4x32's 10 tensors).
        let state = sum(&m.predicted, |w| w.optimizer_state);
        if let Some(sgd) = twin.as_ref().filter(|_| state >= ALLOCATOR_FLOOR) {
            let measured = (m.freed - sgd.freed).max(1) as u64;
            let what = format!("{name}, optimizer state (allocator: Adam − SGD freed at drop)");
            failures.extend(self::check(&what, state, measured, &table).err());
        }
    }
    let gaps: Vec<String> = rows
        .iter()
        .zip(&measured)
        .filter_map(|((_, hold), m)| match hold {
            Hold::Gap(why) => {
                let model = sum(&m.model, WorkerMemory::per_step);
                let ratio = model as f64 / m.step as f64;
                Some(format!("{}: {ratio:.2} ({why})", m.layout.label()))
            }
            _ => None,
        })
        .collect();
    println!("not held (the model's gaps):\n{}", gaps.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn adam_minus_sgd_holds_two_parameter_copies() {
    let _serial = serial();
    let sgd = measure(Layout { m: 4, ..BASE });
    let adam = measure(Layout {
        m: 4,
        adam: true,
        ..BASE
    });
    let measured = (adam.between - sgd.between) as u64;
    let model = sum(&adam.model, |w| w.optimizer_state) - sum(&sgd.model, |w| w.optimizer_state);
    let parameters = sum(&adam.model, |w| w.parameters);
    println!(
        "Adam − SGD between steps: measured {measured} B, model {model} B, 2 × parameters {} B",
        2 * parameters
    );
    let table = format!("{}\n{}", sgd.line(), adam.line());
    check("Adam − SGD", model, measured, &table).unwrap();
    check(
        "Adam − SGD against 2 × parameters",
        2 * parameters,
        measured,
        &table,
    )
    .unwrap();
}

#[test]
fn four_micro_batches_minus_one_is_the_activation_term() {
    let _serial = serial();
    // 512 rows a micro-batch in both.
    let one = measure(Layout { rows: 512, ..SMALL });
    let four = measure(Layout {
        rows: 2048,
        m: 4,
        ..SMALL
    });
    let held = |m: &Measured| sum(&m.model, |w| w.held);
    let measured = four.step - one.step;
    let model = held(&four) - held(&one);
    println!("m 4 − m 1 per step: measured {measured} B, model {model} B");
    check(
        "m 4 − m 1",
        model,
        measured,
        &format!("{}\n{}", one.line(), four.line()),
    )
    .unwrap();
}

/// Under the split backward (a group of one) and the fused one, whose layers run on burn's
/// autodiff path: there re-materialization's first forward must record no graph, or each
/// dropped graph keeps its saved values until the stage's next backward (before issue 48 the
/// fused step held about as much under `Always` as under `Never`: 0.11 of the model's stash
/// on stage 0).
#[test]
fn remat_always_minus_never_is_the_stash_term() {
    let _serial = serial();
    for backward in [Backward::Split { weight_group: 1 }, Backward::Fused] {
        let layout = Layout {
            stages: 2,
            m: 8,
            backward: Some(backward),
            ..SMALL
        };
        let never = measure(layout);
        let always = measure(Layout {
            remat: Remat::Always,
            ..layout
        });
        let stash = |m: &Measured| sum(&m.model, |w| w.stash);
        let measured = never.step.saturating_sub(always.step);
        let model = stash(&never) - stash(&always);
        println!("remat Never − Always, {backward:?}: measured {measured} B, model {model} B");
        check(
            &format!("remat Never − Always, {backward:?}"),
            model,
            measured,
            &format!("{}\n{}", never.line(), always.line()),
        )
        .unwrap();
    }
}

/// The host's CPU, for the table.
fn cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// bf16's measured step peak stays below fp32's at the same activation-dominated layout (issue
/// 45, item 4): the GEMM seam's custom backward keeps the bf16 input and weight of each
/// `Linear` in the graph, not fp32 copies (the opt-in path before it kept fp32 ones): below
/// 0.75 of fp32's (measured 0.63; 0.88 with fp32 copies kept). Where the
/// weights dominate (MLP-4x256 at 64 rows) bf16 holds more than fp32: each stashed micro-batch
/// keeps its bf16 weight copy, and fp32's split backward keeps none (measured 3.30 MB against
/// 1.52 MB; the model counts both).
#[test]
fn the_bf16_step_peak_stays_below_fp32s() {
    let _serial = serial();
    let layout = Layout {
        m: 4,
        adam: true,
        ..SMALL
    };
    let fp32 = measure(layout);
    let bf16 = measure(Layout {
        precision: Precision::Bf16,
        ..layout
    });
    println!("fp32 step peak {} B, bf16 {} B", fp32.step, bf16.step);
    // Half-width activations and saved operands: about 0.63 of fp32's measured. With the
    // backward keeping fp32 copies of its operands (the break this test was seen failing with)
    // it measured 0.88.
    assert!(
        (bf16.step as f64) < 0.75 * fp32.step as f64,
        "bf16's step peak {} B is not below 0.75 of fp32's {} B\n{}\n{}",
        bf16.step,
        fp32.step,
        fp32.line(),
        bf16.line()
    );
}

/// `--memory-budget` measured (issue 48 item 3): a run split under a budget stays under it at
/// its measured peak. The budget is the least the split fits (the one the over-budget error
/// names), so the fullest stage is as close to it as the accounting allows. The measured peak
/// is the parameters the built pipeline holds and the most bytes live during a step above the
/// level just before it (gradients, stash, received inputs, deferred weight-gradient inputs,
/// `W`'s copies; SGD keeps no state), as the sweep measures them.
///
/// Each worker's peak is held to the budget: its share of the layers as made (by its parameter
/// bytes) and the most bytes it held during the step ([`counter::Owner::Holder`]); the fullest
/// comes near it (0.98 on one stage, 0.93–0.94 on two, the GPT 0.96), and not under [`LOW`] of it. The
/// process's peak is held to the budget times the workers, and each worker's model after the
/// step to the budget.
///
/// The budget's accounting is per layer plus, per stage, its received inputs and `W`'s copies
/// ([`pipetrain::memory`]); docs/reliability.md names the breaks this test was seen failing
/// with.
#[test]
fn a_split_under_a_memory_budget_stays_under_it_at_its_measured_peak() {
    let _serial = serial();
    let device = Device::flex();
    let mut failures = Vec::new();
    // The default split backward, whose weight gradients wait for the step's end (`W`'s
    // copies count); and re-materialization with a weight-gradient group of one, where the
    // stash is each stage's received inputs.
    let (group_of_one, to_end) = (Some(Backward::Split { weight_group: 1 }), None);
    let (width, rows) = (32, 2048);
    let batch = synthetic::classification(5, 0, rows, width, 8, &device);
    let mlp = || common::seeded(3, |d| MlpConfig::new(width, 4, 8).init(d));
    for (stages, schedule, remat, backward) in [
        (1, ScheduleKind::GPipe, Remat::Never, to_end),
        (2, ScheduleKind::OneFOneB, Remat::Never, to_end),
        (2, ScheduleKind::GPipe, Remat::Always, group_of_one),
    ] {
        let row = BudgetRow {
            model: "MLP-4x32 b2048",
            stages,
            schedule,
            remat,
            backward,
        };
        failures.extend(row.measure(&batch, mlp));
    }
    // Issue 48 item 3: a model whose layers' graphs keep more than their outputs, each layer
    // charged its graph (`Layer::graph_bytes`; before, its output: stage 1 measured 1.12 of
    // the budget, and its model after the step was over it; without the split `Linear`s'
    // zeros leaves, 1.02). The sweep's GPT (d 64, 2 blocks, 64 × 16 tokens) on 2 stages under
    // GPipe, where the stash outweighs the deferred inputs. Not the ResNet: its stage 0 holds
    // 1.11 of its model (the sweep's 0.90: the graph's bookkeeping, batch norm's 13 kB a call),
    // beyond the budget's 1/32 headroom (it measured 1.08–1.12 of the budget).
    let tokens = synthetic::tokens(5, 0, 64, 16, 64, &device);
    let gpt = || common::seeded(3, |d| GptConfig::new(64, 16, 64, 2, 2).init(d));
    let row = BudgetRow {
        model: "GPT d 64 b64",
        stages: 2,
        schedule: ScheduleKind::GPipe,
        remat: Remat::Never,
        backward: to_end,
    };
    failures.extend(row.measure(&tokens, gpt));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One row of [`a_split_under_a_memory_budget_stays_under_it_at_its_measured_peak`].
struct BudgetRow {
    /// The model and batch, for the table and the failures.
    model: &'static str,
    stages: usize,
    schedule: ScheduleKind,
    remat: Remat,
    /// `None`: the builder's.
    backward: Option<Backward>,
}

impl BudgetRow {
    /// Splits `layers()` under the least budget that fits (8 micro-batches of `batch`, SGD),
    /// measures its third step, and says where a worker is over the budget or the fullest
    /// under [`LOW`] of it.
    fn measure<L: Layer>(&self, batch: &Batch, layers: impl Fn() -> Vec<L>) -> Vec<String> {
        let BudgetRow {
            model,
            stages,
            schedule,
            remat,
            backward,
        } = *self;
        let mut failures = Vec::new();
        let build = |budget: u64, layers| {
            let builder = Pipeline::builder()
                .layers(layers)
                .micro_batches(8)
                .schedule(schedule)
                .remat(remat)
                .optimizer(OptimizerConfig::sgd())
                .memory_budget(budget);
            let builder = match backward {
                Some(backward) => builder.backward(backward),
                None => builder,
            };
            match stages {
                1 => builder,
                stages => builder.stages(stages),
            }
            .build_with(batch)
        };
        let least = match build(1, layers()) {
            Err(pipetrain::Error::Build(pipetrain::BuildError::MemoryBudget {
                smallest_bytes,
                ..
            })) => smallest_bytes,
            Err(e) => panic!("a 1-byte budget: {e}"),
            Ok(_) => panic!("a 1-byte budget was accepted"),
        };
        settle();
        let before = counter::current_usage();
        let layers = layers();
        let made = (counter::current_usage() - before) as u64;
        let mut pipeline = build(least, layers).unwrap();
        for _ in 0..2 {
            pipeline.train_step(batch).unwrap();
        }
        counter::record();
        let base = counter::current_usage();
        counter::reset_peaks();
        let report = pipeline.train_step(batch).unwrap();
        let residue = (counter::current_usage() - base).max(0);
        let step = (counter::peak_usage() - base - residue) as u64;
        let holder = counter::steps(&counter::recorded(), counter::Owner::Holder);
        let split = pipeline.setup().partition().to_string();
        let workers = pipeline.worker_memory(&report).unwrap();
        let model_bytes: Vec<u64> = workers.iter().map(WorkerMemory::total).collect();
        drop(pipeline);
        // Each worker: its share of the layers as made (by its parameter bytes) and the bytes
        // it held at its own peak (`counter::Owner::Holder`, as the sweep holds them).
        let parameters = sum(&workers, |w| w.parameters).max(1);
        let own: Vec<u64> = workers
            .iter()
            .map(|w| {
                let slot = counter::slot(w.worker.replica.index(), w.worker.stage.index());
                made * w.parameters / parameters + holder[slot]
            })
            .collect();
        let measured = made + step;
        let allowed = least * stages as u64;
        let ratio = measured as f64 / allowed as f64;
        let row = format!("{model}, {stages} stage(s), {schedule}, remat {remat:?}, split {split}");
        println!(
            "{row}: budget {least} B: parameters {made} B + step {step} B = {measured} B, \
             {ratio:.2} of {stages} × the budget; each worker {own:?} ({:?} of the budget); the \
             model after the step {model_bytes:?}",
            own.iter()
                .map(|&b| format!("{:.2}", b as f64 / least as f64))
                .collect::<Vec<_>>()
        );
        for (worker, &bytes) in own.iter().enumerate() {
            if bytes > least {
                failures.push(format!(
                    "{row}: worker {worker} measured {bytes} B at its peak, over the {least} B \
                     budget it was split under ({:.2})",
                    bytes as f64 / least as f64
                ));
            }
        }
        // Not vacuous: the least budget is the fullest worker's, which comes near it.
        let fullest = own.iter().copied().max().unwrap_or(0);
        if (fullest as f64) < LOW * least as f64 {
            failures.push(format!(
                "{row}: the fullest worker measured {fullest} B, under {LOW} of the {least} B \
                 budget ({:.2})",
                fullest as f64 / least as f64
            ));
        }
        if measured > allowed {
            failures.push(format!(
                "{row}: measured {measured} B at the peak, over {stages} × the {least} B budget \
                 it was split under ({ratio:.2})"
            ));
        }
        // One stage: not vacuous, the accounting is not far above the measurement.
        if stages == 1 && ratio < 0.9 {
            failures.push(format!(
                "{row}: measured {measured} B, under 0.9 of the {least} B budget ({ratio:.2})"
            ));
        }
        // Each worker: the model after the step (held to the allocator by the sweep, its
        // received inputs and `W`'s copies in it) within the budget.
        for (worker, &bytes) in model_bytes.iter().enumerate() {
            if bytes > least {
                failures.push(format!(
                    "{row}: worker {worker}'s memory after the step, {bytes} B, is over the \
                     {least} B budget"
                ));
            }
        }
        failures
    }
}

/// What burn's autodiff graph keeps of one micro-batch, layer by layer (the bytes a layer's
/// training forward leaves live: its output and what its ops saved for their backward), against
/// what the model charges a layer per stashed micro-batch (its output; a dense ReLU layer's
/// output before the ReLU too; the cast weights under bf16).
///
/// And the most bytes its backward (seeded by ones) holds above what the forward left live:
/// the gradients of the micro-batch's values as they flow, which the model does not count.
fn graph_bytes<L: Layer>(
    layers: &[L],
    sample: &Activation,
    precision: Precision,
) -> (Vec<(u64, u64)>, u64) {
    let charged = pipetrain::memory::layer_memory(layers, sample, precision).unwrap();
    let device = Device::flex().autodiff();
    let training: Vec<L> = layers
        .iter()
        .map(|l| l.clone().to_device(&device).train())
        .collect();
    let mut x = precision.input(layers.first(), sample.clone().to_device(&device));
    let mut kept = Vec::new();
    for ((layer, cast), charge) in layers.iter().zip(precision.layers(&training)).zip(&charged) {
        let relu = layer
            .dense()
            .is_some_and(|d| d.activation() == pipetrain::DenseActivation::Relu);
        settle();
        let before = counter::current_usage();
        x = cast.forward(x).unwrap();
        let after = counter::current_usage();
        let pre_relu = if relu { charge.activation } else { 0 };
        kept.push(((after - before).max(0) as u64, charge.stashed() + pre_relu));
    }
    settle();
    let before = counter::current_usage();
    counter::reset_peaks();
    let grads = match x {
        Activation::Float2(t) => t.sum().backward(),
        Activation::Float3(t) => t.sum().backward(),
        Activation::Float4(t) => t.sum().backward(),
        other => panic!("a float output, not {other:?}"),
    };
    let backward = (counter::peak_usage() - before).max(0) as u64;
    drop(grads);
    (kept, backward)
}

/// Layers whose graph keeps less than this are not held to their charge: the graph's
/// bookkeeping per recorded op (some hundred bytes an op, batch norm's 13 kB a call), which the
/// model leaves out (`pipetrain_engine::saved`), is not small beside them (the ResNet's head: 1 kB
/// kept, 96 B of logits).
const GRAPH_FLOOR: u64 = 16 << 10;

/// What burn's autodiff graph keeps of one micro-batch, layer by layer ([`graph_bytes`]),
/// beside what the model charges it ([`Layer::graph_bytes`]: the output and what each op
/// saves, from the layer's shapes), on the sweep's micro-batches (issue 48 item 3). Printed for
/// each layer; held to ±15 % for the fp32 MLP's dense ReLU layers (their input's product and
/// their output before and after the ReLU), the GPT's embedding, blocks and head, the ResNet's
/// stem and blocks, the Llama's embedding, blocks and head in fp32 and bf16 (those keeping
/// [`GRAPH_FLOOR`] or more). Before the per-layer graph the model charged every layer its
/// output: a GPT block read 24 times that, a ResNet block 7.7, a Llama block 24.9 and its head
/// 3.09.
#[test]
fn what_each_layer_s_graph_keeps_beside_the_model_s_charge() {
    let _serial = serial();
    let device = Device::flex();
    let mlp = || common::seeded(3, |d| MlpConfig::new(32, 4, 8).init(d));
    let rows = synthetic::classification(5, 0, 256, 32, 8, &device).inputs;
    let tokens = synthetic::tokens(5, 0, 8, 16, 64, &device).inputs;
    let images = synthetic::images(5, 0, 8, 3, 16, 3, &device).inputs;
    let gpt = common::seeded(3, |d| GptConfig::new(64, 16, 64, 2, 2).init(d));
    let resnet = common::seeded(3, |d| ResNetConfig::new(8, 2, 3).with_image(3, 16).init(d));
    let llama = common::seeded(3, |d| llama(64).init(d));
    let mut failures = Vec::new();
    let mut print = |what: &str, (kept, backward): (Vec<(u64, u64)>, u64), held: bool| {
        let graph: u64 = kept.iter().map(|k| k.0).sum();
        println!(
            "{what}: its backward holds {backward} B above the graph's {graph} B ({:.2}×)",
            backward as f64 / graph.max(1) as f64
        );
        for (i, (kept, charged)) in kept.into_iter().enumerate() {
            let ratio = kept as f64 / charged.max(1) as f64;
            println!(
                "{what}, layer {i}: the graph keeps {kept} B, the model charges {charged} B ({ratio:.2}×)"
            );
            let large = kept >= GRAPH_FLOOR;
            if held && large && !(LOW..=HIGH).contains(&(charged as f64 / kept.max(1) as f64)) {
                failures.push(format!(
                    "{what}, layer {i}: kept {kept} B, charged {charged} B"
                ));
            }
        }
    };
    print(
        "MLP-4x32, 256 rows, fp32",
        graph_bytes(&mlp(), &rows, Precision::Fp32),
        true,
    );
    print(
        "MLP-4x32, 256 rows, bf16",
        graph_bytes(&mlp(), &rows, Precision::Bf16),
        false,
    );
    print(
        "GPT d 64, 8 × 16 tokens",
        graph_bytes(&gpt, &tokens, Precision::Fp32),
        true,
    );
    print(
        "ResNet 8 channels, 8 images 16 × 16",
        graph_bytes(&resnet, &images, Precision::Fp32),
        true,
    );
    print(
        "Llama d 64, 4 heads of 16, 2 key/value heads, 8 × 16 tokens",
        graph_bytes(&llama, &tokens, Precision::Fp32),
        true,
    );
    print(
        "the same, bf16",
        graph_bytes(&llama, &tokens, Precision::Bf16),
        true,
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Issue 51 item 4: at a stash-dominated size (MLP-31x32 on 4 ranks, m = 16, 256 rows a
/// micro-batch, SGD; the stash is about 90 % of 1F1B's step), the first rank's measured step
/// under V-Min and V-Half falls below 1F1B's, each rank's own step read by the holder
/// ([`counter::Owner::Holder`]):
/// - V-Min by the fraction the model predicts: the measured ratio (V-Min ÷ 1F1B) within ±15 %
///   of the model's ratio (0.575–0.602 measured, 0.596 predicted);
/// - V-Half by at least the predicted fraction: measured 0.66–0.73, predicted 0.79. The model
///   charges a rank the sum of its two chunks' own peaks, and V-Half's two chunks do not peak at
///   once (tune charges the same sum: an upper bound). So V-Half's is held as an upper bound:
///   the model not under [`LOW`] × the measured ratio.
#[test]
fn the_v_schedules_first_rank_holds_the_predicted_fraction_of_1f1b_s() {
    let _serial = serial();
    let layout = |schedule| Layout {
        net: Arch::DeepMlp,
        width: 32,
        rows: 4096,
        stages: 4,
        m: 16,
        schedule,
        ..BASE
    };
    let first = |m: &Measured| {
        let own = &m.own[0];
        assert_eq!(own.workers[0].stage.index(), 0, "rank 0 holds chunk 0");
        (own.holder, own.model, own.by_maker, own.touched)
    };
    // 1F1B as the paper runs it: each micro-batch's weight gradients right after its input
    // gradients (a group of one), not deferred to the step's end as the builder's default.
    let one_f_one_b = Layout {
        backward: Some(Backward::Split { weight_group: 1 }),
        ..layout(ScheduleKind::OneFOneB)
    };
    let (holder, model, maker, touched) = first(&measure(one_f_one_b));
    eprintln!("1F1B rank 0: model {model} B, holder {holder} B (maker {maker}, touched {touched})");
    for (schedule, upper_bound) in [(ScheduleKind::VMin, false), (ScheduleKind::VHalf, true)] {
        let (h, m, mk, t) = first(&measure(layout(schedule)));
        let measured = h as f64 / holder as f64;
        let predicted = m as f64 / model as f64;
        eprintln!(
            "{schedule:?} rank 0: model {m} B, holder {h} B (maker {mk}, touched {t}): measured \
             {measured:.3} of 1F1B's, predicted {predicted:.3}"
        );
        assert!(
            measured < 1.0,
            "{schedule:?}: rank 0 measured {measured:.3} of 1F1B's"
        );
        let ratio = predicted / measured;
        let held = match upper_bound {
            false => (LOW..=HIGH).contains(&ratio),
            true => ratio >= LOW,
        };
        assert!(
            held,
            "{schedule:?}: rank 0 holds {measured:.3} of 1F1B's, the model predicts \
             {predicted:.3} ({ratio:.2})"
        );
    }
}
