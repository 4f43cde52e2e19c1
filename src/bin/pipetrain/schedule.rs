//! `--schedule`: the schedules the command line offers, as clap values.
//!
//! The names are those of [`ScheduleKind`]'s `FromStr` and `Display` (`gpipe`, `1f1b`, `zb-h1` and
//! the aliases it accepts); the test below holds the two to each other. The library stays free
//! of clap: the mapping is the `From` here.

use std::path::Path;

use clap::ValueEnum;
use pipetrain::partitioner::Partition;
use pipetrain::schedules::{FileProblem, Plan, PlanFile, Schedule, ScheduleError};
use pipetrain::{Layer, Pipeline, ScheduleKind};

use crate::failure::Failure;

/// A pipeline schedule, as `--schedule` spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ScheduleArg {
    /// GPipe fill-drain: all forwards, then all backwards; every stage stashes all micro-batches.
    #[value(name = "gpipe", alias = "fill-drain")]
    Gpipe,
    /// 1F1B (PipeDream-Flush): warm-up forwards, then one forward and one backward in turn;
    /// same bubble as GPipe, stage s stashes at most p − s micro-batches.
    #[default]
    #[value(name = "1f1b", aliases = ["one-f-one-b", "pipedream-flush"])]
    OneFOneB,
    /// ZB-H1 (zero bubble): 1F1B with the backward split into input gradient (sent upstream at
    /// once) and weight gradient, placed to fill the bubbles; a third of 1F1B's bubble when
    /// forward, input and weight gradients cost the same, at 1F1B's peak stash. Splits only
    /// dense layers (the MLP's): a stage without one runs a full backward (with a warning).
    #[value(name = "zb-h1", aliases = ["zbh1", "zero-bubble-h1"])]
    ZbH1,
    /// ZB-2P (zero bubble at twice the memory): the backward split as in zb-h1, each worker
    /// holding up to 2 × --stages micro-batches' activations so that its warm-up runs forwards
    /// back to back and its drain is filled with weight gradients.
    #[value(name = "zb-2p", aliases = ["zb2p", "zero-bubble-2p"])]
    Zb2p,
    /// Interleaved 1F1B (Megatron-LM): each worker holds --virtual-stages chunks of the model
    /// (chunk c on worker c mod p), so the model is cut into stages × v chunks; the bubble
    /// shrinks v-fold, for v times the messages. --micro-batches must be a multiple of
    /// --stages.
    #[value(name = "interleaved", alias = "interleaved-1f1b")]
    Interleaved,
    /// ZB-V (zero bubble in a V): two chunks per worker, worker r holding chunks r and
    /// 2p − 1 − r, the backward split as in zb-h1; about zero bubble at 1F1B's activation
    /// memory when forward, input and weight gradients cost the same.
    #[value(name = "zb-v", aliases = ["zbv", "zero-bubble-v"])]
    ZbV,
    /// Looped BFS (breadth-first): --virtual-stages chunks per worker placed as interleaved's,
    /// each worker running every micro-batch through one chunk before the next; interleaved's
    /// bubble from --micro-batches ≥ --stages on, at GPipe's memory, any --micro-batches.
    #[value(name = "looped-bfs", aliases = ["loopedbfs", "breadth-first"])]
    LoopedBfs,
    /// Interleaved zero bubble: interleaved's --virtual-stages chunks and order with the
    /// backward split as in zb-h1; (p − 1)/(3·v·m + p − 1) of bubble when forward, input and
    /// weight gradients cost the same. --micro-batches must be a multiple of --stages.
    #[value(
        name = "interleaved-zb",
        aliases = ["interleaved-zero-bubble", "zb-interleaved"]
    )]
    InterleavedZb,
    /// DualPipeV (DeepSeek's DualPipe in a V): two chunks per worker placed as zb-v's, the
    /// steady phase pairing one chunk's forward with the other's backward (run one after the
    /// other here), split backwards at both ends. --micro-batches at least 2 × --stages.
    #[value(name = "dualpipev", aliases = ["dual-pipe-v", "dualpipe-v"])]
    DualPipeV,
    /// V-Min (controllable memory): two chunks per worker placed as zb-v's, the backward split,
    /// a V-shape building block repeated per micro-batch; about a third of 1F1B's activation
    /// memory (⌊(p + 4)/3⌋ micro-batches'), a bubble within 1F1B's.
    #[value(name = "v-min", aliases = ["vmin", "zbv-min"])]
    VMin,
    /// V-Half (controllable memory): v-min's placement, a building block with half of 1F1B's
    /// activation memory (⌊(p + 2)/2⌋ micro-batches') and about half of its bubble.
    #[value(name = "v-half", aliases = ["vhalf", "zbv-half"])]
    VHalf,
}

impl ScheduleArg {
    /// The library's schedule; `virtual_stages` is the chunks per worker of interleaved,
    /// interleaved-zb and looped BFS (the others ignore it).
    pub fn kind(self, virtual_stages: usize) -> ScheduleKind {
        match self {
            ScheduleArg::Gpipe => ScheduleKind::GPipe,
            ScheduleArg::OneFOneB => ScheduleKind::OneFOneB,
            ScheduleArg::ZbH1 => ScheduleKind::ZbH1,
            ScheduleArg::Interleaved => ScheduleKind::Interleaved { virtual_stages },
            ScheduleArg::ZbV => ScheduleKind::ZbV,
            ScheduleArg::LoopedBfs => ScheduleKind::LoopedBfs { virtual_stages },
            ScheduleArg::InterleavedZb => ScheduleKind::InterleavedZb { virtual_stages },
            ScheduleArg::DualPipeV => ScheduleKind::DualPipeV,
            ScheduleArg::Zb2p => ScheduleKind::Zb2p,
            ScheduleArg::VMin => ScheduleKind::VMin,
            ScheduleArg::VHalf => ScheduleKind::VHalf,
        }
    }
}

/// The schedule of `--schedule`, or the plan read from `--plan FILE`, parsed and validated
/// (a bad file is a usage error naming its path, line and column).
pub fn of(
    schedule: ScheduleArg,
    virtual_stages: usize,
    plan: Option<&Path>,
) -> Result<Schedule, Failure> {
    match plan {
        Some(path) => Ok(read_plan(path)?.into()),
        None => Ok(schedule.kind(virtual_stages).into()),
    }
}

/// The compute plan in the file at `path`, parsed and validated.
pub fn read_plan(path: &Path) -> Result<Plan, Failure> {
    let at = |e: &dyn std::fmt::Display| Failure::usage(format!("--plan {}: {e}", path.display()));
    // A plan's actions take some 32 bytes each in memory, from some 4 of text.
    let max = crate::footprint::available().map_or(1 << 30, |(free, _)| (free / 8).min(1 << 30));
    match PlanFile::read(path, max as u64) {
        Ok(file) => Ok(file.plan().clone()),
        Err(
            e @ ScheduleError::ReadPlan {
                problem: FileProblem::TooLarge { .. },
            },
        ) => Err(at(&format_args!(
            "{e}; more than this machine's memory can hold parsed: use a smaller plan"
        ))),
        Err(e) => Err(at(&e)),
    }
}

/// Warns, on stderr, about each stage that runs full backwards where the schedule placed split
/// ones (see [`Pipeline::fused_stages`]), naming its layers.
pub fn warn_fused<L: Layer>(
    pipeline: &Pipeline<L>,
    partition: &Partition,
    precision: pipetrain::Precision,
) {
    let fused = pipeline.fused_stages();
    if precision.casts() && !fused.is_empty() {
        // The cause is the precision, not the model: --backward split would change nothing.
        eprintln!(
            "warning: {} places split backwards, but under --precision {precision} every stage \
             runs full backwards (the split backward computes in fp32 only), with 1F1B's bubble; \
             train it without --precision {precision}, or use --schedule 1f1b",
            pipeline.schedule()
        );
        return;
    }
    for stage in fused {
        let layers = partition.range(stage);
        eprintln!(
            "warning: {} places split backwards, but {stage} (layers {layers:?}) has no layer \
             with a split backward (the MLP's dense layers have one): it runs full backwards, \
             with 1F1B's bubble there; use --backward split with a model of dense layers, or \
             --schedule 1f1b",
            pipeline.schedule()
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;
    use pipetrain::ScheduleKind;

    use super::ScheduleArg;

    #[test]
    fn every_kind_is_offered_under_its_library_name_and_aliases() {
        let kinds: Vec<ScheduleKind> = ScheduleArg::value_variants()
            .iter()
            .map(|&s| s.kind(2))
            .collect();
        let interleaved = ScheduleKind::Interleaved { virtual_stages: 2 };
        let looped_bfs = ScheduleKind::LoopedBfs { virtual_stages: 2 };
        let interleaved_zb = ScheduleKind::InterleavedZb { virtual_stages: 2 };
        let two_per_rank = [
            interleaved,
            ScheduleKind::ZbV,
            looped_bfs,
            interleaved_zb,
            ScheduleKind::DualPipeV,
            ScheduleKind::VMin,
            ScheduleKind::VHalf,
        ];
        assert_eq!(kinds, [&ScheduleKind::ALL[..], &two_per_rank].concat());
        for &arg in ScheduleArg::value_variants() {
            let value = arg.to_possible_value().unwrap();
            assert_eq!(value.get_name(), arg.kind(2).family());
            if arg.kind(2).virtual_stages() == 1 {
                assert_eq!(value.get_name(), arg.kind(2).to_string());
            }
            for name in value.get_name_and_aliases() {
                let parsed: ScheduleKind = name.parse().unwrap();
                assert_eq!(parsed, arg.kind(2), "{name}");
            }
        }
    }
}
