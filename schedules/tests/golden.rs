//! Golden renders for small shapes, checked in under tests/golden/. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p pipetrain-schedules --test golden` and review the diff; under
//! `CI` the variable is refused (CI checks the files, it never rewrites them).
//!
//! Each file opens with a header of `> ` lines that says how it was produced (`> produced:`)
//! and how it was checked (`> checked:`); a regeneration keeps the header and rewrites what
//! follows it. Every run checks the two timelines and the lowered plan of every file against a
//! second implementation written here from the schedules' rules ([`second_timeline`],
//! [`second_lowering`]), and the GPipe and 1F1B programs against [`second_program`]: a golden
//! file is not trusted because it was once reviewed, but because two implementations agree.

mod replay;

/// `CI`, read as every test of the workspace reads it.
#[path = "../../tests/common/ci.rs"]
mod ci;

use std::path::PathBuf;

use pipetrain_schedules::{
    ActionKind, Costs, Lowering, Plan, ScheduleKind, lower, render, simulate,
};

/// A golden file's header and body: the `> ` lines that open it (with the blank line after
/// them), and the render that follows.
fn split_header(text: &str) -> (String, &str) {
    let mut header = String::new();
    let mut rest = text;
    while let Some(line) = rest.strip_prefix("> ") {
        let end = line.find('\n').map_or(line.len(), |i| i + 1);
        header.push_str("> ");
        header.push_str(&line[..end]);
        rest = &line[end..];
    }
    if !header.is_empty() {
        rest = rest.strip_prefix('\n').unwrap_or(rest);
        header.push('\n');
    }
    (header, rest)
}

/// What a header written by a regeneration says until someone checks the file.
const UNCHECKED: &str = "nobody yet: review the render, then say how it was checked";

/// Refuses `UPDATE_GOLDEN` under CI; `Ok(true)` when the files are to be rewritten.
fn updating(update: Option<String>, ci: Option<String>) -> Result<bool, String> {
    let ci = ci::ci_from(ci);
    match (update, ci) {
        (Some(u), Some(ci)) => Err(format!(
            "UPDATE_GOLDEN={u} under CI={ci}: CI checks the golden files and never rewrites \
             them; unset UPDATE_GOLDEN (regenerate on a workstation and commit the reviewed diff)"
        )),
        (update, _) => Ok(update.is_some()),
    }
}

fn check(name: &str, actual: &str) {
    // The run-time value: a test binary reused from another checkout sharing the target
    // directory would carry that checkout's compile-time path.
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let path = root.join("tests/golden").join(name);
    let update =
        updating(std::env::var("UPDATE_GOLDEN").ok(), ci::ci()).unwrap_or_else(|e| panic!("{e}"));
    if update {
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        let (header, _) = split_header(&old);
        let header = match header.is_empty() {
            true => format!(
                "> produced: `UPDATE_GOLDEN=1 cargo test -p pipetrain-schedules --test golden`\n\
                 > checked: {UNCHECKED}\n\n"
            ),
            false => header,
        };
        std::fs::write(&path, format!("{header}{actual}")).unwrap();
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    let (header, expected) = split_header(&text);
    for field in ["> produced: ", "> checked: "] {
        assert!(
            header
                .lines()
                .any(|l| l.starts_with(field) && l.len() > field.len()),
            "{name}: the header has no `{field}` line; say how the file was made and checked"
        );
    }
    assert!(
        !header.contains(UNCHECKED),
        "{name}: the header says it is unchecked; check the render and say how"
    );
    assert_eq!(actual, expected, "{name} differs from the golden file");
}

/// The cells of a grid row (`stage 0 | F0 .  B0`): each label, `.` for an idle cell.
fn cells(row: &str) -> Vec<String> {
    let (_, cells) = row.split_once('|').expect("a `|` after the row's name");
    cells.split_whitespace().map(str::to_string).collect()
}

/// The second timeline ([`replay::replay`]), as each rank's cells at the shortest action's
/// length, labelled as the renders label them (with the stage when a rank holds several).
fn second_timeline(plan: &Plan, forward: f64, backward: f64) -> Vec<Vec<String>> {
    let slots = replay::replay(plan, forward, backward);
    let free: Vec<f64> = slots
        .iter()
        .map(|row| row.last().map_or(0.0, |(_, end, _)| *end))
        .collect();
    let unit = slots
        .iter()
        .flatten()
        .map(|(s, e, _)| e - s)
        .fold(f64::INFINITY, f64::min);
    let makespan = free.iter().copied().fold(0.0, f64::max);
    let columns = (makespan / unit).round() as usize;
    let several = plan.ranks() < plan.stages();
    slots
        .iter()
        .map(|row| {
            let mut out = vec![".".to_string(); columns];
            for (start, end, a) in row {
                let label = match several {
                    true => a.to_string(),
                    false => a.to_string()[a.stage.index().to_string().len()..].to_string(),
                };
                let (from, to) = (
                    (start / unit).round() as usize,
                    (end / unit).round() as usize,
                );
                for cell in &mut out[from..to] {
                    *cell = label.clone();
                }
            }
            out
        })
        .collect()
}

/// The second lowering: before each forward past stage 0 its receive (`sRFmb`), after each
/// forward before the last stage its send (`sSFmb`); before each full or input backward before
/// the last stage its receive (`sRBmb`), after it past stage 0 its send (`sSBmb`); a W as it
/// is; then per stage of the rank, in stage order, its all-reduce and optimizer step. Each
/// rank's line as the renders print it (`rank: actions`).
fn second_lowering(plan: &Plan) -> Vec<String> {
    let last = plan.stages() - 1;
    plan.programs()
        .iter()
        .enumerate()
        .map(|(rank, program)| {
            let mut out = Vec::new();
            for a in program {
                // An overlap `aFi+bBj`: both halves' receives, the overlap, both halves' sends.
                let halves: Vec<(usize, u32, ActionKind)> = match a.backward {
                    Some((b, j)) => vec![
                        (
                            a.stage.index(),
                            a.micro_batch.expect("a micro-batch").0,
                            ActionKind::Forward,
                        ),
                        (b.index(), j.0, ActionKind::Backward),
                    ],
                    None => vec![(
                        a.stage.index(),
                        a.micro_batch.expect("a micro-batch").0,
                        a.kind,
                    )],
                };
                for &(s, mb, kind) in &halves {
                    match kind {
                        ActionKind::Forward if s > 0 => out.push(format!("{s}RF{mb}")),
                        ActionKind::Backward | ActionKind::BackwardInput if s < last => {
                            out.push(format!("{s}RB{mb}"))
                        }
                        _ => {}
                    }
                }
                out.push(a.to_string());
                for &(s, mb, kind) in &halves {
                    match kind {
                        ActionKind::Forward if s < last => out.push(format!("{s}SF{mb}")),
                        ActionKind::Backward | ActionKind::BackwardInput if s > 0 => {
                            out.push(format!("{s}SB{mb}"))
                        }
                        _ => {}
                    }
                }
            }
            let mut stages: Vec<usize> = program.iter().map(|a| a.stage.index()).collect();
            stages.sort_unstable();
            stages.dedup();
            for s in stages {
                out.push(format!("{s}AR"));
                out.push(format!("{s}OPT"));
            }
            format!("{rank}: {}", out.join(" "))
        })
        .collect()
}

/// The second program, for the schedules with one stage per worker whose rule fits in a line
/// (`None` for the others): GPipe runs every forward, then every backward, in micro-batch
/// order; 1F1B runs min(p − s − 1, m) warm-up forwards, then alternates one forward and one
/// backward while forwards remain, then the remaining backwards.
fn second_program(kind: ScheduleKind, p: usize, m: usize) -> Option<Vec<Vec<String>>> {
    let f = |s: usize, mb: usize| format!("{s}F{mb}");
    let b = |s: usize, mb: usize| format!("{s}B{mb}");
    let rows = (0..p).map(|s| match kind {
        ScheduleKind::GPipe => (0..m)
            .map(|mb| f(s, mb))
            .chain((0..m).map(|mb| b(s, mb)))
            .collect(),
        _ => {
            let warm = (p - s - 1).min(m);
            let mut row: Vec<String> = (0..warm).map(|mb| f(s, mb)).collect();
            for (i, mb) in (warm..m).enumerate() {
                row.push(f(s, mb));
                row.push(b(s, i));
            }
            row.extend((m - warm..m).map(|mb| b(s, mb)));
            row
        }
    });
    match kind {
        ScheduleKind::GPipe | ScheduleKind::OneFOneB => Some(rows.collect()),
        _ => None,
    }
}

/// Checks the render `text` of `compute` against the second implementations.
fn check_against_second(name: &str, kind: ScheduleKind, p: usize, m: usize, compute: &Plan) {
    for (title, backward) in [
        ("timeline, forward = backward = 1", 1.0),
        ("timeline, backward = 2 x forward", 2.0),
    ] {
        let expected = second_timeline(compute, 1.0, backward);
        let rendered: Vec<Vec<String>> = {
            let unit = simulate(compute, &Costs::uniform(p, 1.0, backward)).unwrap();
            let text = render::timeline(&unit);
            text.lines().map(cells).collect()
        };
        assert_eq!(
            rendered, expected,
            "{name}: `{title}` against the second timeline"
        );
    }
    let lowered = lower(compute, Lowering::default()).to_string();
    let lines: Vec<&str> = lowered.lines().collect();
    assert_eq!(lines, second_lowering(compute), "{name}: the lowered plan");
    if let Some(rows) = second_program(kind, p, m) {
        let programs: Vec<Vec<String>> = compute
            .programs()
            .iter()
            .map(|r| r.iter().map(ToString::to_string).collect())
            .collect();
        assert_eq!(
            programs, rows,
            "{name}: the program against the second program"
        );
    }
}

#[test]
fn golden_renders() {
    let two_per_rank = [
        ScheduleKind::Interleaved { virtual_stages: 2 },
        ScheduleKind::ZbV,
        ScheduleKind::LoopedBfs { virtual_stages: 2 },
        ScheduleKind::InterleavedZb { virtual_stages: 2 },
        ScheduleKind::DualPipeV,
        ScheduleKind::VMin,
        ScheduleKind::VHalf,
    ];
    for kind in ScheduleKind::ALL.into_iter().chain(two_per_rank) {
        for (p, m) in [(2, 2), (3, 4), (4, 2), (4, 8)] {
            // Interleaved needs whole rounds of p micro-batches.
            let Ok(compute) = kind.plan(p, m) else {
                continue;
            };
            let name = format!("{kind}-p{p}-m{m}.txt");
            check_against_second(&name, kind, p, m, &compute);
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
            check(&name, &text);
        }
    }
}

#[test]
fn update_golden_is_refused_under_ci() {
    let e = updating(Some("1".into()), Some("true".into())).unwrap_err();
    assert!(e.contains("UPDATE_GOLDEN=1 under CI=true"), "{e}");
    assert!(e.contains("unset UPDATE_GOLDEN"), "{e}");
    assert_eq!(updating(Some("1".into()), None), Ok(true));
    assert_eq!(updating(Some("1".into()), Some("false".into())), Ok(true));
    assert_eq!(updating(None, Some("true".into())), Ok(false));
}

#[test]
fn a_header_is_split_from_the_render() {
    let (header, body) = split_header("> produced: x\n> checked: y\n\n# gpipe\n");
    assert_eq!(header, "> produced: x\n> checked: y\n\n");
    assert_eq!(body, "# gpipe\n");
    assert_eq!(split_header("# gpipe\n"), (String::new(), "# gpipe\n"));
}
