//! The schedules pipetrain can generate.

use std::fmt;
use std::str::FromStr;

use crate::action::Action;
use crate::error::{Result, ScheduleError};
use crate::id::StageId;
use crate::plan::Plan;
use crate::{
    dual_pipe_v, gpipe, interleaved, interleaved_zb, looped_bfs, one_f_one_b, v_half, v_min, zb_2p,
    zb_h1, zb_v,
};

/// A pipeline schedule: how micro-batches are ordered on each stage.
///
/// ```
/// use pipetrain_schedules::ScheduleKind;
/// let kind: ScheduleKind = "1f1b".parse().unwrap();
/// assert_eq!(kind, ScheduleKind::OneFOneB);
/// assert_eq!(kind.to_string(), "1f1b");
/// let plan = kind.plan(4, 8).unwrap();
/// assert_eq!(plan.stages(), 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ScheduleKind {
    /// GPipe fill-drain: all forwards, then all backwards. Peak stash m on every stage.
    GPipe,
    /// 1F1B (PipeDream-Flush): warm-up forwards, then alternate one forward and one backward.
    /// Same bubble as GPipe, peak stash ≤ p − s on stage s.
    #[default]
    OneFOneB,
    /// ZB-H1 (zero bubble, Qi et al. 2023): 1F1B with the backward split into `I` (input
    /// gradient, sent upstream at once) and `W` (weight gradient), the `W`s placed to fill
    /// 1F1B's bubbles. A third of 1F1B's bubble when F, I and W cost the same, at 1F1B's peak
    /// stash (the most any stage holds, `min(p, m)`).
    ZbH1,
    /// Interleaved 1F1B (Megatron-LM): each of the p ranks holds `virtual_stages` (v ≥ 2)
    /// chunks of the model, chunk c on rank c mod p, so the plan has p·v stages; the bubble is
    /// v times smaller than 1F1B's, (p − 1)/(v·m + p − 1). m must be a multiple of p.
    Interleaved {
        /// Chunks per rank (v).
        virtual_stages: usize,
    },
    /// ZB-V (zero bubble in a V): two chunks per rank, rank r holding stages r and 2p − 1 − r
    /// (the first and the last on rank 0), the backward split as in ZB-H1, the order built by
    /// a greedy list scheduler under 1F1B's activation memory; about zero bubble when F, I and
    /// W cost the same.
    ZbV,
    /// Looped BFS (breadth-first, Lamy-Poirier 2022; torch's `ScheduleLoopedBFS`): chunks placed
    /// as [`ScheduleKind::Interleaved`]'s, each rank running every micro-batch through one chunk
    /// before the next (GPipe looped v times around the ranks). Interleaved's bubble from m ≥ p
    /// on, at GPipe's memory; any m.
    LoopedBfs {
        /// Chunks per rank (v).
        virtual_stages: usize,
    },
    /// Interleaved zero bubble (ZB-H1 over interleaved chunks; torch's
    /// `ScheduleInterleavedZeroBubble`): [`ScheduleKind::Interleaved`]'s chunks and order with
    /// the backward split as in [`ScheduleKind::ZbH1`], rank r holding back its first r `W`s.
    /// (p − 1)/(3·v·m + p − 1) of bubble when F, I and W cost the same per chunk. m must be a
    /// multiple of p.
    InterleavedZb {
        /// Chunks per rank (v).
        virtual_stages: usize,
    },
    /// DualPipeV (DeepSeek's DualPipe in a V; torch's `ScheduleDualPipeV`): two chunks per rank
    /// placed as [`ScheduleKind::ZbV`]'s, the steady phase pairing a forward of one chunk with
    /// a backward of the other, split backwards in the warm-up and cool-down. Each pair is one
    /// [`ActionKind::Overlap`](crate::ActionKind::Overlap) (`0F3+3B1`), which pipetrain's
    /// workers run in sequence. m ≥ 2p.
    DualPipeV,
    /// V-Min (Qi et al., *Pipeline Parallelism with Controllable Memory*, 2024): two chunks per
    /// rank placed as [`ScheduleKind::ZbV`]'s, the backward split, the order a V-shape building
    /// block of least lifespan repeated once per micro-batch. About a third of 1F1B's
    /// activation memory (⌊(p + 4)/3⌋ micro-batches' in the paper), a bubble near 1F1B's.
    VMin,
    /// V-Half (the same paper): [`ScheduleKind::VMin`]'s placement and split, a building block
    /// with half of 1F1B's activation memory (⌊(p + 2)/2⌋ micro-batches' in the paper) and
    /// about half of 1F1B's bubble.
    VHalf,
    /// ZB-2P (zero bubble, Qi et al. 2023): one stage per rank, the backward split, each rank
    /// holding up to 2p micro-batches' activations (twice 1F1B's first stage) so that the
    /// warm-up runs forwards back to back and the drain is filled with `W`s.
    Zb2p,
}

impl ScheduleKind {
    /// Every schedule kind with one stage per rank (all but [`ScheduleKind::Interleaved`],
    /// [`ScheduleKind::ZbV`], [`ScheduleKind::LoopedBfs`], [`ScheduleKind::InterleavedZb`],
    /// [`ScheduleKind::DualPipeV`], [`ScheduleKind::VMin`] and [`ScheduleKind::VHalf`]).
    pub const ALL: [ScheduleKind; 4] = [
        ScheduleKind::GPipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::ZbH1,
        ScheduleKind::Zb2p,
    ];

    const EXPECTED: &'static str = "gpipe, 1f1b, zb-h1, zb-v, interleaved (v = 2), interleaved-v<v>, looped-bfs (v = 2), \
         looped-bfs-v<v>, interleaved-zb (v = 2), interleaved-zb-v<v>, dualpipev, v-min, v-half, zb-2p";

    /// Model stages per rank: v for [`ScheduleKind::Interleaved`], [`ScheduleKind::LoopedBfs`]
    /// and [`ScheduleKind::InterleavedZb`], 2 for [`ScheduleKind::ZbV`],
    /// [`ScheduleKind::DualPipeV`], [`ScheduleKind::VMin`] and [`ScheduleKind::VHalf`], else 1.
    pub const fn virtual_stages(self) -> usize {
        match self {
            ScheduleKind::Interleaved { virtual_stages }
            | ScheduleKind::LoopedBfs { virtual_stages }
            | ScheduleKind::InterleavedZb { virtual_stages } => virtual_stages,
            ScheduleKind::ZbV
            | ScheduleKind::DualPipeV
            | ScheduleKind::VMin
            | ScheduleKind::VHalf => 2,
            _ => 1,
        }
    }

    /// Whether the plan places split backwards (`I` and `W`) itself, rather than full
    /// backwards (`B`) that an engine may split in place ([`Plan::split_backward`]).
    pub const fn splits_backward(self) -> bool {
        matches!(
            self,
            ScheduleKind::ZbH1
                | ScheduleKind::ZbV
                | ScheduleKind::InterleavedZb { .. }
                | ScheduleKind::DualPipeV
                | ScheduleKind::VMin
                | ScheduleKind::VHalf
                | ScheduleKind::Zb2p
        )
    }

    /// The compute-only plan (forwards and backwards, no communication) of this schedule for
    /// `stages` ranks (one stage each, but [`ScheduleKind::Interleaved`]'s v and
    /// [`ScheduleKind::ZbV`]'s 2) and
    /// `micro_batches` micro-batches. Any p ≥ 1, m ≥ 1 works, m < p included, except that
    /// interleaved, interleaved zero bubble and looped BFS need v ≥ 2, and the interleaved two
    /// m a multiple of p. Run [`crate::lower`] on it to get a plan
    /// a worker can interpret.
    pub fn plan(self, stages: usize, micro_batches: usize) -> Result<Plan> {
        if stages == 0 {
            return Err(ScheduleError::ZeroStages);
        }
        if micro_batches == 0 {
            return Err(ScheduleError::ZeroMicroBatches);
        }
        if let ScheduleKind::Interleaved { virtual_stages }
        | ScheduleKind::LoopedBfs { virtual_stages }
        | ScheduleKind::InterleavedZb { virtual_stages } = self
        {
            if virtual_stages < 2 {
                return Err(ScheduleError::VirtualStages {
                    schedule: self.family(),
                    virtual_stages,
                });
            }
        }
        if self == ScheduleKind::DualPipeV && micro_batches < 2 * stages {
            return Err(ScheduleError::DualPipeVMicroBatches {
                micro_batches,
                stages,
            });
        }
        if let ScheduleKind::Interleaved { .. } | ScheduleKind::InterleavedZb { .. } = self {
            if micro_batches % stages != 0 {
                return Err(ScheduleError::InterleavedMicroBatches {
                    micro_batches,
                    stages,
                });
            }
        }
        let (p, m) = (stages, micro_batches);
        // One stage per rank: a program per rank from the schedule's generator.
        let each = |program: fn(StageId, usize, usize) -> Vec<Action>| {
            Plan::new(p, m, (0..p).map(|r| program(r.into(), p, m)).collect())
        };
        // v chunks per rank, stage c on rank c mod p: a program per rank.
        let looped = |program: fn(usize, usize, usize, usize) -> Vec<Action>, v: usize| {
            let programs = (0..p).map(|r| program(r, p, v, m)).collect();
            Plan::with_placement(m, programs, interleaved::placement(p, v))
        };
        Ok(match self {
            ScheduleKind::GPipe => each(|s, _, m| gpipe::program(s, m)),
            ScheduleKind::OneFOneB => each(one_f_one_b::program),
            ScheduleKind::ZbH1 => each(zb_h1::program),
            ScheduleKind::Interleaved { virtual_stages: v } => looped(interleaved::program, v),
            ScheduleKind::ZbV => zb_v::plan(p, m),
            ScheduleKind::DualPipeV => {
                let programs = (0..p).map(|r| dual_pipe_v::program(r, p, m)).collect();
                Plan::with_placement(m, programs, zb_v::placement(p))
            }
            ScheduleKind::LoopedBfs { virtual_stages: v } => looped(looped_bfs::program, v),
            ScheduleKind::InterleavedZb { virtual_stages: v } => looped(interleaved_zb::program, v),
            ScheduleKind::VMin => v_min::plan(p, m),
            ScheduleKind::VHalf => v_half::plan(p, m),
            ScheduleKind::Zb2p => zb_2p::plan(p, m),
        })
    }

    /// The name without the chunks per rank (`interleaved`, `looped-bfs`, …): what
    /// `--schedule` takes.
    pub fn family(self) -> &'static str {
        match self {
            ScheduleKind::GPipe => "gpipe",
            ScheduleKind::OneFOneB => "1f1b",
            ScheduleKind::ZbH1 => "zb-h1",
            ScheduleKind::ZbV => "zb-v",
            ScheduleKind::Interleaved { .. } => "interleaved",
            ScheduleKind::LoopedBfs { .. } => "looped-bfs",
            ScheduleKind::InterleavedZb { .. } => "interleaved-zb",
            ScheduleKind::DualPipeV => "dualpipev",
            ScheduleKind::VMin => "v-min",
            ScheduleKind::VHalf => "v-half",
            ScheduleKind::Zb2p => "zb-2p",
        }
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleKind::Interleaved { virtual_stages }
            | ScheduleKind::LoopedBfs { virtual_stages }
            | ScheduleKind::InterleavedZb { virtual_stages } => {
                write!(f, "{}-v{virtual_stages}", self.family())
            }
            _ => f.write_str(self.family()),
        }
    }
}

impl FromStr for ScheduleKind {
    type Err = ScheduleError;

    fn from_str(name: &str) -> Result<Self> {
        match name.to_ascii_lowercase().as_str() {
            "gpipe" | "fill-drain" => Ok(ScheduleKind::GPipe),
            "1f1b" | "one-f-one-b" | "pipedream-flush" => Ok(ScheduleKind::OneFOneB),
            "zb-h1" | "zbh1" | "zero-bubble-h1" => Ok(ScheduleKind::ZbH1),
            "zb-v" | "zbv" | "zero-bubble-v" => Ok(ScheduleKind::ZbV),
            "interleaved" | "interleaved-1f1b" => {
                Ok(ScheduleKind::Interleaved { virtual_stages: 2 })
            }
            "looped-bfs" | "loopedbfs" | "breadth-first" => {
                Ok(ScheduleKind::LoopedBfs { virtual_stages: 2 })
            }
            "dualpipev" | "dual-pipe-v" | "dualpipe-v" => Ok(ScheduleKind::DualPipeV),
            "v-min" | "vmin" | "zbv-min" => Ok(ScheduleKind::VMin),
            "v-half" | "vhalf" | "zbv-half" => Ok(ScheduleKind::VHalf),
            "zb-2p" | "zb2p" | "zero-bubble-2p" => Ok(ScheduleKind::Zb2p),
            "interleaved-zb" | "interleaved-zero-bubble" | "zb-interleaved" => {
                Ok(ScheduleKind::InterleavedZb { virtual_stages: 2 })
            }
            other => {
                let v = |prefix| other.strip_prefix(prefix).and_then(|v| v.parse().ok());
                if let Some(virtual_stages) = v("interleaved-v") {
                    Ok(ScheduleKind::Interleaved { virtual_stages })
                } else if let Some(virtual_stages) = v("looped-bfs-v") {
                    Ok(ScheduleKind::LoopedBfs { virtual_stages })
                } else if let Some(virtual_stages) = v("interleaved-zb-v") {
                    Ok(ScheduleKind::InterleavedZb { virtual_stages })
                } else {
                    Err(ScheduleError::UnknownSchedule {
                        name: name.to_string(),
                        expected: Self::EXPECTED,
                    })
                }
            }
        }
    }
}
