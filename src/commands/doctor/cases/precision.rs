//! The matmul precision: the device runs at the precision it started with, and refuses the
//! other one (nothing to refuse on the CPU).

use super::Scope;
use crate::MatmulPrecision;
use crate::commands::doctor::table::Table;

/// The matmul precision (issue 34): the GPU runs at the precision it started with, and refuses
/// the other one (nothing to refuse on the CPU).
pub(super) fn matmul_precision(t: &mut Table<'_>, scope: &Scope<'_>) {
    let device = scope.on(&scope.device);
    let running = crate::engine::device::matmul_precision(device.device);
    let other = match scope.precision {
        MatmulPrecision::Fp32 => MatmulPrecision::Tf32,
        MatmulPrecision::Tf32 => MatmulPrecision::Fp32,
    };
    let cpu = crate::engine::device::is_cpu(device.device);
    let refused = crate::engine::device::require_matmul_precision(device.device, other);
    let ok = match cpu {
        true => running == Some(MatmulPrecision::Fp32) && refused.is_ok(),
        false => {
            running == Some(scope.precision)
                && matches!(
                    refused,
                    Err(crate::EngineError::MatmulPrecisionFixed { running: r, .. })
                        if r == scope.precision
                )
        }
    };
    t.verdict(
        format!(
            "matmul precision: runs {}, {other} refused",
            scope.precision
        ),
        format!(
            "runs {}; {other}: {}",
            running.map_or("-".to_string(), |p| p.to_string()),
            match &refused {
                Ok(()) => "taken (no TF32 on a CPU)".to_string(),
                Err(e) => e.to_string().chars().take(60).collect(),
            }
        ),
        "as started",
        ok,
    );
}
