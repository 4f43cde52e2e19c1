//! `pipetrain bench`: the flags mapped onto [`BenchSettings`], the progress on stderr, the
//! document on stdout (and in `--out`).

use pipetrain::CommandError;
use pipetrain::Error;
use pipetrain::commands::bench::{self, BenchSettings, GpuPeer, Header, Peers, Progress};
use pipetrain::trainer::paths::Files;

use super::args::BenchArgs;
use crate::exit::Exit;
use crate::failure::Failure;
use crate::paths;

/// Runs the bench `args` describe and prints its markdown document (and writes it to `--out`).
pub fn run(args: &BenchArgs) -> Result<Exit, Failure> {
    pipetrain::trainer::Distributed::alone("bench").map_err(Failure::of_build)?;
    paths::distinct(
        Files::new()
            .input("--compare-pytorch", args.compare_pytorch.as_deref())
            .output("--out", args.out.as_deref()),
    )?;
    paths::outputs_writable(&[("--out", &args.out)]).map_err(Failure::usage)?;
    let unwritten = crate::interrupt::unwritten("--out", args.out.as_deref());
    crate::interrupt::exit_on_signal("bench", unwritten)?;
    crate::interrupt::hold_for_test("bench");
    fits(args)?;
    if let Some(gemm) = args.gemm
        && args.device == crate::device::DeviceSpec::Cpu
    {
        return Err(Failure::usage(format!(
            "--gemm {gemm} chooses the library of the GPU rows' dense products, but --device \
             cpu runs the CPU rows, where every product is burn's matmul: drop --gemm, or bench \
             a GPU (--device cuda:0)"
        )));
    }
    let mut settings = settings(args)?;
    let document = if args.device != crate::device::DeviceSpec::Cpu {
        let device = args
            .device
            .device(args.matmul_precision)
            .map_err(Failure::usage)?;
        let peer = match (
            &args.compare_pytorch,
            bench::gpu_peers_dir(args.peers.as_deref()),
        ) {
            (Some(python), Some(dir)) => Some(GpuPeer {
                python: python.clone(),
                dir,
            }),
            (Some(_), None) => {
                eprintln!(
                    "bench: no torch_gpu.py found (give --peers DIR): PyTorch column left out"
                );
                None
            }
            (None, _) => None,
        };
        let report =
            bench::run_gpu(&settings, &device, peer.as_ref(), &mut show).map_err(failure)?;
        let gpu = bench::gpu_model().unwrap_or_else(|| args.device.to_string());
        report.render(&gpu, &command_line())
    } else {
        let peers = args
            .compare_pytorch
            .as_ref()
            .map(|python| Peers::find(python, args.peers.as_deref()).map_err(|e| peer_note(&e)));
        if let Some(Err(why)) = &peers {
            eprintln!("bench: {why}");
        }
        settings.peers = peers.as_ref().and_then(|p| p.as_ref().ok()).cloned();
        let report = bench::run(&settings, &mut show).map_err(failure)?;
        let header = Header {
            command: command_line(),
            cpu: bench::cpu_model(),
            cores: bench::cores(),
            workload: report.workload,
            reps: args.reps,
            release: !cfg!(debug_assertions),
            pytorch: peers.map(|p| p.map(|p| (p.torch.clone(), p.dir().display().to_string()))),
            mpi: report.mpi_left_out,
        };
        bench::render(&header, &report.lines)
    };
    print!("{document}");
    if let Some(path) = &args.out {
        pipetrain::engine::output::write_atomically(path, document.as_bytes())
            .map_err(|e| Failure::runtime(format!("--out {}: {e}", path.display())))?;
    }
    Ok(Exit::Success)
}

/// `train`'s limits, before anything is allocated (issue 47, class 5): the MLP, the GPT and the Llama of
/// the table must fit this machine's memory (the largest row holds 2 copies, 2 replicas, with
/// SGD's one slot per parameter), where a size of 1e8 aborted on an allocation failure.
///
/// # Errors
/// A usage failure naming the flags that size the model.
fn fits(args: &BenchArgs) -> Result<(), Failure> {
    let [mlp, gpt, llama] = bench::table_models(
        (args.width, args.hidden_layers, args.classes),
        (args.gpt_width, args.gpt_context),
        args.llama_width,
    );
    let check = |model, flags| {
        crate::footprint::check_training(model, args.batch, 1, 2.0, flags).map_err(Failure::usage)
    };
    check(&mlp, "--width, --hidden-layers, --classes or --batch")?;
    check(&gpt, "--gpt-width, --gpt-context or --batch")?;
    check(&llama, "--llama-width")
}

/// The library's settings for `args` (no peers yet; the MPI rows launch this binary), with
/// `--threads` capped at this machine's cores as `train` caps it (`--threads 1e8` panicked
/// spawning them).
///
/// # Errors
/// A usage failure naming `PIPETRAIN_GEMM` when it is set to neither `cublas` nor `burn`.
fn settings(args: &BenchArgs) -> Result<BenchSettings, Failure> {
    let (threads, warning) =
        pipetrain::trainer::threads::capped(args.threads, 1, pipetrain::trainer::threads::cores());
    if let Some(warning) = warning {
        eprintln!("{warning}");
    }
    let gemm = pipetrain::GemmLibrary::chosen(args.gemm).map_err(Failure::usage)?;
    Ok(BenchSettings {
        width: args.width,
        hidden_layers: args.hidden_layers,
        gpt_width: args.gpt_width,
        gpt_context: args.gpt_context,
        llama_width: args.llama_width,
        classes: args.classes,
        batch: args.batch,
        steps: args.steps,
        warmup: args.warmup,
        reps: args.reps,
        micro_batches: args.micro_batches.clone(),
        threads,
        only: args.only.clone(),
        peers: None,
        mpi_binary: std::env::current_exe().ok(),
        matmul_precision: args.matmul_precision,
        gpu_timing: args.timing,
        handoff: args.handoff,
        precision: args.precision,
        gemm,
    })
}

/// Progress on stderr.
fn show(progress: Progress) {
    match progress {
        Progress::MpiLeftOut(why) => eprintln!("bench: MPI rows left out: {why}"),
        Progress::Row {
            done,
            total,
            label,
            samples_per_sec,
        } => eprintln!("bench: [{done}/{total}] {label}: {samples_per_sec:.0} samples/s"),
        Progress::Peer { script, result } => match result {
            Ok(rate) => eprintln!("bench:   PyTorch {script}: {rate:.0} samples/s"),
            Err(why) => eprintln!("bench:   PyTorch {script}: {why}"),
        },
    }
}

/// The library's error as the flags name it: settings no row runs with are usage errors.
fn failure(error: Error) -> Failure {
    match &error {
        Error::Command(CommandError::BenchZero { setting }) => {
            let flag = setting.replace('_', "-");
            match *setting {
                "micro_batches" => Failure::usage(
                    "--micro-batches 0: each count must be at least 1 (e.g. 1,4,8,32)",
                ),
                _ => Failure::usage(format!("--{flag} 0: give at least 1")),
            }
        }
        Error::Command(CommandError::BenchBatchSplit {
            batch,
            replicas,
            micro_batches,
            row,
        }) => Failure::usage(format!(
            "--batch {batch} does not split into {replicas} replica(s) × {micro_batches} \
             micro-batches (row `{row}`); give a --batch that is a multiple of {}, or leave \
             {micro_batches} out of --micro-batches",
            replicas * micro_batches
        )),
        Error::Command(CommandError::BenchNoRow { .. }) => {
            Failure::usage(format!("--only {error}"))
        }
        _ => Failure::runtime(error),
    }
}

/// Why there is no PyTorch column, with the flags that fix it.
fn peer_note(error: &Error) -> String {
    match error {
        Error::Command(CommandError::PeersNoScripts { .. }) => format!("--peers {error}"),
        Error::Command(CommandError::PeersNotFound) => format!(
            "{error}; pass --peers DIR, the folder holding bench_single.py, bench_ddp.py and \
             bench_pipe.py (in this project: ../shared/peers beside the repository)"
        ),
        Error::Command(CommandError::PeersNoTorch { .. }) => format!(
            "{error} (then --compare-pytorch uses {} by default)",
            super::args::DEFAULT_PYTHON
        ),
        other => other.to_string(),
    }
}

/// `pipetrain bench ...` as this process was started (the binary's path shortened to its name).
fn command_line() -> String {
    let mut words: Vec<String> = std::env::args().collect();
    if let Some(first) = words.first_mut() {
        *first = "pipetrain".into();
    }
    words.join(" ")
}
