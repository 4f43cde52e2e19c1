//! Plans as files: every schedule's plan survives CSV and text, and a broken file is refused
//! naming the line and column that broke it.

use pipetrain_schedules::{PlanFile, ScheduleError, ScheduleKind, Violation};

#[test]
fn every_schedule_round_trips_through_csv_and_text() {
    let looped = (2..=3).flat_map(|v| {
        [
            ScheduleKind::Interleaved { virtual_stages: v },
            ScheduleKind::InterleavedZb { virtual_stages: v },
            ScheduleKind::LoopedBfs { virtual_stages: v },
        ]
    });
    let kinds = ScheduleKind::ALL.into_iter().chain(looped);
    let v = [
        ScheduleKind::DualPipeV,
        ScheduleKind::VMin,
        ScheduleKind::VHalf,
    ];
    for kind in kinds.chain(v) {
        for p in 1..=4 {
            for m in 1..=8 {
                let Ok(plan) = kind.plan(p, m) else {
                    // Whole rounds of p (interleaved), or two per stage (DualPipeV).
                    assert!(
                        kind.virtual_stages() > 1 && (m % p != 0 || m < 2 * p),
                        "{kind} p={p} m={m}"
                    );
                    continue;
                };
                let csv = PlanFile::parse(&PlanFile::csv(&plan)).unwrap();
                assert_eq!(csv.plan(), &plan, "{kind} p={p} m={m} csv");
                csv.check().unwrap();
                let text = PlanFile::parse(&plan.to_string()).unwrap();
                assert_eq!(text.plan(), &plan, "{kind} p={p} m={m} text");
            }
        }
    }
}

#[test]
fn comments_blank_lines_and_empty_cells_are_skipped() {
    let file =
        PlanFile::parse("# GPipe\n\n0F0, 0F1,,0B0,0B1\n  # stage 1\n1F0,1F1,1B0,1B1,\n").unwrap();
    assert_eq!(file.plan(), &ScheduleKind::GPipe.plan(2, 2).unwrap());
}

fn parse_error(text: &str) -> (usize, String) {
    match PlanFile::parse(text) {
        Err(ScheduleError::ParsePlan { line, reason }) => (line, reason),
        other => panic!("expected a parse error for {text:?}, got {other:?}"),
    }
}

#[test]
fn a_bad_action_names_its_line_and_column() {
    let (line, reason) = parse_error("0F0,0B0\n\n1F0,1Q0\n");
    assert_eq!(line, 3);
    assert!(
        reason.contains("column 2") && reason.contains("`1Q0`"),
        "{reason}"
    );
}

#[test]
fn communication_in_a_file_is_refused_with_the_reason() {
    let (line, reason) = parse_error("0F0,0SF0,0B0\n");
    assert_eq!(line, 1);
    assert!(
        reason.contains("column 2") && reason.contains("compute actions only"),
        "{reason}"
    );
}

#[test]
fn text_rows_must_come_in_stage_order_and_a_file_needs_one() {
    let (line, reason) = parse_error("1: 1F0 1B0\n");
    assert_eq!(line, 1);
    assert!(reason.contains("expected stage 0"), "{reason}");
    let (_, reason) = parse_error("# nothing\n\n");
    assert!(reason.contains("no stage"), "{reason}");
}

fn check_error(text: &str) -> (usize, usize, Violation, String) {
    match PlanFile::parse(text).unwrap().check() {
        Err(e @ ScheduleError::PlanFile { .. }) => {
            let message = e.to_string();
            let ScheduleError::PlanFile {
                line,
                column,
                finding,
            } = e
            else {
                unreachable!()
            };
            (line, column, finding.violation, message)
        }
        other => panic!("expected an invalid plan for {text:?}, got {other:?}"),
    }
}

#[test]
fn a_deadlock_names_the_blocked_action_in_the_file() {
    // Stage 0 waits for 1B0 before it forwards 1; stage 1 waits for that forward before 1B0.
    let (line, column, v, msg) = check_error("# deadlock\n0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n");
    assert!(matches!(v, Violation::Deadlock { .. }), "{msg}");
    assert!(msg.starts_with("plan file line "), "{msg}");
    // The lowest blocked stage is stage 0, at its backward of micro-batch 0.
    assert_eq!((line, column), (2, 2), "{msg}");
    assert!(msg.contains(">0B0<"), "the grid marks the step:\n{msg}");
}

#[test]
fn a_missing_backward_points_past_the_end_of_its_row() {
    let (line, column, v, msg) = check_error("0F0,0F1,0B0\n");
    assert!(matches!(v, Violation::Missing { .. }), "{msg}");
    assert_eq!((line, column), (1, 4), "{msg}");
    assert!(msg.contains("`0B1`"), "{msg}");
}

#[test]
fn overlaps_round_trip_through_csv_and_text() {
    // DualPipeV's pairs: `0F3+3B1` (PyTorch's `(0F3;3B1)OVERLAP_F_B`), one cell each.
    let plan = ScheduleKind::DualPipeV.plan(2, 4).unwrap();
    let csv = PlanFile::csv(&plan);
    let first = csv.lines().next().unwrap();
    assert_eq!(
        first,
        "0F0,0F1,0F2,3F0,3I0,3W0,3F1,0F3+3B1,3F2+0B0,3B2,3F3+0B1,3B3,0I2,0W2,0I3,0W3"
    );
    let file = PlanFile::parse(&csv).unwrap();
    assert_eq!(file.plan(), &plan);
    assert_eq!(PlanFile::csv(file.plan()), csv);
    file.check().unwrap();
    let text = plan.to_string();
    assert_eq!(PlanFile::parse(&text).unwrap().plan().to_string(), text);
    // A pair not a forward `+` a full backward is refused where it is written.
    let bad = first.replace("0F3+3B1", "3B1+0F3");
    let err = PlanFile::parse(&format!("{bad}\n"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("column 8") && err.contains("an overlap is a forward `+` a full backward"),
        "{err}"
    );
}

#[test]
fn a_byte_order_mark_before_a_csv_is_read_past() {
    // Issue 47, class 6: a CSV that a spreadsheet saved with a UTF-8 BOM failed on "cannot
    // parse action `0F0`", without naming the BOM.
    let plain = PlanFile::parse("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n").unwrap();
    let marked = PlanFile::parse("\u{feff}0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n").unwrap();
    assert_eq!(marked, plain);
}
