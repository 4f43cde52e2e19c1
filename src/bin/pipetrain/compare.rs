//! `pipetrain plan --compare`: every schedule side by side for one shape and one set of costs
//! ([`pipetrain::commands::plan::compare`]).
//!
//! ```text
//! $ pipetrain plan --compare --stages 4 --micro-batches 8
//! compare: 4 stages, 8 micro-batches; costs per micro-batch and stage: forward 1, backward 2 (weight gradient 1), transfer 0
//!
//!       schedule  makespan   bubble  speed-up over 1f1b  peak stash per stage
//!          gpipe        33  27.27 %               1.00x               8 8 8 8
//!           1f1b        33  27.27 %               1.00x               4 3 2 1
//!          zb-h1        27  11.11 %               1.22x               4 4 4 4
//!           zb-v      25.5   5.88 %               1.29x               8 8 8 8
//! interleaved-v2      28.5  15.79 %               1.16x              11 9 7 5
//! ```

use crate::failure::Failure;
use crate::plan::{Format, PlanArgs};

/// The comparison as `args.format` asks (text, or JSON; CSV is one plan's and is refused).
///
/// # Errors
/// A shape or cost the schedules refuse (usage).
pub fn text_or_json(args: &PlanArgs) -> Result<String, Failure> {
    if args.format == Format::Csv {
        return Err(Failure::usage(
            "--compare with --format csv: CSV holds one plan; use --format text or json, or \
             drop --compare and give --schedule",
        ));
    }
    let costs = crate::plan::costs(args);
    let comparison = pipetrain::commands::plan::compare(
        args.stages(),
        args.micro_batches(),
        args.virtual_stages(),
        &costs,
    )
    .map_err(crate::plan::failure)?;
    match args.format {
        Format::Json => Ok(serde_json::to_string_pretty(&comparison)? + "\n"),
        _ => Ok(comparison.text()),
    }
}
