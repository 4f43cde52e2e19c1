//! The configurations the table measures, one [`Row`] each. To add a row (e.g. split
//! backward), push it in [`rows`](super::rows::rows): its limit, ceiling, memory and peer
//! follow from its fields.

use crate::engine::Layout;
use crate::{Backward, ScheduleKind};

/// The model and data every row trains: MLP-`hidden`x`width` on `batch` rows, SGD at 0.01,
/// remat never, `threads` compute threads per worker (the PyTorch peers' workload).
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Hidden width and input dimension.
    pub width: usize,
    /// Hidden Linear+ReLU blocks.
    pub hidden: usize,
    /// Output classes.
    pub classes: usize,
    /// Rows per step.
    pub batch: usize,
    /// Compute threads per worker.
    pub threads: usize,
    /// Untimed steps.
    pub warmup: usize,
    /// Measured steps.
    pub steps: usize,
    /// Width of the GPT rows' model (0: no GPT rows).
    pub gpt_width: usize,
    /// Tokens per sequence of the GPT rows.
    pub gpt_context: usize,
    /// Hidden width of the `Llama` row's model (even); 0 leaves the row out.
    pub llama_width: usize,
    /// The dtype the rows compute in (fp32 masters either way).
    pub precision: crate::Precision,
}

impl Workload {
    /// `GPT-4x256 (vocab 512, context 64), batch 32`.
    pub fn gpt_name(&self) -> String {
        let (vocab, _, blocks, batch) = GPT;
        format!(
            "GPT-{blocks}x{} (vocab {vocab}, context {}), batch {batch}",
            self.gpt_width, self.gpt_context
        )
    }

    /// `MLP-8x1024, batch 256` (`…, bf16` under bf16).
    pub fn name(&self) -> String {
        let precision = match self.precision {
            crate::Precision::Fp32 => String::new(),
            p => format!(", {p}"),
        };
        format!(
            "MLP-{}x{}, batch {}{precision}",
            self.hidden, self.width, self.batch
        )
    }
}

/// The model a pipeline row trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchModel {
    /// The [`Workload`]'s MLP (the PyTorch peers' workload).
    Mlp,
    /// [`GPT`], a small decoder on synthetic tokens: no split backward (its layers have no
    /// dense form), so zero-bubble plans run its backward whole.
    Gpt,
    /// `LLAMA`, the 4-layer d512 Llama on synthetic tokens, beside transformers' own model
    /// under torch.distributed.pipelining (`scripts/peers/bench_llama_pipe.py`).
    Llama,
}

/// The Llama row's vocabulary, blocks, context and batch (sequences); its width is the
/// [`Workload`]'s (`--llama-width`, 512 by default: the 4-layer d512 Llama).
pub const LLAMA: [usize; 4] = [512, 4, 32, 32];

/// The Llama row's model at `width` (even): [`LLAMA`]'s vocabulary, blocks and context, 8 query
/// heads sharing 4 key/value heads where `width` is a multiple of 16 (else 1 and 1: a rotary
/// head needs an even width), and the SwiGLU width `--model llama` takes by default (8/3 ×
/// width, rounded up to a multiple of 8: 1368 at 512).
pub fn llama_config(width: usize) -> pipetrain_models::LlamaConfig {
    let [vocab, layers, context, _] = LLAMA;
    let (heads, kv_heads) = if width % 16 == 0 { (8, 4) } else { (1, 1) };
    let intermediate = (8 * width).div_ceil(3).div_ceil(8) * 8;
    let mut config =
        pipetrain_models::LlamaConfig::new(vocab, width, intermediate, layers, heads, kv_heads);
    config.max_positions = context;
    config
}

/// The flags of `bench_llama_pipe.py` for [`llama_config`]`(width)`: the same model on the
/// PyTorch side.
pub fn llama_peer_args(width: usize) -> Vec<String> {
    let c = llama_config(width);
    let [_, _, _, batch] = LLAMA;
    let (vocab, hidden, intermediate, layers, heads, kv_heads, context) = (
        c.vocab,
        c.hidden,
        c.intermediate,
        c.layers,
        c.heads,
        c.kv_heads,
        c.max_positions,
    );
    [
        ("--llama-vocab", vocab),
        ("--llama-hidden", hidden),
        ("--llama-intermediate", intermediate),
        ("--llama-layers", layers),
        ("--llama-heads", heads),
        ("--llama-kv-heads", kv_heads),
        ("--llama-context", context),
        ("--llama-batch", batch),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
    .collect()
}

/// The GPT rows' vocabulary, heads, blocks and batch (sequences); width and context are the
/// [`Workload`]'s.
pub const GPT: (usize, usize, usize, usize) = (512, 4, 4, 32);

/// What a row runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    /// One pipeline of `replicas × stages` workers.
    Pipeline {
        /// Data-parallel replicas.
        replicas: usize,
        /// Stages.
        stages: usize,
        /// Micro-batches per step.
        micro_batches: usize,
        /// Schedule.
        schedule: ScheduleKind,
        /// The ZeRO level (0–3).
        zero: u8,
        /// Split (the default) or fused backward.
        backward: Backward,
        /// 1: every worker a thread of this process; more: `mpirun -np processes`, one worker
        /// per process (replicas × stages of them).
        processes: usize,
        /// What it trains.
        model: BenchModel,
        /// Compute threads per worker, when not the [`Workload`]'s.
        threads: Option<usize>,
    },
    /// `workers` independent 1-stage pipelines stepping at once on their own threads, each on
    /// the whole batch in `micro_batches` micro-batches, with no communication: what that many
    /// workers reach on this machine with no bubble (they share its memory bandwidth and caches).
    Independent {
        /// Concurrent pipelines.
        workers: usize,
        /// Micro-batches per step of each.
        micro_batches: usize,
    },
}

impl Shape {
    /// A pipeline row's replicas, stages and micro-batches (`None` for independent workers).
    pub fn layout(&self) -> Option<Layout> {
        match *self {
            Shape::Pipeline {
                replicas,
                stages,
                micro_batches,
                ..
            } => Some(Layout::new(replicas, stages, micro_batches)),
            Shape::Independent { .. } => None,
        }
    }

    /// Workers the row keeps busy.
    pub fn workers(&self) -> usize {
        match *self {
            Shape::Independent { workers, .. } => workers,
            Shape::Pipeline { .. } => self.layout().map_or(0, |l| l.workers()),
        }
    }

    /// Micro-batches per worker per step, each of `batch / (replicas × m)` rows: the 1-worker
    /// configuration with micro-batches of the same rows is `batch / rows` micro-batches.
    pub fn rows_per_micro_batch(&self, batch: usize) -> usize {
        match *self {
            Shape::Independent { micro_batches, .. } => batch / micro_batches.max(1),
            Shape::Pipeline { .. } => self.layout().map_or(0, |l| l.rows_per_part(batch)),
        }
    }

    /// Model stages the row cuts: stages × the schedule's chunks per rank.
    pub fn chunks(&self) -> usize {
        match *self {
            Shape::Pipeline {
                stages, schedule, ..
            } => stages * schedule.virtual_stages(),
            Shape::Independent { .. } => 1,
        }
    }

    /// Processes the row runs in (1 but for MPI rows).
    pub fn processes(&self) -> usize {
        match *self {
            Shape::Pipeline { processes, .. } => processes,
            Shape::Independent { .. } => 1,
        }
    }

    /// The model it trains.
    pub fn model(&self) -> BenchModel {
        match *self {
            Shape::Pipeline { model, .. } => model,
            Shape::Independent { .. } => BenchModel::Mlp,
        }
    }

    /// Whether it trains the MLP of the [`Workload`] (the rows limits and peers are for).
    pub fn is_mlp(&self) -> bool {
        self.model() == BenchModel::Mlp
    }

    /// The pipeline this shape runs (one of them, for independent workers: 1 worker, GPipe).
    pub fn as_pipeline(self) -> Shape {
        match self {
            Shape::Independent { micro_batches, .. } => {
                pipeline(1, 1, micro_batches, ScheduleKind::GPipe, 0)
            }
            pipeline => pipeline,
        }
    }

    /// This shape with `schedule` instead of its own.
    pub fn with_schedule(mut self, schedule: ScheduleKind) -> Shape {
        if let Shape::Pipeline { schedule: s, .. } = &mut self {
            *s = schedule;
        }
        self
    }

    /// The same configuration in this process.
    pub fn in_process(mut self) -> Shape {
        if let Shape::Pipeline { processes, .. } = &mut self {
            *processes = 1;
        }
        self
    }

    /// The fill-drain bound m/(m+p−1) of the pipeline's bubble (1 for a single stage).
    pub fn bubble_bound(&self) -> f64 {
        match *self {
            Shape::Pipeline {
                stages,
                micro_batches,
                ..
            } => micro_batches as f64 / (micro_batches + stages - 1) as f64,
            Shape::Independent { .. } => 1.0,
        }
    }
}

/// A PyTorch peer run: one of the scripts in the peers folder and its arguments (the workload's
/// `--width --layers --batch --steps --warmup` are added).
#[derive(Clone, Debug, PartialEq)]
pub struct Peer {
    /// Script file name, e.g. `bench_pipe.py`.
    pub script: &'static str,
    /// Its arguments.
    pub args: Vec<String>,
    /// What the peer is, for the notes.
    pub what: &'static str,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Section of the table: `single device`, `data parallel`, `pipelined`, …
    pub group: &'static str,
    /// Name within it, e.g. `1F1B, 2 stages, m=8`; [`BenchSettings::only`](super::BenchSettings::only) matches `group: name`.
    pub name: String,
    /// What it runs.
    pub shape: Shape,
    /// The PyTorch counterpart, if there is one.
    pub peer: Option<Peer>,
}

impl Row {
    /// `group: name`.
    pub fn label(&self) -> String {
        format!("{}: {}", self.group, self.name)
    }
}

pub(crate) fn pipeline(
    replicas: usize,
    stages: usize,
    m: usize,
    schedule: ScheduleKind,
    zero: u8,
) -> Shape {
    Shape::Pipeline {
        replicas,
        stages,
        micro_batches: m,
        schedule,
        zero,
        backward: Backward::default(),
        processes: 1,
        model: BenchModel::Mlp,
        threads: None,
    }
}

/// `shape` (a pipeline) run as one process per worker under `mpirun`.
pub(crate) fn over_mpi(mut shape: Shape) -> Shape {
    let workers = shape.workers();
    if let Shape::Pipeline { processes, .. } = &mut shape {
        *processes = workers;
    }
    shape
}

/// `shape` (a pipeline) with another backward.
pub(crate) fn with_backward(mut shape: Shape, backward: Backward) -> Shape {
    if let Shape::Pipeline { backward: b, .. } = &mut shape {
        *b = backward;
    }
    shape
}

pub(crate) fn peer(script: &'static str, what: &'static str, args: &[String]) -> Peer {
    Peer {
        script,
        args: args.to_vec(),
        what,
    }
}

/// The single-device row with micro-batches of `rows` rows.
pub fn single(batch: usize, rows: usize, threads: usize) -> Row {
    let m = batch / rows.max(1);
    let threads = threads.to_string();
    Row {
        group: "single device",
        name: format!("1 worker, m={m} ({rows} rows)"),
        shape: pipeline(1, 1, m, ScheduleKind::GPipe, 0),
        peer: Some(peer(
            "bench_single.py",
            "one process, gradients accumulated over m micro-batches",
            &["--threads".into(), threads, "--m".into(), m.to_string()],
        )),
    }
}

/// The row of `workers` independent workers with micro-batches of `rows` rows.
pub fn independent(batch: usize, workers: usize, rows: usize) -> Row {
    let m = batch / rows.max(1);
    Row {
        group: "independent workers",
        name: format!("{workers} x 1 worker, no communication, m={m} ({rows} rows)"),
        shape: Shape::Independent {
            workers,
            micro_batches: m,
        },
        peer: None,
    }
}

/// The MLP, the GPT and the Llama of the table at these sizes, as the trainer's reference
/// models: what `bench` checks against this machine's memory before anything is allocated
/// (`train`'s limits; the GPT's heads fall back to 1 where the width does not split over
/// [`GPT`]'s; the Llama is `llama_config`'s).
#[cfg(feature = "trainer")]
pub fn table_models(
    (width, hidden_layers, classes): (usize, usize, usize),
    (gpt_width, gpt_context): (usize, usize),
    llama_width: usize,
) -> [crate::trainer::ReferenceModel; 3] {
    use crate::trainer::ReferenceModel;
    use pipetrain_models::{GptConfig, MlpConfig};
    let (vocab, heads, blocks, _) = GPT;
    let heads = if gpt_width % heads == 0 { heads } else { 1 };
    [
        ReferenceModel::Mlp(MlpConfig::new(width, hidden_layers, classes)),
        ReferenceModel::Gpt(GptConfig::new(vocab, gpt_context, gpt_width, heads, blocks)),
        ReferenceModel::Llama {
            config: llama_config(llama_width),
            context: LLAMA[2],
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::super::rows::rows;
    use super::*;

    #[test]
    fn the_table_has_every_kind_of_row() {
        let rows = rows(&[1, 4, 8, 32], 1, true);
        for group in [
            "MPI",
            "schedules",
            "GPT schedules",
            "Llama",
            "memory-dial schedules",
            "data parallel",
            "model parallel",
            "pipelined",
            "hybrid",
            "ZeRO-1",
            "backward",
        ] {
            assert!(rows.iter().any(|r| r.group == group), "{group}");
        }
        // Fused at m = 32 on 1 worker and 2 stages; split with weight groups of 1 and 8.
        let backward: Vec<_> = rows
            .iter()
            .filter(|r| r.group == "backward")
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(
            backward,
            [
                "1 worker, m=32, fused (autodiff)",
                "1F1B, 2 stages, m=32, fused (autodiff)",
                "1F1B, 2 stages, m=32, split, weight group 1",
                "1F1B, 2 stages, m=32, split, weight group 8",
            ]
        );
        // The memory dial: 1F1B, V-Min, V-Half and ZB-2P on 2 and 4 ranks at m = 4, 8, 32.
        let dial = rows.iter().filter(|r| r.group == "memory-dial schedules");
        assert_eq!(dial.count(), 4 * 2 * 3);
        // ZeRO levels 0-3 on 2 x 2, in process and over MPI, beside the FSDP2 peer.
        let zero: Vec<&Row> = rows.iter().filter(|r| r.group == "ZeRO").collect();
        assert_eq!(zero.len(), 8);
        for (i, r) in zero.iter().enumerate() {
            let Shape::Pipeline {
                zero: level,
                processes,
                replicas: 2,
                stages: 2,
                ..
            } = r.shape
            else {
                panic!("{}", r.label());
            };
            assert_eq!(
                (usize::from(level), processes > 1),
                (i % 4, i >= 4),
                "{}",
                r.label()
            );
            let peer = r.peer.as_ref().unwrap();
            assert_eq!(peer.script, "bench_fsdp_pipe.py");
            assert!(peer.args.contains(&level.to_string()));
        }
        assert!(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("scripts/peers/bench_fsdp_pipe.py")
                .is_file()
        );
        // GPipe at m = 4, 8, 32 (m = 1 is the model-parallel row), 1F1B at all four.
        assert_eq!(rows.iter().filter(|r| r.group == "pipelined").count(), 7);
        // Every row with a PyTorch counterpart but 1F1B at m = 1, which torch refuses.
        let no_peer: Vec<_> = rows
            .iter()
            .filter(|r| {
                r.peer.is_none() && r.group != "backward" && !r.group.ends_with("schedules")
            })
            .map(Row::label)
            .collect();
        assert_eq!(
            no_peer,
            [
                "pipelined: 1F1B, 2 stages, m=1",
                "hybrid: 2 replicas x 2 stages, 1F1B, m=4",
                "MPI: 2 replicas x 2 stages, 1F1B, m=4, 4 processes",
                "ZeRO-1: 2 replicas x 1 stage, m=1, optimizer state sharded"
            ]
        );
        // Each MLP schedule row beside torch's same schedule; the GPT's against their own 1F1B.
        for r in rows.iter().filter(|r| r.group.ends_with("schedules")) {
            let script = r.peer.as_ref().map(|p| p.script);
            match r.group {
                "schedules" => assert_eq!(script, Some("bench_pipe_schedules.py"), "{}", r.label()),
                _ => assert_eq!(script, None, "{}", r.label()),
            }
        }
        // The Llama row beside transformers' model of the same shape, pipetrain's own peer.
        let llama = rows.iter().find(|r| r.group == "Llama").unwrap();
        assert_eq!(llama.shape.model(), BenchModel::Llama);
        let peer = llama.peer.as_ref().unwrap();
        assert_eq!(peer.script, "bench_llama_pipe.py");
        assert!(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("scripts/peers")
                .join(peer.script)
                .is_file()
        );
        let config = llama_config(512);
        assert_eq!(
            (config.heads, config.kv_heads, config.intermediate),
            (8, 4, 1368)
        );
        let args = llama_peer_args(512);
        for (flag, value) in [
            ("--llama-hidden", config.hidden),
            ("--llama-layers", config.layers),
            ("--llama-kv-heads", config.kv_heads),
            ("--llama-intermediate", config.intermediate),
        ] {
            let at = args.iter().position(|a| a == flag).unwrap();
            assert_eq!(args[at + 1], value.to_string(), "{flag}");
        }
        // Each MPI row has the in-process row of its layout beside it.
        for row in rows.iter().filter(|r| r.group == "MPI") {
            assert!(
                rows.iter()
                    .any(|r| r.shape == row.shape.in_process() && r != row)
            );
        }
        assert!(
            !super::super::rows::rows(&[1, 4], 1, false)
                .iter()
                .any(|r| r.group == "MPI")
        );
        let labels: Vec<_> = rows.iter().map(Row::label).collect();
        let unique: std::collections::HashSet<_> = labels.iter().collect();
        assert_eq!(unique.len(), labels.len(), "{labels:?}");
    }

    #[test]
    fn limits_come_from_rows_per_micro_batch_and_the_bubble() {
        let hybrid = pipeline(2, 2, 4, ScheduleKind::OneFOneB, 0);
        assert_eq!(hybrid.workers(), 4);
        assert_eq!(hybrid.rows_per_micro_batch(256), 32);
        assert_eq!(hybrid.bubble_bound(), 0.8);
        let pair = independent(256, 2, 32).shape;
        assert_eq!((pair.workers(), pair.rows_per_micro_batch(256)), (2, 32));
        assert_eq!(single(256, 8, 1).name, "1 worker, m=32 (8 rows)");
    }
}
