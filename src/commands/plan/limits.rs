//! How large a plan `pipetrain plan` builds: one whose report this machine cannot hold, or
//! whose simulation would take minutes, is refused before it is built ([`too_large`]), with
//! remedies computed from the sizes given ([`remedy`]): the largest count of each that fits.
//! The binary names the flags that size the plan.

use crate::remedy::{Remedy, Setting, Value};
use crate::trainer::footprint::{exceeds, gib};
use crate::{CommandError, Error};

/// Memory per cell (stage × micro-batch) of the plan, rounded up from the peak RSS of the
/// debug binary (`/usr/bin/time`, 1F1B): `--format text` and `json` took 145 MB and 233 MB at
/// 100 and 200 stages × 1000 micro-batches (about 1.2 KB a cell over the 26 MB of an empty
/// plan; 12 GB at 1000 × 10000 in the issue), `--format csv` 46 MB and 70 MB at 200 and 400 × 1000
/// (about 0.12 KB a cell).
pub const REPORT_BYTES_PER_CELL: u128 = 1400;
/// See [`REPORT_BYTES_PER_CELL`].
pub const CSV_BYTES_PER_CELL: u128 = 130;
/// Most cells (stages × micro-batches × chunks, over every plan built) a text or JSON report
/// covers, whatever the memory: its grid has a line per stage and a column per time step.
pub const MAX_REPORT_CELLS: u128 = 1 << 20;

/// Most stage-steps, s × (v·m + s) with s = p·v model stages, of a plan: the simulator moves
/// every stage once per wave, and a pipeline of s stages takes about v·m + s waves, so its
/// time grows with the square of the stages (`plan --stages 10000 --micro-batches 1` took 28 s
/// in the debug binary, and `--stages 100000` did not end; interleaved's chunks count as
/// stages: `--virtual-stages 1024` at 4 × 8 took 4.8 s, and 32768 did not end in 13 minutes).
/// 2^22 is 2048 stages of one micro-batch, or 1000 × 1000.
pub const MAX_STAGE_STEPS: u128 = 1 << 22;

/// A plan's shape: stages, micro-batches, chunks per stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Pipeline stages (workers per replica).
    pub stages: usize,
    /// Micro-batches per step.
    pub micro_batches: usize,
    /// Chunks per stage (1 but for the multi-chunk schedules).
    pub chunks: usize,
}

impl Shape {
    /// `4 stages × 8 micro-batches × 100000 chunks`, the chunks left out at one per stage.
    pub fn describe(self) -> String {
        let chunks = match self.chunks {
            1 => String::new(),
            v => format!(" × {v} chunks"),
        };
        format!(
            "{} stages × {} micro-batches{chunks}",
            self.stages, self.micro_batches
        )
    }
}

/// What is built and printed for a plan: every schedule (`--compare`) or one, and as the plan
/// alone in CSV or as a report.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    /// Every schedule's plan is built.
    pub compare: bool,
    /// The plan alone, in CSV (`--format csv`).
    pub csv: bool,
}

/// The sizes given (not defaults), for the remedies: each one given is lowered.
#[derive(Clone, Copy, Debug)]
pub struct Given {
    /// Stages were given.
    pub stages: bool,
    /// Micro-batches were given.
    pub micro_batches: bool,
    /// The plan came from a file: its shape is its own.
    pub plan_file: bool,
}

/// Why a plan of some shape is refused, as facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TooLarge {
    /// Its report (or CSV) needs more memory than there is, or more cells than a report is for.
    Memory {
        /// Cells over every plan built.
        cells: u128,
        /// The bytes it needs.
        needed: u128,
        /// Why that is too much.
        why: String,
    },
    /// Its simulation would take minutes.
    Simulation {
        /// Its stage-steps ([`MAX_STAGE_STEPS`]).
        steps: u128,
    },
}

impl TooLarge {
    /// The facts about a plan of `shape` refused for this reason.
    pub fn facts(&self, shape: Shape) -> String {
        match self {
            TooLarge::Memory { cells, needed, why } => format!(
                "a plan of {} = {cells} cells needs about {} to build and print, {why}",
                shape.describe(),
                gib(*needed)
            ),
            TooLarge::Simulation { steps } => format!(
                "the simulation of a plan of {} would take about {steps} stage-steps (model \
                 stages × (chunks × micro-batches + model stages)), above the {MAX_STAGE_STEPS} \
                 that `plan` runs in seconds",
                shape.describe()
            ),
        }
    }
}

/// Why a plan of `shape` printed as `output` is refused, if it is: a report this machine
/// cannot hold (`plan --stages 1000 --micro-batches 10000` once needed over 12 GB), or a
/// simulation that would take minutes ([`MAX_STAGE_STEPS`]).
pub fn too_large(shape: Shape, output: Output) -> Option<TooLarge> {
    let Shape {
        stages,
        micro_batches,
        chunks,
    } = shape;
    let cells = stages as u128 * micro_batches as u128 * chunks as u128;
    // --compare builds every schedule.
    let plans = if output.compare { 9 } else { 1 };
    let per_cell = match output.csv && !output.compare {
        true => CSV_BYTES_PER_CELL,
        false => REPORT_BYTES_PER_CELL,
    };
    let needed = cells * per_cell * plans;
    let why = match exceeds(needed) {
        Some(why) => why,
        // A grid no one can read, a JSON report of gigabytes: bounded whatever the memory.
        None if per_cell == REPORT_BYTES_PER_CELL && cells * plans > MAX_REPORT_CELLS => format!(
            "more than a report is for (at most {MAX_REPORT_CELLS} cells across the plans \
             built)"
        ),
        // The plan alone is not simulated.
        None if per_cell == CSV_BYTES_PER_CELL => return None,
        None => {
            let s = stages as u128 * chunks as u128;
            let vm = micro_batches as u128 * chunks as u128;
            let steps = s * (vm + s);
            return (steps > MAX_STAGE_STEPS).then_some(TooLarge::Simulation { steps });
        }
    };
    Some(TooLarge::Memory { cells, needed, why })
}

/// For each size `given` (chunks above the default 2, stages, micro-batches; the stages and
/// micro-batches when none was), the largest value below it that fits; and the plan alone in
/// CSV, where a report was too large. A plan file's shape is its own: a smaller plan, or CSV.
pub fn remedy(shape: Shape, output: Output, given: Given, refused: &TooLarge) -> Remedy {
    let fits = |s: Shape| too_large(s, output).is_none();
    let mut fixes = Vec::new();
    if given.plan_file {
        fixes.push(Remedy::sentence("give a smaller plan"));
    } else {
        if shape.chunks > 2 {
            let fewer = largest(2, shape.chunks, |chunks| fits(Shape { chunks, ..shape }));
            fixes.extend(fewer.map(|v| Remedy::set(Setting::VirtualStages, Value::Count(v))));
        }
        let defaults = fixes.is_empty() && !given.stages && !given.micro_batches;
        if given.stages || defaults {
            let fewer = largest(1, shape.stages, |stages| fits(Shape { stages, ..shape }));
            fixes.extend(fewer.map(|p| Remedy::set(Setting::Stages, Value::Count(p))));
        }
        if given.micro_batches || defaults {
            let fewer = largest(1, shape.micro_batches, |micro_batches| {
                fits(Shape {
                    micro_batches,
                    ..shape
                })
            });
            fixes.extend(fewer.map(|m| Remedy::set(Setting::MicroBatches, Value::Count(m))));
        }
    }
    if let (TooLarge::Memory { cells, .. }, false) = (refused, output.csv) {
        fixes.push(Remedy::sentence(format!(
            "use --format csv for the plan alone (about {})",
            gib(cells * CSV_BYTES_PER_CELL)
        )));
    }
    Remedy::one_of(fixes)
}

/// Refuses a plan of `shape` printed as `output` that is [`too_large`], with the [`remedy`]
/// for the sizes `given`.
///
/// # Errors
/// [`CommandError::PlanTooLarge`] (usage): the shape, the estimate, what is available.
pub fn check(shape: Shape, output: Output, given: Given) -> Result<(), Error> {
    match too_large(shape, output) {
        None => Ok(()),
        Some(refused) => Err(Error::Command(CommandError::PlanTooLarge {
            fix: remedy(shape, output, given, &refused),
            shape,
            refused,
        })),
    }
}

/// The largest `n` in `low..high` for which `fits(n)` holds (`fits` holds up to some `n` and
/// not above), if `fits(low)` does.
fn largest(low: usize, high: usize, fits: impl Fn(usize) -> bool) -> Option<usize> {
    if low >= high || !fits(low) {
        return None;
    }
    // fits(lo) holds; fits(hi) does not (or hi is out of range).
    let (mut lo, mut hi) = (low, high);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_finds_the_boundary_or_nothing() {
        assert_eq!(largest(1, 100, |n| n <= 37), Some(37));
        assert_eq!(largest(1, 100, |n| n > 100), None);
        assert_eq!(largest(5, 5, |_| true), None);
    }

    #[test]
    fn a_huge_plan_is_refused_and_the_remedy_lowers_the_sizes_given() {
        let shape = Shape {
            stages: 100_000,
            micro_batches: 8,
            chunks: 1,
        };
        let output = Output {
            compare: false,
            csv: false,
        };
        let refused = too_large(shape, output).expect("refused");
        let given = Given {
            stages: true,
            micro_batches: false,
            plan_file: false,
        };
        let fix = remedy(shape, output, given, &refused);
        let stages = fix.render(&crate::remedy::Plain);
        assert!(stages.contains("stages = "), "{stages}");
        assert!(!stages.contains("micro"), "{stages}");
        let small = Shape {
            stages: 4,
            micro_batches: 8,
            chunks: 1,
        };
        assert_eq!(too_large(small, output), None);
    }
}
