//! A split the layers or the chunks per rank refuse, with remedies computed from the values
//! given: a stage count the layers hold at v chunks per rank (interleaved's v, zb-v's 2) that,
//! for interleaved, divides the micro-batches; a balance whose length splits into ranks of v
//! chunks. A remedy made here is one the builder accepts: it never offers the value given, and
//! where no count of stages fits it offers the schedule of one chunk per rank.

use crate::BuildError;
use pipetrain_partitioner::fit_balance;
use pipetrain_schedules::{Schedule, ScheduleKind};

use crate::error::Error;
use crate::remedy::{Remedy, Setting, Value};

/// What a split is checked against: the schedule (its chunks per rank), the model's layers and
/// the micro-batches per step.
pub(super) struct Shape<'a> {
    pub(super) schedule: &'a Schedule,
    pub(super) layers: usize,
    pub(super) micro_batches: usize,
}

fn count(setting: Setting, n: usize) -> Remedy {
    Remedy::set(setting, Value::Count(n))
}

impl Shape<'_> {
    /// Chunks per rank.
    fn v(&self) -> usize {
        self.schedule.virtual_stages()
    }

    /// `stages` ranks whose chunks outnumber the layers.
    pub(super) fn more_stages_than_layers(&self, stages: usize) -> Error {
        Error::Build(BuildError::MoreStagesThanLayers {
            stages,
            virtual_stages: self.v(),
            layers: self.layers,
            remedy: self.fewer_stages(stages),
        })
    }

    /// `stages` ranks and a balance of another length.
    pub(super) fn stages_and_balance(&self, stages: usize, balance: &[usize]) -> Error {
        let v = self.v();
        let fix = match balance.len() % v {
            0 => Some(count(Setting::Stages, balance.len() / v)),
            _ => self.chunked(balance).map(|fit| {
                Remedy::all_of([
                    count(Setting::Stages, fit.len() / v),
                    Remedy::set(Setting::Balance, Value::Counts(fit)),
                ])
            }),
        };
        // No multiple of v fits the layers: one chunk per rank, as many as the balance lists.
        let fix = fix.unwrap_or_else(|| {
            Remedy::all_of([
                self.one_chunk_schedule(),
                count(Setting::Stages, balance.len()),
            ])
        });
        Error::Build(BuildError::StagesAndBalance {
            stages,
            virtual_stages: v,
            balance: balance.to_vec(),
            remedy: Remedy::one_of([Remedy::sentence("give one of them"), fix]),
        })
    }

    /// A balance whose length is not a multiple of the chunks per rank.
    pub(super) fn uneven_balance(&self, balance: &[usize]) -> Error {
        let fit = self
            .chunked(balance)
            .map(|fit| Remedy::set(Setting::Balance, Value::Counts(fit)));
        let remedy = Remedy::one_of(fit.into_iter().chain([self.one_chunk_schedule()]));
        Error::Build(BuildError::UnevenBalance {
            balance: balance.to_vec(),
            virtual_stages: self.v(),
            schedule: self.schedule.clone(),
            remedy,
        })
    }

    /// The balance nearest `balance` whose length is a multiple of v (the next one down, or v
    /// itself), if the layers hold that many chunks.
    fn chunked(&self, balance: &[usize]) -> Option<Vec<usize>> {
        let v = self.v();
        let chunks = (balance.len() / v).max(1) * v;
        fit_balance(balance, chunks, self.layers)
    }

    /// Fewer ranks than `stages`: the most whose chunks the layers hold (dividing the
    /// micro-batches, under interleaved); under interleaved also fewer chunks per rank.
    fn fewer_stages(&self, stages: usize) -> Remedy {
        let (v, n, m) = (self.v(), self.layers, self.micro_batches);
        let Schedule::Kind(kind) = self.schedule else {
            return Remedy::sentence(format!("give a plan of at most {n} stages"));
        };
        let interleaved = matches!(kind, ScheduleKind::Interleaved { .. });
        let ranks = (1..=n / v).rev().find(|&r| !interleaved || m % r == 0);
        let chunks = n / stages;
        let fewer_chunks =
            (interleaved && chunks >= 2).then(|| count(Setting::VirtualStages, chunks));
        match ranks {
            Some(r) => Remedy::one_of(
                [Some(count(Setting::Stages, r)), fewer_chunks]
                    .into_iter()
                    .flatten(),
            ),
            None => Remedy::one_of(fewer_chunks.into_iter().chain([self.one_chunk(stages)])),
        }
    }

    /// The schedule of one chunk per rank nearest this one, with at most as many stages as
    /// layers.
    fn one_chunk(&self, stages: usize) -> Remedy {
        let schedule = self.one_chunk_schedule();
        if stages > self.layers {
            Remedy::all_of([schedule, count(Setting::Stages, self.layers)])
        } else {
            schedule
        }
    }

    /// The schedule of one chunk per rank nearest this one: zb-h1 for zb-v, v-min and v-half
    /// (whose backward it splits the same way), 1f1b for interleaved.
    fn one_chunk_schedule(&self) -> Remedy {
        let schedule = match self.schedule {
            Schedule::Kind(ScheduleKind::ZbV | ScheduleKind::VMin | ScheduleKind::VHalf) => "zb-h1",
            _ => "1f1b",
        };
        Remedy::set(Setting::Schedule, Value::mode(schedule))
    }
}
