//! Failure: first error wins, every worker is woken, nothing hangs, every thread is joined.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use pipetrain::{Activation, EngineError, Error, Layer, Pipeline, Remat, ScheduleKind};
use pipetrain_models::synthetic;

/// Tests in this file count threads by name: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A Linear layer that panics on its k-th call. Forward trips run with `Remat::Never`: the
/// layers run once per micro-batch, in the forward action, in micro-batch order, so the k-th
/// call is the forward of micro-batch k. Backward trips run with `Remat::Always` and count only
/// the backward's calls: the backward action re-runs the layers, in micro-batch order. An inner
/// stage's forward runs them first on the same input (the training forward, its graph dropped),
/// so there a call counts when its input was seen before; the last stage's forward computes
/// nothing, so there every call is the backward's.
#[derive(Module, Debug)]
struct Tripwire {
    linear: Linear,
    #[module(skip)]
    trip: Option<Trip>,
}

#[derive(Clone, Debug)]
struct Trip {
    micro_batch: usize,
    in_backward: bool,
    calls: Arc<AtomicUsize>,
    /// Backward trips on an inner stage: the inputs its forward saw (each micro-batch's first
    /// value's bits); `None` on the last stage.
    seen: Option<Arc<Mutex<Vec<u32>>>>,
}

impl Layer for Tripwire {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        let x: Tensor<2> = input.float()?;
        if let Some(trip) = &self.trip {
            let counted = match (&trip.seen, trip.in_backward) {
                (_, false) => true,
                (None, true) => true,
                (Some(seen), true) => {
                    let first: f32 = x.clone().slice([0..1, 0..1]).into_scalar();
                    let first = first.to_bits();
                    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                    let again = seen.contains(&first);
                    seen.push(first);
                    again
                }
            };
            if counted {
                let call = trip.calls.fetch_add(1, Ordering::SeqCst);
                if call == trip.micro_batch {
                    panic!("tripwire: micro-batch {call}");
                }
            }
        }
        Ok(self.linear.forward(x).into())
    }
}

fn layers(
    device: &Device,
    trip_layer: usize,
    trip: Trip,
    widths: &[(usize, usize)],
) -> Vec<Tripwire> {
    widths
        .iter()
        .enumerate()
        .map(|(i, &(a, b))| Tripwire {
            linear: LinearConfig::new(a, b).init(device),
            trip: (i == trip_layer).then(|| trip.clone()),
        })
        .collect()
}

/// Two stages of one layer each, no tripwire armed, `Remat::Never`, one thread per worker.
fn untripped_pipeline(
    device: &Device,
    widths: &[(usize, usize)],
    micro_batches: usize,
) -> Pipeline<Tripwire> {
    let idle = Trip {
        micro_batch: usize::MAX,
        in_backward: false,
        calls: Arc::new(AtomicUsize::new(0)),
        seen: None,
    };
    Pipeline::builder()
        .layers(layers(device, usize::MAX, idle, widths))
        .balance([1, 1])
        .micro_batches(micro_batches)
        .remat(Remat::Never)
        .threads_per_worker(1)
        .build()
        .unwrap()
}

/// Names of this process's threads that are pipeline workers (not their pools).
fn worker_threads() -> Vec<String> {
    let mut names = Vec::new();
    // Sorted by name (tasks are listed by thread id).
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(name) = std::fs::read_to_string(task.path().join("comm")) {
            let name = name.trim().to_string();
            // Workers are `pipetrain-r<R>s<S>`; their pools' threads add `-<i>`.
            if name.starts_with("pipetrain-r") && !name[11..].contains('-') {
                names.push(name);
            }
        }
    }
    names.sort();
    names
}

/// Dropping a pipeline joins its worker threads; the kernel lists a joined thread in /proc for
/// a moment longer (join returns when the exiting thread clears its id, before the kernel
/// releases it), so look again for a while.
fn assert_no_worker_threads() {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !worker_threads().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        worker_threads().is_empty(),
        "worker threads outlive the pipeline: {:?}",
        worker_threads()
    );
}

fn run_tripped(
    stage_of_trip: usize,
    micro_batch: usize,
    in_backward: bool,
    schedule: ScheduleKind,
) -> (Error, Duration) {
    let device = Device::flex();
    let trip = Trip {
        micro_batch,
        in_backward,
        calls: Arc::new(AtomicUsize::new(0)),
        // Stage 0 of 2 is an inner stage: its forward runs the layers first.
        seen: (in_backward && stage_of_trip == 0).then(|| Arc::new(Mutex::new(Vec::new()))),
    };
    // 4 layers of width 6, 2 per stage for 2 stages; trip the first layer of `stage_of_trip`.
    let widths = [(6, 6), (6, 6), (6, 6), (6, 3)];
    let mut pipeline = Pipeline::builder()
        .layers(layers(&device, stage_of_trip * 2, trip, &widths))
        .balance([2, 2])
        .micro_batches(4)
        .schedule(schedule)
        .remat(if in_backward {
            Remat::Always
        } else {
            Remat::Never
        })
        .threads_per_worker(1)
        .build()
        .unwrap();
    let batch = synthetic::classification(1, 0, 8, 6, 3, &device);
    let started = Instant::now();
    let err = pipeline.train_step(&batch).unwrap_err();
    let elapsed = started.elapsed();
    // The workers' threads are persistent: after the failure they are still the pipeline's two,
    // idle (none is stuck in the failed step: the next call answers at once).
    assert_eq!(worker_threads(), ["pipetrain-r0s0", "pipetrain-r0s1"]);
    // The pipeline refuses to go on after a failed step.
    let again = pipeline.train_step(&batch).unwrap_err();
    assert!(
        matches!(again, Error::Engine(EngineError::Poisoned)),
        "{again}"
    );
    // None outlives the pipeline.
    drop(pipeline);
    assert_no_worker_threads();
    (err, elapsed)
}

fn assert_failed(err: &Error, stage: u32, micro_batch: u32, action: &str) {
    match err {
        Error::Engine(EngineError::StageFailed {
            stage: s,
            micro_batch: mb,
            action: a,
            source,
            ..
        }) => {
            assert_eq!(s.0, stage, "{err}");
            assert_eq!(mb.map(|m| m.0), Some(micro_batch), "{err}");
            assert_eq!(a.to_string(), action, "{err}");
            assert!(matches!(**source, EngineError::Panic { .. }), "{err}");
        }
        other => panic!("expected StageFailed, got {other}"),
    }
    let text = err.to_string();
    assert!(text.contains(&format!("stage {stage}")), "{text}");
    assert!(
        text.contains(&format!("micro-batch {micro_batch}")),
        "{text}"
    );
    assert!(text.contains("tripwire"), "{text}");
}

/// A failed step ends well within this (about a second on an idle machine; the margin is for
/// CI machines whose cores other jobs share). A worker left waiting would never end.
const ENDS_WITHIN: Duration = Duration::from_secs(10);

#[test]
fn a_panic_in_forward_ends_the_step_naming_stage_micro_batch_and_action() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for schedule in ScheduleKind::ALL {
        for (stage, mb) in [(0, 0), (0, 2), (1, 1), (1, 3)] {
            let (err, elapsed) = run_tripped(stage, mb, false, schedule);
            assert_failed(&err, stage as u32, mb as u32, &format!("{stage}F{mb}"));
            assert!(elapsed < ENDS_WITHIN, "{schedule}: took {elapsed:?}");
        }
    }
}

#[test]
fn a_panic_in_backward_ends_the_step_naming_stage_micro_batch_and_action() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for schedule in ScheduleKind::ALL {
        for (stage, mb) in [(0, 1), (1, 0), (1, 3)] {
            let (err, elapsed) = run_tripped(stage, mb, true, schedule);
            assert_failed(&err, stage as u32, mb as u32, &format!("{stage}B{mb}"));
            assert!(elapsed < ENDS_WITHIN, "{schedule}: took {elapsed:?}");
        }
    }
}

#[test]
fn a_shape_mismatch_between_stages_names_both_stages_and_shapes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    // Stage 0 outputs width 6; stage 1 expects width 5.
    let mut pipeline = untripped_pipeline(&device, &[(6, 6), (5, 3)], 2);
    let batch = synthetic::classification(1, 0, 8, 6, 3, &device);
    let err = pipeline.train_step(&batch).unwrap_err().to_string();
    assert!(err.contains("stage 1") && err.contains("`1F0`"), "{err}");
    assert!(
        err.contains("received from stage 0") && err.contains("[4, 6]"),
        "{err}"
    );
    drop(pipeline);
    assert_no_worker_threads();
}

#[test]
fn a_layer_error_is_reported_not_panicked() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    // Int targets fed as the input: the first layer asks for a float tensor.
    let mut pipeline = untripped_pipeline(&device, &[(6, 6), (6, 3)], 2);
    let mut batch = synthetic::classification(1, 0, 8, 6, 3, &device);
    batch.inputs = batch.targets.clone();
    let err = pipeline.train_step(&batch).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            &err,
            Error::Engine(EngineError::StageFailed { source, .. })
                if matches!(**source, EngineError::Layer { .. })
        ),
        "{text}"
    );
    assert!(
        text.contains("expected a rank-2 float tensor, got a rank-1 int tensor"),
        "{text}"
    );
}

#[test]
fn a_batch_with_fewer_rows_than_micro_batches_is_an_error_before_any_thread_starts() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let device = Device::flex();
    let mut pipeline = untripped_pipeline(&device, &[(6, 6), (6, 3)], 3);
    let batch = synthetic::classification(1, 0, 2, 6, 3, &device);
    let err = pipeline.train_step(&batch).unwrap_err().to_string();
    assert!(
        err.contains("batch of 2 rows does not split into 1 replicas × 3 micro-batches")
            && err.contains("at least 3 rows"),
        "{err}"
    );
    // Not a worker failure: the pipeline is still usable, with a batch of any size ≥ 3.
    let ok = synthetic::classification(1, 0, 8, 6, 3, &device);
    pipeline.train_step(&ok).unwrap();
}

/// The error chain keeps every level: the facade's `Error::Engine` has the engine's
/// `StageFailed` as its source, whose source is the worker's cause.
#[test]
fn the_error_chain_goes_through_each_level() {
    use std::error::Error as _;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (err, _) = run_tripped(1, 0, false, ScheduleKind::ALL[0]);
    let engine = err.source().expect("the engine's error");
    assert!(
        matches!(
            engine.downcast_ref::<EngineError>(),
            Some(EngineError::StageFailed { .. })
        ),
        "{engine}"
    );
    let cause = engine.source().expect("the worker's cause");
    assert!(cause.to_string().starts_with("panicked: "), "{cause}");
}
