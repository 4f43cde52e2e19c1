//! How large a plan `pipetrain plan` builds: one whose report this machine cannot hold, or
//! whose simulation would take minutes, is refused before it is built, naming the flags that
//! size it (`--virtual-stages 100000`, not the default `--stages 4 --micro-batches 8`) and
//! remedies computed from them: the largest count of each given flag that fits.

use pipetrain::remedy::{Remedy, Setting, Value};

use crate::failure::Failure;
use crate::plan::{Format, PlanArgs};
use crate::style::Flags;

/// Memory per cell (stage × micro-batch) of the plan, rounded up from the peak RSS of the
/// debug binary (`/usr/bin/time`, 1F1B): `--format text` and `json` took 145 MB and 233 MB at
/// 100 and 200 stages × 1000 micro-batches (about 1.2 KB a cell over the 26 MB of an empty
/// plan; 12 GB at 1000 × 10000 in the issue), `--format csv` 46 MB and 70 MB at 200 and 400 × 1000
/// (about 0.12 KB a cell).
const REPORT_BYTES_PER_CELL: u128 = 1400;
/// See [`REPORT_BYTES_PER_CELL`].
const CSV_BYTES_PER_CELL: u128 = 130;
/// Most cells (stages × micro-batches × chunks, over every plan built) a text or JSON report
/// covers, whatever the memory: its grid has a line per stage and a column per time step.
const MAX_REPORT_CELLS: u128 = 1 << 20;

/// Most stage-steps, s × (v·m + s) with s = p·v model stages, of a plan: the simulator moves
/// every stage once per wave, and a pipeline of s stages takes about v·m + s waves, so its
/// time grows with the square of the stages (`plan --stages 10000 --micro-batches 1` took 28 s
/// in the debug binary, and `--stages 100000` did not end; interleaved's chunks count as
/// stages: `--virtual-stages 1024` at 4 × 8 took 4.8 s, and 32768 did not end in 13 minutes).
/// 2^22 is 2048 stages of one micro-batch, or 1000 × 1000.
const MAX_STAGE_STEPS: u128 = 1 << 22;

/// A plan's shape: stages, micro-batches, chunks per stage.
#[derive(Clone, Copy)]
struct Shape {
    stages: usize,
    micro_batches: usize,
    chunks: usize,
}

/// Why a plan of some shape is refused, as facts.
enum TooLarge {
    /// Its report (or CSV) needs more memory than there is, or more cells than a report is for.
    Memory {
        cells: u128,
        needed: u128,
        why: String,
    },
    /// Its simulation would take minutes.
    Simulation { steps: u128 },
}

/// Refuses a plan of `stages` × `micro_batches` (under `args`' schedule and format) whose
/// report this machine cannot hold (see [`crate::footprint`]: `plan --stages 1000
/// --micro-batches 10000` once needed over 12 GB), or whose simulation would take minutes
/// ([`MAX_STAGE_STEPS`]).
///
/// # Errors
/// Usage: the flags that size the plan, the estimate, what is available, and remedies.
pub fn check(args: &PlanArgs, stages: usize, micro_batches: usize) -> Result<(), Failure> {
    let chunks = args
        .schedule
        .kind(args.virtual_stages())
        .virtual_stages()
        .max(1);
    let shape = Shape {
        stages,
        micro_batches,
        chunks,
    };
    let Some(refused) = too_large(args, shape) else {
        return Ok(());
    };
    let flags = given(args, shape);
    let facts = match &refused {
        TooLarge::Memory { cells, needed, why } => format!(
            "a plan of {} = {cells} cells needs about {} to build and print, {why}",
            describe(shape),
            crate::footprint::gib(*needed)
        ),
        TooLarge::Simulation { steps } => format!(
            "the simulation of a plan of {} would take about {steps} stage-steps (model \
             stages × (chunks × micro-batches + model stages)), above the {MAX_STAGE_STEPS} \
             that `plan` runs in seconds",
            describe(shape)
        ),
    };
    let remedy = remedy(args, shape, &refused);
    Err(Failure::usage(format!(
        "{flags}{facts}; {}",
        remedy.render(&Flags)
    )))
}

/// `4 stages × 8 micro-batches × 100000 chunks`, the chunks left out at one per stage.
fn describe(shape: Shape) -> String {
    let chunks = match shape.chunks {
        1 => String::new(),
        v => format!(" × {v} chunks"),
    };
    format!(
        "{} stages × {} micro-batches{chunks}",
        shape.stages, shape.micro_batches
    )
}

/// The flags the user gave that size the plan, as a prefix of the facts: `--virtual-stages
/// 100000: `, or nothing when every size is a default (or a plan file's).
fn given(args: &PlanArgs, shape: Shape) -> String {
    let mut flags = Vec::new();
    if let Some(p) = args.stages {
        flags.push(format!("--stages {p}"));
    }
    if let Some(m) = args.micro_batches {
        flags.push(format!("--micro-batches {m}"));
    }
    if shape.chunks > 2 {
        flags.push(format!("--virtual-stages {}", shape.chunks));
    }
    if flags.is_empty() {
        String::new()
    } else {
        format!("{}: ", flags.join(" "))
    }
}

/// Why a plan of `shape` is refused, if it is.
fn too_large(args: &PlanArgs, shape: Shape) -> Option<TooLarge> {
    let Shape {
        stages,
        micro_batches,
        chunks,
    } = shape;
    let cells = stages as u128 * micro_batches as u128 * chunks as u128;
    // --compare builds every schedule.
    let plans = if args.compare { 9 } else { 1 };
    let per_cell = match args.format {
        Format::Csv if !args.compare => CSV_BYTES_PER_CELL,
        _ => REPORT_BYTES_PER_CELL,
    };
    let needed = cells * per_cell * plans;
    let why = match crate::footprint::exceeds(needed) {
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

/// For each size the user gave (`--virtual-stages` above its default 2, `--stages`,
/// `--micro-batches`; the stages and micro-batches when none was), the largest value below it
/// that fits; and the plan alone in CSV, where a report was too large. A plan file's shape is
/// its own: a smaller plan, or CSV.
fn remedy(args: &PlanArgs, shape: Shape, refused: &TooLarge) -> Remedy {
    let fits = |s: Shape| too_large(args, s).is_none();
    let mut fixes = Vec::new();
    if args.plan.is_some() {
        fixes.push(Remedy::sentence("give a smaller plan"));
    } else {
        if shape.chunks > 2 {
            let fewer = largest(2, shape.chunks, |chunks| fits(Shape { chunks, ..shape }));
            fixes.extend(fewer.map(|v| Remedy::set(Setting::VirtualStages, Value::Count(v))));
        }
        let defaults = fixes.is_empty() && args.stages.is_none() && args.micro_batches.is_none();
        if args.stages.is_some() || defaults {
            let fewer = largest(1, shape.stages, |stages| fits(Shape { stages, ..shape }));
            fixes.extend(fewer.map(|p| Remedy::set(Setting::Stages, Value::Count(p))));
        }
        if args.micro_batches.is_some() || defaults {
            let fewer = largest(1, shape.micro_batches, |micro_batches| {
                fits(Shape {
                    micro_batches,
                    ..shape
                })
            });
            fixes.extend(fewer.map(|m| Remedy::set(Setting::MicroBatches, Value::Count(m))));
        }
    }
    if let (TooLarge::Memory { cells, .. }, false) = (refused, args.format == Format::Csv) {
        fixes.push(Remedy::sentence(format!(
            "use --format csv for the plan alone (about {})",
            crate::footprint::gib(cells * CSV_BYTES_PER_CELL)
        )));
    }
    Remedy::one_of(fixes)
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
