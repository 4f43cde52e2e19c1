//! The sweep's verdicts: one [`Case`] per comparison, handed to the caller as it ends, and the
//! table they make at the end ([`render`]).

use std::fmt::Write as _;

use pipetrain_engine::difference;

use super::progress::Progress;

/// One case's verdict: what was compared, what was measured, the bar, and whether it passed.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The case, e.g. `mlp sgd 1f1b p=2 m=4 remat=never Split { weight_group: 0 }`.
    pub name: String,
    /// What was measured: `max_rel 1.2e-7 (abs 3.0e-8)`, `bitwise equal`, or the error.
    pub measured: String,
    /// The bar: `<= 1e-5`, `bitwise`, `runs`, ...
    pub bar: String,
    /// Whether the measurement is within the bar.
    pub ok: bool,
}

/// The cases of a sweep as they end: each is handed to the [`Progress`] at once (the caller
/// prints it), and kept for the final table.
pub(super) struct Table<'a> {
    cases: Vec<Case>,
    progress: &'a Progress<'a>,
    /// Test knob: the cases whose name holds this text compare weights moved by 1.0.
    perturb: Option<&'a str>,
}

impl<'a> Table<'a> {
    pub(super) fn new(progress: &'a Progress<'a>, perturb: Option<&'a str>) -> Self {
        Self {
            cases: Vec::new(),
            progress,
            perturb,
        }
    }

    /// Says which case runs now (the heartbeat names it).
    pub(super) fn begin(&self, case: &str) {
        self.progress.begin(case);
    }

    /// Records a verdict and hands it on.
    pub(super) fn push(&mut self, case: Case) {
        self.progress.ended(&case);
        self.cases.push(case);
    }

    /// `got` moved by 1.0 in its first value when the perturbation knob names `case`.
    fn perturbed(&self, case: &str, got: &[Vec<f32>]) -> Vec<Vec<f32>> {
        let mut got = got.to_vec();
        if self.perturb.is_some_and(|p| case.contains(p))
            && let Some(first) = got.iter_mut().find_map(|t| t.first_mut())
        {
            *first += 1.0;
        }
        got
    }

    /// `got` against `expected`: max_rel_diff within `bar`.
    pub(super) fn close(
        &mut self,
        case: impl Into<String>,
        got: &[Vec<f32>],
        expected: &[Vec<f32>],
        bar: f64,
    ) {
        let case = case.into();
        let got = self.perturbed(&case, got);
        let d = difference(&got, expected);
        self.push(Case {
            name: case,
            measured: format!(
                "max_rel {:.3e} (abs {:.3e})",
                d.max_relative, d.max_absolute
            ),
            bar: format!("<= {bar:e}"),
            ok: d.max_relative <= bar,
        });
    }

    /// `got` and `theirs` bit for bit.
    pub(super) fn bitwise(
        &mut self,
        case: impl Into<String>,
        got: &[Vec<f32>],
        theirs: &[Vec<f32>],
    ) {
        let case = case.into();
        let got = self.perturbed(&case, got);
        let d = difference(&got, theirs);
        let equal = got == theirs;
        self.push(Case {
            name: case,
            measured: match equal {
                true => "bitwise equal".into(),
                false => format!(
                    "differ: max_rel {:.3e} (abs {:.3e})",
                    d.max_relative, d.max_absolute
                ),
            },
            bar: "bitwise".into(),
            ok: equal,
        });
    }

    /// A verdict measured otherwise: `measured` against `bar`, passed or not.
    pub(super) fn verdict(
        &mut self,
        case: impl Into<String>,
        measured: String,
        bar: &str,
        ok: bool,
    ) {
        let case = case.into();
        let ok = ok && !self.perturb.is_some_and(|p| case.contains(p));
        self.push(Case {
            name: case,
            measured,
            bar: bar.into(),
            ok,
        });
    }

    /// A case that failed to run at all.
    pub(super) fn failed(&mut self, case: impl Into<String>, error: impl std::fmt::Display) {
        self.push(Case {
            name: case.into(),
            measured: format!("error: {error}"),
            bar: "runs".into(),
            ok: false,
        });
    }

    /// Runs one case's `body`, recording an error as a failed case.
    pub(super) fn run(&mut self, case: &str, body: impl FnOnce(&mut Self) -> Result<(), String>) {
        self.begin(case);
        if let Err(e) = body(self) {
            self.failed(case, e);
        }
    }

    /// The verdicts, in order.
    pub(super) fn into_cases(self) -> Vec<Case> {
        self.cases
    }
}

/// The table of `cases` run on `on`: one line per case (case, measured, bar, verdict), then
/// the count of passed and failed.
pub fn render(cases: &[Case], on: &str) -> String {
    let width = cases.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let mut out = format!("doctor: the sweep on {on}\n");
    let _ = writeln!(
        out,
        "{:<width$}  {:<44}  {:<10}  verdict",
        "case", "measured", "bar"
    );
    for r in cases {
        let _ = writeln!(
            out,
            "{:<width$}  {:<44}  {:<10}  {}",
            r.name,
            r.measured,
            r.bar,
            r.verdict()
        );
    }
    let failed = cases.iter().filter(|r| !r.ok).count();
    let _ = writeln!(out, "{} passed, {failed} failed", cases.len() - failed);
    out
}

impl Case {
    /// `ok` or `FAILED`.
    pub fn verdict(&self) -> &'static str {
        if self.ok { "ok" } else { "FAILED" }
    }
}
