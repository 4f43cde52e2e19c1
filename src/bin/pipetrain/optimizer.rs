//! `--optimizer` and its settings (`--momentum --dampening --nesterov --betas --eps
//! --weight-decay`), torch.optim's with PyTorch's defaults, and `--lr-schedule`.

use pipetrain::commands::plan::compact;
use pipetrain::{AdamOptions, Decay, LrSchedule, OptimizerConfig, SgdOptions};

use crate::args::{OptimizerKind, ScheduleKindArg, TrainArgs};
use crate::failure::Failure;

/// The optimizer of the flags and a description for the banner.
///
/// # Errors
/// Usage: a setting of another optimizer (`--betas` with SGD), or one torch.optim refuses.
pub fn of(args: &TrainArgs) -> Result<(OptimizerConfig, String), Failure> {
    let sgd = matches!(
        args.optimizer,
        OptimizerKind::Sgd | OptimizerKind::SgdMomentum
    );
    let foreign = match sgd {
        true => vec![
            ("--betas", args.betas.is_some()),
            ("--eps", args.eps.is_some()),
        ],
        // Each flag by its own name: `--dampening 0.1` with Adam named --momentum.
        false => vec![
            ("--momentum", args.momentum.is_some()),
            ("--dampening", args.dampening.is_some()),
            ("--nesterov", args.nesterov),
        ],
    };
    if let Some((flag, _)) = foreign.iter().find(|(_, given)| *given) {
        return Err(Failure::usage(format!(
            "{flag} is not a setting of --optimizer {}: drop it or pick an optimizer that has it \
             (--momentum, --dampening, --nesterov: sgd; --betas, --eps: adam, adamw)",
            name(args.optimizer)
        )));
    }
    let bad = |e: pipetrain::EngineError| Failure::usage(format!("--optimizer: {e}"));
    let (config, settings) = if sgd {
        let default = if matches!(args.optimizer, OptimizerKind::SgdMomentum) {
            0.9
        } else {
            0.0
        };
        let o = SgdOptions {
            momentum: args.momentum.unwrap_or(default),
            dampening: args.dampening.unwrap_or(0.0),
            nesterov: args.nesterov,
            weight_decay: args.weight_decay.unwrap_or(0.0),
        };
        let text = format!(
            "momentum {}, dampening {}, nesterov {}, weight decay {}",
            compact(o.momentum),
            compact(o.dampening),
            o.nesterov,
            compact(o.weight_decay)
        );
        (OptimizerConfig::torch_sgd(o).map_err(bad)?, text)
    } else {
        let defaults = match args.optimizer {
            OptimizerKind::Adamw => AdamOptions::adamw(),
            _ => AdamOptions::adam(),
        };
        let o = AdamOptions {
            betas: args.betas.unwrap_or(defaults.betas),
            eps: args.eps.unwrap_or(defaults.eps),
            weight_decay: args.weight_decay.unwrap_or(defaults.weight_decay),
        };
        let text = format!(
            "betas {},{}, eps {:e}, weight decay {}",
            compact(o.betas.0),
            compact(o.betas.1),
            o.eps,
            compact(o.weight_decay)
        );
        let config = match args.optimizer {
            OptimizerKind::Adamw => OptimizerConfig::torch_adamw(o),
            _ => OptimizerConfig::torch_adam(o),
        };
        (config.map_err(bad)?, text)
    };
    // `lr 1e308`, not 309 digits.
    let text = format!(
        "{} ({settings}) lr {}",
        name(args.optimizer),
        compact(args.lr())
    );
    Ok((config, text))
}

/// `--lr-schedule` with its settings, checked against `--lr` and `--steps`.
///
/// # Errors
/// Usage: a minimum above `--lr`, a warm-up as long as the run, a bad step decay.
pub fn schedule(args: &TrainArgs) -> Result<LrSchedule, Failure> {
    let (steps, min_lr) = (args.steps, args.min_lr);
    let decay = match args.lr_schedule {
        ScheduleKindArg::Constant => Decay::Constant,
        ScheduleKindArg::Cosine => Decay::Cosine { steps, min_lr },
        ScheduleKindArg::Linear => Decay::Linear { steps, min_lr },
        ScheduleKindArg::Step => Decay::Step {
            every: args.lr_step_size,
            gamma: args.lr_gamma,
        },
    };
    let schedule = LrSchedule {
        warmup: args.warmup_steps,
        decay,
    };
    schedule.check_run(args.lr(), args.steps).map_err(|e| {
        Failure::usage(format!(
            "--lr-schedule: {e} (--min-lr, --warmup-steps, --lr-step-size, --lr-gamma)"
        ))
    })?;
    Ok(schedule)
}

/// clap's parser for `--betas B1,B2` (torch.optim checks the range).
pub fn parse_betas(text: &str) -> Result<(f64, f64), String> {
    let parsed: Option<Vec<f64>> = text.split(',').map(|v| v.trim().parse().ok()).collect();
    match parsed.as_deref() {
        Some(&[b1, b2]) => Ok((b1, b2)),
        _ => Err(format!(
            "`{text}` is not two numbers B1,B2; PyTorch's are 0.9,0.999"
        )),
    }
}

fn name(kind: OptimizerKind) -> &'static str {
    match kind {
        OptimizerKind::Sgd => "sgd",
        OptimizerKind::SgdMomentum => "sgd-momentum",
        OptimizerKind::Adam => "adam",
        OptimizerKind::Adamw => "adamw",
    }
}
