//! GEMM orientation bench: why the split backward computes small micro-batches "transposed".
//!
//! One `Linear(1024, 1024)` over a 256-row step cut into m micro-batches, one thread, burn-flex
//! (the `gemm` crate): the three products of a dense layer's training, each in the orientation
//! autodiff uses and in the one `pipetrain_engine::dense` uses, in ms for the whole step (best
//! of `BENCH_REPS`, default 15):
//!
//! - forward `x·W` against `(Wᵀ·xᵀ)ᵀ` with a contiguous `Wᵀ` (plus the once-per-step cost of
//!   making `Wᵀ`);
//! - input gradient `dY·Wᵀ` (a transposed view: what burn's matmul backward computes) against
//!   `(W·dYᵀ)ᵀ`;
//! - weight gradient per micro-batch `xᵀ·dY` summed over the step against one `Xᵀ·dY` over all
//!   of the step's rows.
//!
//! `gemm` runs a product whose large dimension is the left operand's rows several times faster
//! than one whose large dimension is the right operand's columns when the other side is a few
//! rows: that is an upstream weakness (burn-flex / gemm), measured here so it can be reported
//! there. Run: `RAYON_NUM_THREADS=1 cargo bench --bench gemm_orientation`.

use std::time::Instant;

use burn::prelude::*;
use burn::tensor::Distribution;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const WIDTH: usize = 1024;
const STEP_ROWS: usize = 256;

fn best_of<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let reps: usize = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let d = Device::flex();
    let random = |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Default, &d);
    let w = random([WIDTH, WIDTH]);
    let make_wt = || {
        w.clone()
            .transpose()
            .reshape([WIDTH * WIDTH])
            .reshape([WIDTH, WIDTH])
    };
    let wt = make_wt();
    let make = best_of(reps, || {
        let _ = make_wt().slice([0..1, 0..1]).into_data();
    });
    println!(
        "Linear({WIDTH}, {WIDTH}), {STEP_ROWS} rows per step, 1 thread, ms per step (best of {reps}); making Wᵀ: {make:.2} ms"
    );
    println!(
        "| rows × m | fwd x·W | fwd (Wᵀ·xᵀ)ᵀ | dX dY·Wᵀ | dX (W·dYᵀ)ᵀ | dW per mb + sum | dW batched |"
    );
    println!("|---|---|---|---|---|---|---|");
    for m in [1usize, 2, 4, 8, 32] {
        let rows = STEP_ROWS / m;
        let xs: Vec<Tensor<2>> = (0..m).map(|_| random([rows, WIDTH])).collect();
        let dys: Vec<Tensor<2>> = (0..m).map(|_| random([rows, WIDTH])).collect();
        let each = |f: &dyn Fn(&Tensor<2>, &Tensor<2>) -> Tensor<2>| {
            best_of(reps, || {
                for (x, dy) in xs.iter().zip(&dys) {
                    let _ = f(x, dy).into_data();
                }
            })
        };
        let fwd = each(&|x, _| x.clone().matmul(w.clone()));
        let fwd_t = each(&|x, _| wt.clone().matmul(x.clone().transpose()).transpose());
        let dx = each(&|_, dy| dy.clone().matmul(w.clone().transpose()));
        let dx_t = each(&|_, dy| w.clone().matmul(dy.clone().transpose()).transpose());
        let dw = best_of(reps, || {
            let mut sum: Option<Tensor<2>> = None;
            for (x, dy) in xs.iter().zip(&dys) {
                let g = x.clone().transpose().matmul(dy.clone());
                sum = Some(match sum {
                    Some(s) => s + g,
                    None => g,
                });
            }
            let _ = sum.map(|s| s.into_data());
        });
        let (x, dy) = (Tensor::cat(xs.clone(), 0), Tensor::cat(dys.clone(), 0));
        let dw_batched = best_of(reps, || {
            let _ = x.clone().transpose().matmul(dy.clone()).into_data();
        });
        println!(
            "| {rows} × {m} | {fwd:.1} | {fwd_t:.1} | {dx:.1} | {dx_t:.1} | {dw:.1} | {dw_batched:.1} |"
        );
    }
}
