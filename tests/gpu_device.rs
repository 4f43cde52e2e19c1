//! CUDA devices are probed before anything starts, and a missing piece is an error that names
//! it and the remedy: without the `cuda` feature, how to build it; with it and no driver,
//! libcuda (burn and cudarc would panic, or fail on a thread of their own with `RecvError`);
//! with a driver, a GPU index the machine does not have. These run in every build, on any
//! machine; which branch a machine takes is printed.

mod common;

use pipetrain::engine::EngineError;
use pipetrain::engine::device::{cuda, cuda_device_count};

/// The error for GPU `index` says what is missing and how to fix it.
fn check(error: &EngineError, index: usize) {
    let text = error.to_string();
    assert!(text.starts_with(&format!("cuda:{index}: ")), "{text}");
    match error {
        EngineError::NotBuilt { .. } => assert!(text.contains("`cuda` feature"), "{text}"),
        EngineError::NoDriver { .. } => assert!(
            text.contains("libcuda.so") && text.contains("LD_LIBRARY_PATH"),
            "{text}"
        ),
        EngineError::NoSuchDevice { count, .. } => assert!(
            text.contains(&format!("this machine has {count} CUDA device(s)"))
                && text.contains(&format!("below {count}")),
            "{text}"
        ),
        EngineError::NoNvrtc { .. } => {
            assert!(
                text.contains("libnvrtc") && text.contains("LD_LIBRARY_PATH"),
                "{text}"
            )
        }
        other => panic!("unexpected: {other:?}"),
    }
}

#[test]
fn a_missing_gpu_names_what_is_missing_and_the_remedy() {
    match cuda_device_count() {
        Err(e) => {
            println!("no CUDA here: {e}");
            if cfg!(feature = "cuda") {
                assert!(matches!(e, EngineError::NoDriver { .. }), "{e}");
            } else {
                assert!(matches!(e, EngineError::NotBuilt { .. }), "{e}");
            }
            let e = cuda(0).unwrap_err();
            check(&e, 0);
        }
        Ok(count) => {
            println!("{count} CUDA device(s) here");
            let e = cuda(count).unwrap_err();
            assert!(
                matches!(e, EngineError::NoSuchDevice { index, count: c } if index == count && c == count),
                "{e}"
            );
            check(&e, count);
        }
    }
}

/// The command line refuses before training: exit 2 and the probe's words. On a machine
/// with one GPU or none, `cuda:0,cuda:1` names the missing one.
#[test]
fn the_command_line_refuses_an_unusable_gpu_before_training() {
    let index = cuda_device_count().unwrap_or(0);
    let list = format!("cuda:0,cuda:{index}");
    let args = [
        "train",
        "--devices",
        list.as_str(),
        "--stages",
        "2",
        "--steps",
        "1",
    ];
    let stderr = common::failure_with(common::USAGE, &args);
    assert!(
        stderr.contains("CUDA") || stderr.contains("cuda"),
        "{stderr}"
    );
    let expected = match cuda(index) {
        Err(e) => e.to_string(),
        Ok(_) => unreachable!("cuda:{index} is one past the last GPU"),
    };
    match cuda(0) {
        // The binary says it in its own words: how to build it.
        Err(EngineError::NotBuilt { .. }) => assert!(
            stderr.contains("--features cuda") && stderr.contains("--device cpu"),
            "{stderr}"
        ),
        Err(e) => assert!(stderr.contains(&e.to_string()), "{stderr}\nexpected: {e}"),
        Ok(_) => assert!(stderr.contains(&expected), "{stderr}\nexpected: {expected}"),
    }
    assert!(
        !stderr.contains("RecvError") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// Issue 36, item 6: Adam's state in a checkpoint resumes on the CPU in a build without the
/// `cuda` feature and on a machine with a GPU. A `cuda` build on a machine without one cannot
/// (burn loads optimizer state onto GPU 0 first): that is an error naming the cause and the
/// remedy (exit 1), never a panic. Resuming on `cuda:0` without a usable GPU is the probe's
/// usage error (exit 2).
#[test]
fn a_checkpoint_with_adam_state_resumes_on_the_cpu_or_says_why_not() {
    let tmp = common::scratch("gpu-device-resume");
    let checkpoint = tmp.path().join("adam").to_string_lossy().to_string();
    let model = ["--width", "16", "--hidden-layers", "2", "--batch", "16"];
    let args = |extra: &[&'static str]| -> Vec<String> {
        [&["train"][..], &model, &["--optimizer", "adam"], extra]
            .concat()
            .into_iter()
            .map(String::from)
            .collect()
    };
    let with = |mut a: Vec<String>, last: &str| {
        a.push(last.to_string());
        a
    };
    common::success(&strs(&with(
        args(&["--steps", "2", "--checkpoint"]),
        &checkpoint,
    )));
    let on_cpu = with(args(&["--steps", "3", "--resume"]), &checkpoint);
    let on_gpu = with(
        args(&["--device", "cuda:0", "--steps", "3", "--resume"]),
        &checkpoint,
    );
    let probe = cuda(0);
    println!("this machine: {probe:?}");
    match probe {
        Ok(_) => {
            for run in [&on_cpu, &on_gpu] {
                let out = common::success(&strs(run));
                assert!(out.contains("at step 2 of 3"), "{out}");
            }
        }
        Err(EngineError::NotBuilt { .. }) => {
            let out = common::success(&strs(&on_cpu));
            assert!(out.contains("at step 2 of 3"), "{out}");
            let stderr = common::failure_with(common::USAGE, &strs(&on_gpu));
            assert!(stderr.contains("--features cuda"), "{stderr}");
        }
        Err(e) => {
            let stderr = common::failure_with(common::RUNTIME, &strs(&on_cpu));
            assert!(
                stderr.contains("optimizer state")
                    && stderr.contains(&e.to_string())
                    && stderr.contains("without the `cuda` feature"),
                "{stderr}\nexpected the cause: {e}"
            );
            assert!(!stderr.contains("panicked"), "{stderr}");
            let stderr = common::failure_with(common::USAGE, &strs(&on_gpu));
            assert!(stderr.contains(&e.to_string()), "{stderr}\nexpected: {e}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
}

/// `args` as `&str`s, for the common helpers.
fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}
