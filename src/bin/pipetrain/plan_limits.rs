//! How large a plan `pipetrain plan` builds (the library's
//! [`pipetrain::commands::plan::limits`]): a refused plan's message names the flags that size
//! it (`--virtual-stages 100000`, not the default `--stages 4 --micro-batches 8`).

use pipetrain::commands::plan::limits::{Given, Output, Shape};

use crate::failure::{Failure, explain};
use crate::plan::{Format, PlanArgs};

/// Refuses a plan of `stages` × `micro_batches` (under `args`' schedule and format) whose
/// report this machine cannot hold, or whose simulation would take minutes
/// ([`check`](pipetrain::commands::plan::limits::check)).
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
    let output = Output {
        compare: args.compare,
        csv: args.format == Format::Csv,
    };
    let given = Given {
        stages: args.stages.is_some(),
        micro_batches: args.micro_batches.is_some(),
        plan_file: args.plan.is_some(),
    };
    pipetrain::commands::plan::limits::check(shape, output, given)
        .map_err(|e| Failure::usage(format!("{}{}", given_flags(args, shape), explain(&e))))
}

/// The flags the user gave that size the plan, as a prefix of the facts: `--virtual-stages
/// 100000: `, or nothing when every size is a default (or a plan file's).
fn given_flags(args: &PlanArgs, shape: Shape) -> String {
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
