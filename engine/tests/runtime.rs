//! The runtime's threads: one persistent thread per worker, the same across steps (also after a
//! failed step and a reload), and none left once the runtime is gone.
//!
//! One test in this binary on purpose: it counts the process's threads by name.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::nn::{Linear, LinearConfig};
use burn::prelude::*;
use pipetrain_engine::*;
use pipetrain_partitioner::Partition;
use pipetrain_schedules::{ReplicaId, ScheduleKind, StageId, WorkerId};

#[derive(Module, Debug)]
struct Dense {
    linear: Linear,
}

impl Layer for Dense {
    fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
        Ok(self.linear.forward(x.float::<2>()?).into())
    }
}

/// Names of this process's threads that belong to pipetrain workers (Linux: /proc).
fn worker_threads() -> BTreeSet<(u64, String)> {
    let mut found = BTreeSet::new();
    for task in std::fs::read_dir("/proc/self/task").expect("Linux /proc") {
        let task = task.unwrap().path();
        let Ok(name) = std::fs::read_to_string(task.join("comm")) else {
            continue; // the thread ended while we looked
        };
        let name = name.trim().to_string();
        if name.starts_with("pipetrain-r") {
            let tid = task.file_name().unwrap().to_string_lossy().parse().unwrap();
            found.insert((tid, name));
        }
    }
    found
}

fn runtime(device: &Device) -> Runtime<Dense> {
    let dense = |i, o| Dense {
        linear: LinearConfig::new(i, o).init(device),
    };
    let model = vec![dense(4, 8), dense(8, 8), dense(8, 2)];
    let workers = Workers::build(
        World::new(2, 2).unwrap(),
        Partition::from_balance(&[2, 1], 3).unwrap(),
        &model,
        std::slice::from_ref(device),
        &OptimizerConfig::sgd(),
        1,
    )
    .unwrap();
    let config = RuntimeConfig {
        schedule: ScheduleKind::OneFOneB.into(),
        micro_batches: 2,
        learning_rate: 0.1,
        remat: Remat::ExceptLast,
        loss: Arc::new(Mse),
        data_parallel: DataParallel::default(),
        ties: Vec::new(),
        backward: Backward::default(),
        guard: Default::default(),
        timing: Default::default(),
        handoff: Default::default(),
        precision: Default::default(),
        warm_up: Default::default(),
    };
    Runtime::new(
        Prepared::new(workers, config).unwrap(),
        Box::new(ChannelFabric::default()),
    )
    .unwrap()
}

fn batch(device: &Device, width: usize) -> Batch {
    Batch {
        inputs: Tensor::<2>::ones([8, width], device).into(),
        targets: Tensor::<2>::zeros([8, 2], device).into(),
    }
}

#[test]
#[cfg(target_os = "linux")]
fn worker_threads_persist_across_steps_and_end_with_the_runtime() {
    let device = Device::flex();
    assert!(worker_threads().is_empty(), "{:?}", worker_threads());
    let mut runtime = runtime(&device);
    let threads = runtime.threads();
    assert_eq!(threads.len(), 4, "one thread per worker");
    let ids: BTreeSet<WorkerId> = threads.iter().map(|(w, _)| *w).collect();
    assert!(ids.contains(&WorkerId::new(ReplicaId(1), StageId(1))));

    runtime.step(&batch(&device, 4)).unwrap();
    let after_one = worker_threads();
    let names: BTreeSet<&str> = after_one.iter().map(|(_, n)| n.as_str()).collect();
    for name in [
        "pipetrain-r0s0",
        "pipetrain-r0s1",
        "pipetrain-r1s0",
        "pipetrain-r1s1",
    ] {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
    for _ in 0..3 {
        runtime.step(&batch(&device, 4)).unwrap();
    }
    assert_eq!(
        runtime.threads(),
        threads,
        "the same threads step after step"
    );
    assert_eq!(worker_threads(), after_one, "no thread started or ended");

    // A failed step (inputs of the wrong width) poisons the runtime, keeps the threads, and a
    // checkpoint brings it back on the same threads.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    runtime.save_checkpoint(&path, Default::default()).unwrap();
    let started = Instant::now();
    let error = runtime.step(&batch(&device, 5)).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a failure ends the step"
    );
    assert!(
        matches!(
            error,
            EngineError::StageFailed {
                stage: StageId(0),
                ..
            }
        ),
        "{error}"
    );
    assert!(matches!(
        runtime.step(&batch(&device, 4)),
        Err(EngineError::Poisoned)
    ));
    runtime
        .load_checkpoint(&checkpoint::Checkpoint::read(&path).unwrap())
        .unwrap();
    runtime.step(&batch(&device, 4)).unwrap();
    assert_eq!(runtime.threads(), threads);
    assert_eq!(worker_threads(), after_one);

    let model = runtime.into_workers().into_model();
    assert_eq!(model.len(), 3);
    drop(model);
    // The worker threads are joined (the kernel lists a joined thread for a moment longer) and
    // their compute pools end with the states (rayon ends its threads asynchronously): look
    // again for a while.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !worker_threads().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(worker_threads().is_empty(), "{:?}", worker_threads());
}
