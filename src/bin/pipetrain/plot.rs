//! `--plot loss.png`: the loss curve as a PNG line chart.
//!
//! plotters is built without font support (no system font libraries needed), so the chart has
//! no text: a frame, horizontal grid lines at the quarters of the loss range, and the curve
//! from the first step (left) to the last (right). The range is printed on stdout instead.

use std::path::Path;

use plotters::prelude::*;

/// Width and height of the image in pixels.
const SIZE: (u32, u32) = (800, 480);

/// The image formats `--plot` can write, by file extension.
const FORMATS: [&str; 4] = ["png", "jpg", "jpeg", "bmp"];

/// `--plot`'s path, if given, names a format it can write (by its extension), checked before
/// the run rather than failing after it.
///
/// # Errors
/// The path and the extensions accepted.
pub fn check_format(path: Option<&Path>) -> Result<(), String> {
    let Some(path) = path else {
        return Ok(());
    };
    let extension = path.extension().map(|e| e.to_string_lossy().to_lowercase());
    match extension {
        Some(e) if FORMATS.contains(&e.as_str()) => Ok(()),
        _ => Err(format!(
            "--plot {}: the image format is chosen by the extension; use .png (or .jpg, .bmp)",
            path.display()
        )),
    }
}

/// Draws `losses` (one per optimizer step) into the PNG file `path`; returns the plotted
/// `(min, max)` loss.
///
/// # Errors
/// When there is nothing finite to draw or the file cannot be written.
pub fn loss_png(path: &Path, losses: &[f64]) -> Result<(f64, f64), String> {
    let fail = |e: &dyn std::fmt::Display| format!("--plot {}: {e}", path.display());
    let finite: Vec<f64> = losses.iter().copied().filter(|l| l.is_finite()).collect();
    if finite.is_empty() {
        return Err(fail(&"no finite loss to plot"));
    }
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let pad = ((hi - lo) * 0.05).max(1e-6);
    let (lo_y, hi_y) = (lo - pad, hi + pad);
    let last = losses.len().saturating_sub(1).max(1) as f64;

    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let area = root.margin(20, 20, 20, 20);
    let mut chart = ChartBuilder::on(&area)
        .build_cartesian_2d(0.0..last, lo_y..hi_y)
        .map_err(|e| fail(&e))?;
    let grey = RGBColor(220, 220, 220);
    for q in 0..=4 {
        let y = lo_y + (hi_y - lo_y) * f64::from(q) / 4.0;
        chart
            .draw_series(LineSeries::new([(0.0, y), (last, y)], grey))
            .map_err(|e| fail(&e))?;
    }
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(0.0, lo_y), (last, hi_y)],
            BLACK.stroke_width(1),
        )))
        .map_err(|e| fail(&e))?;
    let points = losses
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_finite())
        .map(|(i, &l)| (i as f64, l));
    chart
        .draw_series(LineSeries::new(points, BLUE.stroke_width(2)))
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok((lo, hi))
}
