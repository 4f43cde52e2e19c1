//! `--plot` draws a chart a person can read (issue 17, item 9): the image has the documented
//! size, and text (the title, the tick labels, the axis descriptions) is drawn where a chart
//! without a font would have none.

use crate::common;
use common::{TINY, scratch, success};

/// Dark grey-to-black pixels (text and axes; the curves are blue and orange) in the
/// rectangle `x0..x1` × `y0..y1`.
fn dark(image: &image::RgbImage, (x0, x1): (u32, u32), (y0, y1): (u32, u32)) -> usize {
    (x0..x1)
        .flat_map(|x| (y0..y1).map(move |y| (x, y)))
        .filter(|&(x, y)| {
            let [r, g, b] = image.get_pixel(x, y).0;
            r < 110 && g < 110 && b < 110 && r.abs_diff(b) < 40
        })
        .count()
}

#[test]
fn the_plot_has_a_title_tick_labels_and_axis_descriptions() {
    let tmp = scratch("plot");
    let png = tmp.path().join("run.png");
    let mut args = vec!["train"];
    args.extend_from_slice(&TINY[..6]);
    args.extend_from_slice(&[
        "--steps",
        "6",
        "--micro-batches",
        "2",
        "--lr-schedule",
        "linear",
    ]);
    args.extend_from_slice(&["--plot", png.to_str().unwrap()]);
    let out = success(&args);
    assert!(out.contains("plot:"), "{out}");
    let image = image::open(&png).unwrap().to_rgb8();
    assert_eq!(image.dimensions(), (960, 600));
    let regions = [
        ("title", (0, 960), (0, 24)),
        ("held-out caption", (60, 400), (26, 50)),
        ("x tick labels and `step`", (80, 860), (560, 600)),
        ("loss tick labels", (25, 68), (80, 540)),
        ("learning-rate tick labels", (870, 940), (80, 540)),
    ];
    for (what, xs, ys) in regions {
        let n = dark(&image, xs, ys);
        assert!(n > 40, "{what}: {n} dark pixels");
    }
}

/// A one-step run's plot says what it cannot show (a point, no curve), on the chart and in the
/// `plot:` line, and draws the point; its step axis does not repeat the step.
#[test]
fn a_one_step_plot_says_it_has_no_curve_and_draws_the_point() {
    let tmp = scratch("plot-one");
    let png = tmp.path().join("one.png");
    let mut args = vec!["train"];
    args.extend_from_slice(&TINY[..6]);
    args.extend_from_slice(&["--steps", "1", "--plot", png.to_str().unwrap()]);
    let out = success(&args);
    assert!(
        out.contains("over 1 steps); 1 step: one point, no curve"),
        "{out}"
    );
    let image = image::open(&png).unwrap().to_rgb8();
    // The caption line under the title carries the note.
    assert!(dark(&image, (60, 400), (26, 50)) > 40, "no caption");
    // The point: blue pixels at the left end of the plot area.
    let blue = image
        .enumerate_pixels()
        .filter(|(x, _, p)| *x < 200 && p[2] > 150 && p[0] < 80 && p[1] < 80)
        .count();
    assert!(blue > 10, "the one point is drawn ({blue} blue pixels)");
}
