//! What a run reports after its last step, as lines of text: each worker's measured bubble
//! next to the simulator's prediction, and (with replicas) the optimizer state each worker
//! holds.

use crate::remedy::{Setting, Style, Value};
use crate::{Layer, Pipeline, StepReport};

/// Measured vs simulated bubble, compute time and peak stash of every worker in `report`, a
/// header line first.
pub fn bubbles(report: &StepReport, replicas: usize) -> Vec<String> {
    let mut lines =
        vec!["bubble per worker (last step): measured vs simulated for this plan".to_string()];
    for s in &report.workers {
        let worker = if replicas > 1 {
            s.worker.to_string()
        } else {
            s.worker.stage.to_string()
        };
        // The split backward's deferred weight-gradient inputs, when there are any.
        let deferred = match s.peak_deferred_bytes {
            0 => String::new(),
            bytes => format!("  deferred W {}", human_bytes(bytes)),
        };
        // Activations, input gradients and skips sent to other stages.
        let sent = match s.sent_bytes {
            0 => String::new(),
            bytes => format!("  sent {}", human_bytes(bytes as usize)),
        };
        lines.push(format!(
            "  {worker}  measured {:>5.1}%  simulated {:>5.1}%  compute {:>8.2} ms  peak stash {}{sent}{deferred}",
            100.0 * s.bubble_fraction,
            100.0 * s.predicted_bubble_fraction,
            s.compute.as_secs_f64() * 1e3,
            s.peak_stash
        ));
    }
    lines
}

/// Optimizer-state bytes per worker of each stage, with and without ZeRO-1, a header line
/// first; without it, the setting that turns it on in `style`'s words.
pub fn optimizer_state<L: Layer>(pipeline: &Pipeline<L>, style: &dyn Style) -> Vec<String> {
    let mut lines = vec!["optimizer state per worker:".to_string()];
    let bytes = pipeline.optimizer_state_bytes();
    for stage in 0..pipeline.stages() {
        let of_stage: Vec<usize> = bytes
            .iter()
            .filter(|(w, _)| w.stage.index() == stage)
            .map(|(_, b)| *b)
            .collect();
        let total: usize = of_stage.iter().sum();
        let held = of_stage.iter().max().copied().unwrap_or(0);
        let level = pipeline.zero_level().level();
        lines.push(if pipeline.zero() {
            let unsharded = total; // the replicas' shares partition the stage's parameters
            format!(
                "  stage {stage}: {} per worker with ZeRO-{level}, {} without ({:.0}% saved)",
                human_bytes(held),
                human_bytes(unsharded),
                100.0 * (1.0 - held as f64 / unsharded.max(1) as f64)
            )
        } else {
            format!(
                "  stage {stage}: {} per worker (ZeRO-1, {}, shards it across the {} replicas)",
                human_bytes(held),
                style.set(Setting::Zero, &Value::Count(1)),
                pipeline.replicas()
            )
        });
    }
    lines.extend(sharded(pipeline));
    lines
}

/// Under ZeRO-2/3, per stage: the most gradient (and at level 3 parameter) bytes a worker
/// keeps between steps against the stage's whole, a header line first; nothing below level 2.
fn sharded<L: Layer>(pipeline: &Pipeline<L>) -> Vec<String> {
    let zero = pipeline.zero_level();
    if !zero.shards_gradients() {
        return Vec::new();
    }
    let held = pipeline.held_parameter_bytes();
    let mut lines = vec![match zero.shards_parameters() {
        true => "ZeRO-3 per worker: gradients reduced to the share it owns, parameters held \
                 between steps (whole from each stage's unshard to its reshard)"
            .to_string(),
        false => "ZeRO-2 per worker: gradients reduced to the share it owns".to_string(),
    }];
    for stage in 0..pipeline.stages() {
        let of_stage = held.iter().filter(|h| h.worker.stage.index() == stage);
        let (mut most_owned, mut most_held, mut whole) = (0, 0, 0);
        for h in of_stage {
            most_owned = most_owned.max(h.owned.unwrap_or(h.held));
            most_held = most_held.max(h.held);
            whole = whole.max(h.whole.unwrap_or(h.held));
        }
        let share = |b: u64| 100.0 * b as f64 / whole.max(1) as f64;
        let gradients = format!(
            "gradients {} of {} ({:.0}%)",
            human_bytes(most_owned as usize),
            human_bytes(whole as usize),
            share(most_owned)
        );
        lines.push(match zero.shards_parameters() {
            true => format!(
                "  stage {stage}: {gradients}, parameters {} of {} ({:.0}%)",
                human_bytes(most_held as usize),
                human_bytes(whole as usize),
                share(most_held)
            ),
            false => format!("  stage {stage}: {gradients}"),
        });
    }
    lines
}

/// `n` bytes in B / KiB / MiB / GiB.
fn human_bytes(n: usize) -> String {
    let mut value = n as f64;
    for unit in ["B", "KiB", "MiB"] {
        if value < 1024.0 {
            return format!("{value:.1} {unit}");
        }
        value /= 1024.0;
    }
    format!("{value:.2} GiB")
}
