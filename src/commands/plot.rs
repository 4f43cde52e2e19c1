//! The loss plot: a run's training curve as a chart a person can read (the binary's
//! `--plot loss.png`).
//!
//! ```text
//!   pipetrain: MLP-8x1024, 2 stages × 1 replica, adam (…) lr 0.001   <- title: the run
//!   held-out accuracy 71.48% (256 examples)                          <- caption, when evaluated
//!   loss ┤ ╲__                                         ┊ lr (right axis, dashed)
//!        ┤    ‾‾‾‾‾‾‾‾‾‾‾‾‾‾                           ┊
//!        └────────────────── step
//! ```
//!
//! The font is DejaVu Sans, compiled in (`plot/fonts/`, its licence beside it): a fresh
//! machine has no system fonts, and plotters draws text through ab_glyph without them.

use crate::RunError;
use std::path::Path;
use std::sync::Once;

use pipetrain_engine::output::AtomicFile;

use crate::{Error, RunFile, RunFileProblem};

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

/// Width and height of the image in pixels.
const SIZE: (u32, u32) = (960, 600);

/// The image formats a plot can be written in, by file extension.
const FORMATS: [&str; 4] = ["png", "jpg", "jpeg", "bmp"];

/// DejaVu Sans (Bitstream Vera licence: `plot/fonts/LICENSE-DejaVu`).
const FONT: &[u8] = include_bytes!("plot/fonts/DejaVuSans.ttf");

/// The family name the font is registered under.
const FAMILY: &str = "sans-serif";

/// What one run's plot shows.
pub struct Curve<'a> {
    /// The title: which run.
    pub title: &'a str,
    /// The loss of each optimizer step.
    pub losses: &'a [f64],
    /// The learning rate of each optimizer step.
    pub rates: &'a [f64],
    /// The held-out result, if the run evaluated one.
    pub held_out: Option<String>,
}

impl<'a> Curve<'a> {
    /// A curve of `losses` and `rates` titled `title`, without a held-out result yet.
    pub fn new(title: &'a str, losses: &'a [f64], rates: &'a [f64]) -> Self {
        Self {
            title,
            losses,
            rates,
            held_out: None,
        }
    }
}

/// `text` up to its first parenthesis: `MLP-8x1024` of `MLP-8x1024 (input 1024, …)`.
pub fn short(text: &str) -> &str {
    text.split(" (").next().unwrap_or(text)
}

/// The plot's path, if given, names a format it can write (by its extension), checked before
/// the run rather than failing after it.
///
/// # Errors
/// [`RunError::RunFile`]: the path and the extensions accepted.
pub fn check_format(path: Option<&Path>) -> Result<(), Error> {
    let Some(path) = path else {
        return Ok(());
    };
    let extension = path.extension().map(|e| e.to_string_lossy().to_lowercase());
    match extension {
        Some(e) if FORMATS.contains(&e.as_str()) => Ok(()),
        _ => Err(failed(
            path,
            "the image format is chosen by the extension; use .png (or .jpg, .bmp)",
        )),
    }
}

/// Registers the embedded font once per process.
fn font() -> Result<(), String> {
    static REGISTER: Once = Once::new();
    let mut result = Ok(());
    REGISTER.call_once(|| {
        result = register_font(FAMILY, FontStyle::Normal, FONT)
            .map_err(|_| "the embedded font does not parse".to_string());
    });
    result
}

/// What a plot of `losses` cannot show, in words: the steps without a finite loss (skipped
/// steps), and a run with one point and no curve. `None` when every step has a point and there
/// are at least two.
///
/// ```
/// use pipetrain::commands::plot::missing;
/// assert_eq!(missing(&[2.0, 1.5]), None);
/// assert_eq!(missing(&[2.0]).unwrap(), "1 step: one point, no curve");
/// assert_eq!(
///     missing(&[2.0, f64::NAN, f64::NAN, 1.0]).unwrap(),
///     "steps 2-3 (2 of 4) have no finite loss: not drawn"
/// );
/// assert_eq!(
///     missing(&[2.0, f64::NAN]).unwrap(),
///     "step 2 (1 of 2) has no finite loss: not drawn; one point, no curve"
/// );
/// ```
pub fn missing(losses: &[f64]) -> Option<String> {
    let finite = losses.iter().filter(|l| l.is_finite()).count();
    let mut said = Vec::new();
    let absent: Vec<usize> = (losses.iter().enumerate())
        .filter(|(_, l)| !l.is_finite())
        .map(|(i, _)| i + 1)
        .collect();
    if !absent.is_empty() {
        // Runs of consecutive steps: "2-3, 7".
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &s in &absent {
            match runs.last_mut() {
                Some((_, end)) if *end + 1 == s => *end = s,
                _ => runs.push((s, s)),
            }
        }
        let shown: Vec<String> = (runs.iter())
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        let (noun, verb) = match absent.len() {
            1 => ("step", "has"),
            _ => ("steps", "have"),
        };
        said.push(format!(
            "{noun} {} ({} of {}) {verb} no finite loss: not drawn",
            shown.join(", "),
            absent.len(),
            losses.len()
        ));
    }
    if finite == 1 {
        said.push(match losses.len() {
            1 => "1 step: one point, no curve".to_string(),
            _ => "one point, no curve".to_string(),
        });
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// A step axis label: the step number at whole steps, nothing between them (a short run's
/// axis would otherwise repeat its steps, rounded).
fn step_label(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        String::new()
    }
}

/// `(min, max)` of the finite values, padded by 5 % (a flat series gets a small range).
fn range(values: &[f64]) -> Option<(f64, f64)> {
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold(None, |acc: Option<(f64, f64)>, v| {
        Some(acc.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
    })?;
    let pad = ((hi - lo) * 0.05).max(hi.abs() * 1e-3).max(1e-9);
    Some((lo - pad, hi + pad))
}

/// The plot error at `path`.
fn failed(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Run(RunError::RunFile {
        file: RunFile::Plot,
        path: path.to_path_buf(),
        reason: RunFileProblem::Invalid(reason.to_string()),
    })
}

/// Draws `curve` into the image file `path` (atomically, see [`crate::engine::output`]):
/// loss against step on the left axis (a line and a dot per step), the learning rate on the
/// right one (dashed), the run in the title and, under it, the held-out result and what the
/// chart cannot show ([`missing`]).
/// Returns the plotted `(min, max)` loss.
///
/// # Errors
/// [`RunError::RunFile`]: there is nothing finite to draw or the file cannot be written.
pub fn draw(path: &Path, curve: &Curve<'_>) -> Result<(f64, f64), Error> {
    let fail = |e: &dyn std::fmt::Display| failed(path, e);
    font().map_err(|e| fail(&e))?;
    // plotters picks the image format by the extension of the path it writes.
    let extension = path.extension().map(|e| e.to_string_lossy().to_lowercase());
    let out = AtomicFile::with_extension(path, extension.as_deref().unwrap_or("png"))
        .map_err(|e| fail(&e))?;
    let drawn = render(out.temp_path(), curve).map_err(|e| fail(&e))?;
    out.commit().map_err(|e| fail(&e))?;
    Ok(drawn)
}

/// Draws `curve` into the image file `target` (see [`draw`]).
fn render(target: &Path, curve: &Curve<'_>) -> Result<(f64, f64), String> {
    let fail = |e: &dyn std::fmt::Display| e.to_string();
    let (lo, hi) = range(curve.losses).ok_or_else(|| fail(&"no finite loss to plot"))?;
    let (lr_lo, lr_hi) = range(curve.rates).unwrap_or((0.0, 1.0));
    let steps = curve.losses.len() as f64;
    let root = BitMapBackend::new(target, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let root = root
        .titled(curve.title, (FAMILY, 20))
        .map_err(|e| fail(&e))?;
    let (caption, plot) = root.split_vertically(28);
    let text: Vec<String> = (curve.held_out.iter().cloned())
        .chain(missing(curve.losses))
        .collect();
    if !text.is_empty() {
        caption
            .draw_text(
                &text.join(" · "),
                &(FAMILY, 17).into_font().color(&BLACK),
                (70, 4),
            )
            .map_err(|e| fail(&e))?;
    }
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .right_y_label_area_size(80)
        .build_cartesian_2d(1.0..steps.max(2.0), lo..hi)
        .map_err(|e| fail(&e))?
        .set_secondary_coord(1.0..steps.max(2.0), lr_lo..lr_hi);
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .axis_desc_style((FAMILY, 17))
        .label_style((FAMILY, 14))
        .y_label_formatter(&|v| format!("{v:.3}"))
        .x_label_formatter(&step_label)
        .draw()
        .map_err(|e| fail(&e))?;
    chart
        .configure_secondary_axes()
        .y_desc("learning rate")
        .axis_desc_style((FAMILY, 17))
        .label_style((FAMILY, 14))
        .y_label_formatter(&|v| format!("{v:.1e}"))
        .draw()
        .map_err(|e| fail(&e))?;
    let points = (curve.losses.iter().enumerate())
        .filter(|(_, l)| l.is_finite())
        .map(|(i, &l)| ((i + 1) as f64, l));
    chart
        .draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))
        .map_err(|e| fail(&e))?
        .label("loss")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    // A dot per step: a one-step run, or a step between two skipped ones, is seen.
    chart
        .draw_series(points.map(|p| Circle::new(p, 3, BLUE.filled())))
        .map_err(|e| fail(&e))?;
    let rates = (curve.rates.iter().enumerate()).map(|(i, &r)| ((i + 1) as f64, r));
    let orange = RGBColor(230, 120, 0);
    chart
        .draw_secondary_series(DashedLineSeries::new(rates, 6, 4, orange.stroke_width(2)))
        .map_err(|e| fail(&e))?
        .label("learning rate")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], orange.stroke_width(2)));
    chart
        .configure_series_labels()
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    let finite = curve.losses.iter().copied().filter(|l| l.is_finite());
    let (min, max) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), l| {
        (a.min(l), b.max(l))
    });
    Ok((min, max))
}
