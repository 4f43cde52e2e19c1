//! Golden renders for small shapes, checked in under tests/golden/. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p pipetrain-schedules --test golden` and review the diff.

use std::path::PathBuf;

use pipetrain_schedules::{Costs, Lowering, ScheduleKind, lower, render, simulate};

fn check(name: &str, actual: &str) {
    // The run-time value: a test binary reused from another checkout sharing the target
    // directory would carry that checkout's compile-time path.
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let path = root.join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(actual, expected, "{name} differs from the golden file");
}

#[test]
fn golden_renders() {
    let two_per_rank = [
        ScheduleKind::Interleaved { virtual_stages: 2 },
        ScheduleKind::ZbV,
    ];
    for kind in ScheduleKind::ALL.into_iter().chain(two_per_rank) {
        for (p, m) in [(2, 2), (3, 4), (4, 2), (4, 8)] {
            // Interleaved needs whole rounds of p micro-batches.
            let Ok(compute) = kind.plan(p, m) else {
                continue;
            };
            let unit = simulate(&compute, &Costs::uniform(p, 1.0, 1.0)).unwrap();
            let paper = simulate(&compute, &Costs::uniform(p, 1.0, 2.0)).unwrap();
            let text = format!(
                "# {kind}, {p} stages, {m} micro-batches\n\n## program (compute)\n{}\n\
                 ## timeline, forward = backward = 1\n{}\n## timeline, backward = 2 x forward\n{}\n\
                 ## lowered plan\n{}",
                render::programs(&compute, None),
                render::timeline(&unit),
                render::timeline(&paper),
                lower(&compute, Lowering::default()),
            );
            check(&format!("{kind}-p{p}-m{m}.txt"), &text);
        }
    }
}
