//! pipetrain over MPI (feature `mpi`), as a user runs it: `mpirun -np N pipetrain train ...`.
//!
//! Each test launches Open MPI's `mpirun` with the binary. The harness sets what a root user on
//! a small machine needs (`OMPI_ALLOW_RUN_AS_ROOT*`, oversubscription: 4 ranks on 2 cores), so
//! nothing is left to the caller. The MPI runs are compared with the same run in one process:
//! same checkpoint bits, `--verify` within tolerance. Tests run one at a time (a lock): four
//! ranks per test on a small machine are enough.

#![cfg(feature = "mpi")]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{TINY, max_rel_diff, scratch, success};
use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};

/// One MPI job at a time.
static JOB: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    JOB.lock().unwrap_or_else(|e| e.into_inner())
}

/// `mpirun <mpi> -np <np> pipetrain <args>`, with what root and oversubscription need.
fn mpirun(np: usize, mpi: &[&str], args: &[&str]) -> Command {
    let mut c = Command::new("mpirun");
    c.args(mpi)
        .args(["-np", &np.to_string(), env!("CARGO_BIN_EXE_pipetrain")])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    c
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Stdout of an MPI job that must succeed.
fn mpi_success(np: usize, args: &[&str]) -> String {
    let out = mpirun(np, &[], args).output().expect("mpirun runs");
    assert!(
        out.status.success(),
        "mpirun -np {np} {args:?}: {}",
        text(&out)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// What an MPI job that must exit with `code` printed (its status, stdout and stderr).
fn mpi_failure(np: usize, mpi: &[&str], args: &[&str], code: i32) -> String {
    let out = mpirun(np, mpi, args).output().expect("mpirun runs");
    assert_eq!(
        out.status.code(),
        Some(code),
        "mpirun -np {np} {args:?}: {}",
        text(&out)
    );
    text(&out)
}

/// TINY, 3 steps of 4 micro-batches, a fixed split, a checkpoint at `checkpoint`.
fn job(checkpoint: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["train"]
        .iter()
        .chain(&TINY)
        .map(|s| s.to_string())
        .collect();
    args.extend(
        [
            "--micro-batches",
            "4",
            "--steps",
            "3",
            "--optimizer",
            "adam",
            "--lr",
            "1e-2",
            "--checkpoint",
        ]
        .map(String::from),
    );
    args.push(checkpoint.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A checkpoint's tensors (raw bytes) and metadata.
type Contents = (BTreeMap<String, Vec<u8>>, BTreeMap<String, String>);

fn contents(path: &Path) -> Contents {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let tensors = file
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.data().to_vec()))
        .collect();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    (tensors, meta)
}

/// The two checkpoints hold the same tensors, bit for bit, and the same metadata.
fn assert_same_bits(a: &Path, b: &Path) {
    let (ta, ma) = contents(a);
    let (tb, mb) = contents(b);
    assert_eq!(
        ta.keys().collect::<Vec<_>>(),
        tb.keys().collect::<Vec<_>>(),
        "tensor names"
    );
    for (name, bytes) in &ta {
        assert!(bytes == &tb[name], "{name} differs between {a:?} and {b:?}");
    }
    assert_eq!(ma, mb, "metadata");
}

/// `mpirun -np <np>` with `layout` against the same run in one process: `--verify` passes and
/// the final checkpoints are equal bit for bit.
fn same_as_in_process(np: usize, layout: &[&str], mpi_only: &[&str]) {
    same_run_as_in_process(np, &|path| job(path, layout), mpi_only);
}

/// `mpirun -np <np>` of the run `run` gives for a checkpoint path against the same run in one
/// process: `--verify` passes, only rank 0 prints it, and the checkpoints are equal bit for bit.
fn same_run_as_in_process(np: usize, run: &dyn Fn(&Path) -> Vec<String>, mpi_only: &[&str]) {
    let _job = lock();
    let dir = scratch("mpi");
    let (mpi, local) = (dir.path().join("mpi.st"), dir.path().join("local.st"));
    let mut args = run(&mpi);
    args.extend(mpi_only.iter().map(|s| s.to_string()));
    args.push("--verify".into());
    let out = mpi_success(np, &refs(&args));
    assert!(max_rel_diff(&out) <= common::TOLERANCE, "{out}");
    assert!(
        out.contains(&format!("mpi: {np} processes; rank 0 runs")),
        "{out}"
    );
    assert_eq!(
        out.matches("verify: max_rel_diff=").count(),
        1,
        "only rank 0 prints:\n{out}"
    );
    success(&refs(&run(&local)));
    assert_same_bits(&mpi, &local);
}

/// `train` with `model`'s flags and `layout`, 3 steps, a checkpoint at `path`.
fn model_job(model: &[&str], layout: &[&str], path: &Path) -> Vec<String> {
    ["train", "--steps", "3"]
        .iter()
        .chain(model)
        .chain(layout)
        .map(|s| s.to_string())
        .chain(["--checkpoint".to_string(), path.display().to_string()])
        .collect()
}

#[test]
fn two_ranks_two_stages_verify_and_match_the_in_process_run() {
    same_as_in_process(2, &["--stages", "2", "--balance", "2,1"], &[]);
    // ZB-2P (issue 51): the backward split, up to 2p micro-batches held a rank.
    let zb_2p = ["--stages", "2", "--balance", "2,1", "--schedule", "zb-2p"];
    same_as_in_process(2, &zb_2p, &[]);
}

/// 2 replicas × 2 stages with ZeRO-1: one worker per rank of a 4-rank job.
const TWO_BY_TWO: [&str; 8] = [
    "--stages",
    "2",
    "--balance",
    "2,1",
    "--replicas",
    "2",
    "--zero",
    "1",
];

#[test]
fn four_ranks_two_by_two_verify_and_match_the_in_process_run() {
    same_as_in_process(4, &TWO_BY_TWO, &[]);
}

/// ZeRO-2 and ZeRO-3 over MPI (issue 50): each rank reduces its stage's gradients to their
/// owners, and at level 3 keeps only the values it owns between steps; `--verify` gathers the
/// whole model from the ranks' shares, and the checkpoint (written from the shares) equals the
/// in-process run's bit for bit.
#[test]
fn zero_two_and_three_over_four_ranks_match_the_in_process_run() {
    for level in ["2", "3"] {
        let mut flags = TWO_BY_TWO;
        flags[7] = level;
        let adam: Vec<&str> = flags
            .iter()
            .copied()
            .chain(["--optimizer", "adam"])
            .collect();
        same_as_in_process(4, &adam, &[]);
    }
}

/// Mixed precision over MPI (issue 35): bf16 activations and input gradients travel as bf16
/// between ranks (2 bytes a value), the all-reduce and the checkpoint stay fp32, and the run
/// equals the in-process bf16 run bit for bit, `--verify` against single-device bf16.
#[test]
fn bf16_over_four_ranks_matches_the_in_process_run() {
    let flags: Vec<&str> = TWO_BY_TWO
        .iter()
        .copied()
        .chain(["--precision", "bf16"])
        .collect();
    same_as_in_process(4, &flags, &[]);
}

/// Global-norm clipping over MPI: each replica's stages sum their squared norms over the
/// `STAGES` channel, with ZeRO-1's shares summed over the replicas first (issue 17, item 5).
#[test]
fn clipping_over_four_ranks_matches_the_in_process_run() {
    let clip = ["--clip-grad-norm", "0.05", "--optimizer", "adam"];
    let flags: Vec<&str> = TWO_BY_TWO.iter().chain(&clip).copied().collect();
    same_as_in_process(4, &flags, &[]);
}

/// One split rule (issue 37): a multi-process `train --stages 3` without `--balance` splits the
/// 8 layers of MLP-7x4 as a library user's `Pipeline::builder().stages(3).distributed(..)`
/// does — the library's even split, [2, 3, 3] — not as the binary's own rule did ([3, 3, 2]).
#[test]
fn a_multi_process_run_without_balance_splits_as_the_library_does() {
    use burn::prelude::*;
    use pipetrain::engine::ChannelFabric;
    use pipetrain::{Pipeline, ReplicaId, StageId, WorkerId};

    let device = Device::flex();
    let library = Pipeline::builder()
        .layers(pipetrain_models::MlpConfig::new(4, 7, 10).init(&device))
        .stages(3)
        .micro_batches(2)
        .distributed(
            (0..3)
                .map(|s| WorkerId::new(ReplicaId(0), StageId(s)))
                .collect(),
            Box::new(ChannelFabric::default()),
        )
        .build()
        .expect("the library builds an 8-layer, 3-stage pipeline");
    let balance = library.partition().balance();
    let _guard = lock();
    let out = mpi_success(
        3,
        &[
            "train",
            "--stages",
            "3",
            "--hidden-layers",
            "7",
            "--width",
            "4",
            "--steps",
            "1",
            "--batch",
            "16",
            "--micro-batches",
            "2",
        ],
    );
    assert!(
        out.contains(&format!("(balance {balance:?})")),
        "the library splits as {balance:?}; the command line printed:\n{out}"
    );
}

/// Three members per group: the sums run in rank order over MPI too (c₀ + c₁ + c₂ is not
/// c₀ + (c₁ + c₂) in floats), with each tensor owned by one of three ranks.
#[test]
fn three_replicas_over_three_ranks_give_the_same_bits() {
    same_as_in_process(
        3,
        &["--stages", "1", "--replicas", "3", "--batch", "24"],
        &[],
    );
}

/// Batch norm over MPI: replica 0's running statistics reach every replica, so the ranks'
/// checkpoint parts agree, `--verify` passes, and the checkpoint equals the in-process run's.
#[test]
fn batch_norm_over_four_ranks_matches_the_in_process_run() {
    let resnet: Vec<&str> = common::TINY_RESNET
        .iter()
        .copied()
        .chain(["--batch", "8", "--micro-batches", "2"])
        .collect();
    let layout = ["--stages", "2", "--replicas", "2"];
    same_run_as_in_process(4, &|path| model_job(&resnet, &layout, path), &[]);
}

/// Tied embeddings over MPI: the tie plan knows the stages other processes run, and the tie's
/// two halves sum their gradients across processes — between stages 0 and 2 of 3 ranks (rank 1
/// holds neither half), and in both replicas of 2 × 2.
#[test]
fn tied_embeddings_across_ranks_match_the_in_process_run() {
    let gpt = [
        "--model",
        "gpt",
        "--tie-embeddings",
        "--d-model",
        "16",
        "--layers",
        "2",
        "--heads",
        "2",
        "--vocab",
        "32",
        "--context",
        "8",
        "--batch",
        "8",
        "--micro-batches",
        "2",
    ];
    for (np, layout) in [
        (3, &["--stages", "3", "--balance", "1,1,2"][..]),
        (
            4,
            &["--stages", "2", "--replicas", "2", "--balance", "2,2"][..],
        ),
    ] {
        same_run_as_in_process(np, &|path| model_job(&gpt, layout, path), &[]);
    }
}

/// The U-Net over MPI: its long skips go point to point between processes, straight from the
/// stashing rank to the popping one and their gradients straight back — `skip0` from rank 0 to
/// rank 3 past ranks 1 and 2 (`2,1,1,2`), or both skips between neighbours (`1,2,2,1`).
#[test]
fn unet_skips_across_ranks_match_the_in_process_run() {
    let unet = [&common::TINY_UNET[..], &["--classes", "3", "--batch", "6"]].concat();
    for balance in ["2,1,1,2", "1,2,2,1"] {
        let layout = [
            "--stages",
            "4",
            "--balance",
            balance,
            "--micro-batches",
            "2",
        ];
        same_run_as_in_process(4, &|path| model_job(&unet, &layout, path), &[]);
    }
}

#[test]
fn two_workers_per_process_give_the_same_bits() {
    same_as_in_process(
        2,
        &["--stages", "2", "--balance", "2,1", "--replicas", "2"],
        &["--workers-per-process", "2"],
    );
}

/// Train flags of a 2-rank `schedule` over 4 chunks of a 5-layer MLP, on `replicas` replicas.
fn chunked<'a>(schedule: &'a str, replicas: &'a str) -> [&'a str; 10] {
    [
        "--schedule",
        schedule,
        "--stages",
        "2",
        "--hidden-layers",
        "4",
        "--balance",
        "2,1,1,1",
        "--replicas",
        replicas,
    ]
}

/// The schedules with several chunks per rank over MPI: a process runs one pipeline rank's
/// chunks (the stages the plan places on it: r and r + p under interleaved's placement, r and
/// 2p − 1 − r under the V's), each on a worker of its own taking turns inside the process, with
/// MPI between the ranks: 2 ranks of 2 chunks, on 1 replica (2 processes) and 2 (4 processes),
/// and 2 ranks per process (`--workers-per-process 2`), `--verify` passes and the checkpoint
/// equals the in-process run's bit for bit.
#[test]
fn multi_chunk_schedules_over_mpi_match_the_in_process_run() {
    for schedule in [
        "interleaved",
        "zb-v",
        "looped-bfs",
        "interleaved-zb",
        "dualpipev",
        "v-min",
        "v-half",
    ] {
        for (np, replicas) in [(2, "1"), (4, "2")] {
            same_as_in_process(np, &chunked(schedule, replicas), &[]);
        }
    }
    // Two ranks per process: each process runs a replica's 4 chunks, MPI between the replicas.
    let v = chunked("dualpipev", "2");
    same_as_in_process(2, &v, &["--workers-per-process", "2"]);
}

/// Ranks of several chunks that the processes cannot hold whole: a process count other than
/// replicas × ranks exits 2 naming the count that fits (replicas × ranks, not × chunks).
#[test]
fn multi_chunk_process_counts_that_do_not_fit_exit_2_naming_the_one_that_does() {
    let _job = lock();
    let layout = [
        "train",
        "--schedule",
        "interleaved",
        "--stages",
        "2",
        "--hidden-layers",
        "4",
        "--micro-batches",
        "4",
    ];
    for (np, replicas, expected) in [(4, "1", "mpirun -np 2"), (2, "2", "mpirun -np 4")] {
        let out = mpirun(np, &[], &layout)
            .args(["--replicas", replicas, "--batch", "16"])
            .output()
            .expect("mpirun runs");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(expected)
                && stderr.contains(&format!("{replicas} replicas × 2 stages")),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn only_rank_0_writes_outputs_and_each_rank_writes_its_trace() {
    let _job = lock();
    let dir = scratch("mpi-outputs");
    let at = |name: &str| dir.path().join(name).display().to_string();
    let mut args = job(&dir.path().join("run.st"), &["--stages", "2"]);
    args.extend([
        "--metrics".into(),
        at("metrics.csv"),
        "--profile".into(),
        at("trace.json"),
    ]);
    let out = mpi_success(2, &refs(&args));
    assert_eq!(
        out.matches("step    3/3").count(),
        1,
        "only rank 0 prints:\n{out}"
    );
    let metrics = std::fs::read_to_string(at("metrics.csv")).unwrap();
    assert_eq!(
        metrics.lines().count(),
        1 + 3,
        "a header and 3 steps, once:\n{metrics}"
    );
    for rank in 0..2 {
        let trace = std::fs::read_to_string(at(&format!("trace.rank{rank}.json"))).unwrap();
        let events: serde_json::Value = serde_json::from_str(&trace).unwrap();
        assert!(
            events.as_array().is_some_and(|e| !e.is_empty()),
            "rank {rank}'s trace"
        );
    }
    assert!(!dir.path().join("trace.json").exists());
}

#[test]
fn resume_under_mpi_reaches_the_uninterrupted_bits() {
    let _job = lock();
    let dir = scratch("mpi-resume");
    let layout = ["--stages", "2", "--balance", "2,1", "--replicas", "2"];
    let (whole, part) = (dir.path().join("whole.st"), dir.path().join("part.st"));
    let mut first = job(&part, &layout);
    first.extend(["--steps".into(), "1".into()]);
    mpi_success(4, &refs(&first));
    let mut rest = job(&part, &layout);
    rest.extend(["--resume".into(), part.display().to_string()]);
    let out = mpi_success(4, &refs(&rest));
    assert!(out.contains("step    3/3"), "{out}");
    mpi_success(4, &refs(&job(&whole, &layout)));
    assert_same_bits(&part, &whole);
}

/// TINY for `steps` steps with `extra`, and no checkpoint.
fn plain_job(steps: &str, extra: &[&str]) -> Vec<String> {
    ["train"]
        .iter()
        .chain(&TINY)
        .chain(&["--steps", steps])
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

/// A replica whose weights leave replica 0's (the test hook `PIPETRAIN_TEST_DRIFT` shifts them
/// after a step) is found by `--verify` over MPI as in one process: exit 3, naming the replica
/// and the step. Per step with one replica per rank; end to end with two replicas in rank 1,
/// where replica 3 drifts from replica 2 beside it in the same process.
#[test]
fn a_replica_that_drifts_under_mpi_exits_3_naming_it_and_the_step() {
    let _job = lock();
    for (layout, drift, named) in [
        (
            &["--stages", "1", "--replicas", "2"][..],
            "1:2",
            "replica 1 holds different weights than replica 0 (from step 2 on)",
        ),
        (
            &[
                "--stages",
                "1",
                "--replicas",
                "4",
                "--micro-batches",
                "2",
                "--workers-per-process",
                "2",
                "--end-to-end",
            ],
            "3:1",
            "replica 3 holds different weights than replica 0 (from step 1 on)",
        ),
    ] {
        let args = plain_job("3", &[layout, &["--verify"][..]].concat());
        let hook = format!("PIPETRAIN_TEST_DRIFT={drift}");
        let all = mpi_failure(2, &["-x", &hook], &refs(&args), 3);
        assert!(all.contains(named), "{all}");
    }
}

/// A checkpoint is one file merged from every rank's part: when two ranks hold different
/// values of a weight, the merge is refused naming both ranks, and no checkpoint is written.
#[test]
fn a_checkpoint_of_ranks_that_disagree_is_refused_naming_them() {
    let _job = lock();
    let dir = scratch("mpi-drift-checkpoint");
    let path = dir.path().join("run.st");
    let mut args = plain_job("2", &["--stages", "1", "--replicas", "2", "--checkpoint"]);
    args.push(path.display().to_string());
    let all = mpi_failure(2, &["-x", "PIPETRAIN_TEST_DRIFT=1:1"], &refs(&args), 1);
    assert!(all.contains("ranks 0 and 1 hold different values"), "{all}");
    assert!(
        !path.exists(),
        "no checkpoint of disagreeing ranks is written"
    );
}

#[test]
fn launcher_variables_that_disagree_with_mpi_exit_2() {
    let _job = lock();
    for (variable, value) in [("SLURM_NTASKS", "3"), ("RANK", "7")] {
        let assignment = format!("{variable}={value}");
        let out = mpirun(
            4,
            &["-x", &assignment],
            &["train", "--stages", "2", "--replicas", "2"],
        )
        .args(TINY)
        .output()
        .expect("mpirun runs");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{assignment} disagrees with MPI")),
            "{stderr}"
        );
    }
    // And a world the processes cannot hold.
    let out = mpirun(3, &[], &["train", "--stages", "2", "--replicas", "2"])
        .args(TINY)
        .output()
        .expect("mpirun runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("mpirun -np 4"),
        "{}",
        text(&out)
    );
}

/// A launcher's world that MPI, started, does not see (issue 48 item 5: PMIx was in no test):
/// `mpirun -np 1` with PMIx's (Open MPI's own launcher sets `PMIX_RANK`) or PMI's world size
/// of 2 is refused naming the variables, exit 2, where each process would train alone (as a
/// world MPI does not see, or as launchers whose variables disagree).
#[test]
fn a_pmix_or_pmi_world_that_mpi_does_not_see_is_refused() {
    let _job = lock();
    for (assignment, named) in [
        ("PMIX_SIZE=2", "PMIX_SIZE=2 PMIX_RANK=0: "),
        ("PMI_SIZE=2", "PMI_SIZE=2: "),
    ] {
        let out = mpirun(1, &["-x", assignment], &["train"])
            .args(TINY)
            .output()
            .expect("mpirun runs");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Refused either as a world MPI does not see, or (issue 47: mpirun sets its own
        // OMPI_COMM_WORLD_SIZE=1 beside it) as launchers' variables that disagree; both name
        // the launcher's variable and a remedy.
        let unseen = stderr.contains(named)
            && stderr.contains("MPI, started, sees this process alone")
            && stderr.contains("srun --mpi=pmix -n 2");
        let disagree = stderr.contains(assignment)
            && stderr.contains("disagree on the number of processes")
            && stderr.contains("unset the variables of the launcher that did not start it");
        assert!(unseen || disagree, "{assignment}: {stderr}");
    }
}

/// Every rank initialises another model (the test hook `PIPETRAIN_TEST_SEED_PER_RANK` seeds
/// rank r with `--seed` + r; the data keeps `--seed`): the run still equals, bit for bit, the
/// in-process run from rank 0's init, which only rank 0's broadcast gives the others.
#[test]
fn ranks_that_initialise_differently_train_from_rank_0s_weights() {
    let _job = lock();
    let dir = scratch("mpi-seeds");
    let (mpi, local) = (dir.path().join("mpi.st"), dir.path().join("local.st"));
    let layout = ["--stages", "2", "--balance", "2,1", "--replicas", "2"];
    let out = mpirun(
        4,
        &["-x", "PIPETRAIN_TEST_SEED_PER_RANK=1"],
        &refs(&job(&mpi, &layout)),
    )
    .output()
    .expect("mpirun runs");
    assert!(out.status.success(), "{}", text(&out));
    success(&refs(&job(&local, &layout)));
    assert_same_bits(&mpi, &local);
}

/// `mpirun -np 1 pipetrain <rank0> : -np 1 pipetrain <rank1>`, run to its end.
fn mpmd(rank0: &[&str], rank1: &[&str]) -> Output {
    let binary = env!("CARGO_BIN_EXE_pipetrain");
    Command::new("mpirun")
        .args(["-np", "1", binary])
        .args(rank0)
        .args([":", "-np", "1", binary])
        .args(rank1)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .expect("mpirun runs")
}

/// An MPMD command line whose processes get different training flags is refused on every
/// process, naming each differing flag with both values (exit 2), before anything trains.
#[test]
fn mpmd_ranks_with_other_training_flags_exit_2_naming_them() {
    let _job = lock();
    // An output flag may differ between ranks (only rank 0 writes it): not a disagreement.
    let dir = scratch("mpmd-metrics");
    let metrics = dir.path().join("m.csv");
    let metrics = metrics.to_str().unwrap();
    let base = ["train", "--stages", "2", "--balance", "2,1"];
    let rank0: Vec<&str> = base
        .iter()
        .chain(&TINY)
        .chain(&["--lr", "0.01"])
        .copied()
        .collect();
    let rank1: Vec<&str> = base
        .iter()
        .chain(&TINY)
        .chain(&["--lr", "0.02", "--schedule", "gpipe", "--metrics", metrics])
        .copied()
        .collect();
    let out = mpmd(&rank0, &rank1);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rank 1 trains with other settings than rank 0: ")
            && stderr.contains("--lr 0.02 (rank 0: 0.01)")
            && stderr.contains("--schedule Gpipe (rank 0: OneFOneB)"),
        "{}",
        text(&out)
    );
    assert!(
        !stderr.contains("--metrics"),
        "a per-process flag may differ: {stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("step "),
        "{}",
        text(&out)
    );
}

/// Flags `docs/mpi.md` lets differ between processes (`--threads`, `--metrics`, `--device`,
/// `--comm-timeout`, ...) given on one rank only are no disagreement (issue 47, class 6): the
/// run was refused, its message naming the internal record of the flags given, not a flag.
#[test]
fn mpmd_ranks_may_give_per_process_flags_on_one_rank_only() {
    let _job = lock();
    let dir = scratch("mpmd-per-process");
    let metrics = dir.path().join("m.csv");
    let base = ["train", "--stages", "2", "--balance", "2,1"];
    let rank0: Vec<&str> = base.iter().chain(&TINY).copied().collect();
    let per_process = [
        "--threads",
        "1",
        "--device",
        "cpu",
        "--comm-timeout",
        "60",
        "--metrics",
        metrics.to_str().unwrap(),
    ];
    let rank1: Vec<&str> = rank0.iter().chain(&per_process).copied().collect();
    let out = mpmd(&rank0, &rank1);
    assert!(out.status.success(), "{}", text(&out));
}

/// The pid of the rank-`rank` process whose command line mentions `marker`.
fn rank_pid(rank: usize, marker: &str) -> Option<u32> {
    let wanted = format!("OMPI_COMM_WORLD_RANK={rank}");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(marker)
            || !String::from_utf8_lossy(&cmdline).starts_with(env!("CARGO_BIN_EXE_pipetrain"))
        {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// The layout of the kill test's [`endless_job`]: 4 ranks.
const ENDLESS: [&str; 6] = ["--stages", "2", "--balance", "2,1", "--replicas", "2"];

/// Starts an `np`-rank job of `layout` for practically endless steps with `--comm-timeout
/// timeout`, writing a checkpoint every step in `dir`, and waits until it has written one (it is
/// then training): mpirun's child, the checkpoint's path and rank `rank`'s pid.
fn endless_job(
    dir: &Path,
    (np, layout): (usize, &[&str]),
    timeout: u64,
    rank: usize,
) -> (std::process::Child, PathBuf, u32) {
    let checkpoint = dir.join("endless.st");
    let mut args = job(&checkpoint, layout);
    args.extend(
        [
            "--steps",
            "1000000",
            "--checkpoint-every",
            "1",
            "--comm-timeout",
            &timeout.to_string(),
        ]
        .map(String::from),
    );
    let child = mpirun(np, &[], &refs(&args))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts");
    let started = Instant::now();
    while !checkpoint.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no checkpoint written"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = rank_pid(rank, &checkpoint.display().to_string()).expect("the rank runs");
    (child, checkpoint, pid)
}

/// What this proves: a dead rank ends the whole job with a non-zero exit, and the last
/// checkpoint written before it is whole (it loads and training goes on from it). It does not
/// prove pipetrain's own detection: after `kill -9` mpirun sees the process die, ends the job
/// and names "rank 2" itself. [`a_stopped_rank_ends_the_job_with_the_comm_timeout`] covers the
/// rank that hangs without dying, which only `--comm-timeout` catches.
#[test]
fn a_rank_killed_mid_run_ends_the_job_and_the_last_checkpoint_loads() {
    let _job = lock();
    let dir = scratch("mpi-kill");
    let (child, checkpoint, pid) = endless_job(dir.path(), (4, &ENDLESS), 10, 2);
    let (marker, layout) = (checkpoint.display().to_string(), ENDLESS);
    let killed = Instant::now();
    let status = Command::new("kill").args(["-9", &pid.to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "kill -9 {pid}");
    let deadline = Duration::from_secs(10 + 20);
    let out = wait_within(child, (killed, deadline), None, "rank 2 killed");
    assert!(!out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("rank 2"), "the failed rank is named: {all}");
    // The last checkpoint is whole: it loads, and training goes on from it in one process.
    let (_, meta) = contents(&checkpoint);
    let step: u64 = serde_json::from_str::<serde_json::Value>(&meta["pipetrain.progress"]).unwrap()
        ["step"]
        .as_u64()
        .unwrap();
    let mut resume = job(&dir.path().join("after.st"), &layout);
    resume.extend([
        "--resume".into(),
        checkpoint.display().to_string(),
        "--steps".into(),
        (step + 1).to_string(),
    ]);
    let out = success(&refs(&resume));
    assert!(
        out.contains(&format!("resumed: {marker} at step {step}")),
        "{out}"
    );
}

/// A rank that hangs without dying (SIGSTOP: mpirun sees nothing wrong) is found by pipetrain's
/// own `--comm-timeout`: the surviving rank ends with pipetrain's error naming the silent rank
/// and the timeout, and the job exits non-zero within the timeout plus a margin. Without the
/// timeout path the job would hang until the test's guard kills it.
///
/// Two ranks, so the survivor waits on the silent rank itself. With more, a survivor can wait on
/// a rank that is alive but itself waiting on the silent one, and whichever wait times out first
/// names its own peer: at 2 × 2 with rank 2 stopped, rank 1's all-reduce timed out first once
/// in three suite runs, naming rank 3 ("member 1 (MPI rank 3) … sent nothing for 5s"), and the
/// job ended there. pipetrain names the peer a wait was on, not the root of a chain of waits.
#[test]
fn a_stopped_rank_ends_the_job_with_the_comm_timeout() {
    let _job = lock();
    let dir = scratch("mpi-stop");
    let timeout = 5;
    let layout = ["--stages", "2", "--balance", "2,1"];
    let (child, _, pid) = endless_job(dir.path(), (2, &layout), timeout, 1);
    let stopped = Instant::now();
    let status = Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status();
    assert!(status.is_ok_and(|s| s.success()), "kill -STOP {pid}");
    // The margin is a guard against a hang, not a measurement: the survivors' own error needs
    // the timeout, then a moment to tell mpirun, which then ends every rank.
    let deadline = Duration::from_secs(timeout + 60);
    let out = wait_within(child, (stopped, deadline), Some(pid), "rank 1 stopped");
    let ended = stopped.elapsed();
    // mpirun kills its ranks, stopped or not; make sure of it.
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    // Whichever wait notices first words it: a worker's receive ("… (MPI rank 1) sent nothing
    // for 5s …") or the communication thread's send ("rank 1 failed: could not send … for
    // 5 s (--comm-timeout) …"). mpirun's own messages never name the flag.
    let ours = all
        .lines()
        .find(|l| {
            l.starts_with("error: rank ")
                && l.contains("rank 1")
                && l.contains("--comm-timeout")
                && (l.contains(&format!("{timeout}s")) || l.contains(&format!("{timeout} s")))
        })
        .unwrap_or_else(|| {
            panic!("no pipetrain error naming the silent rank 1 and the {timeout} s timeout: {all}")
        });
    assert!(
        !ours.starts_with("error: rank 1 "),
        "a survivor reports it: {ours}"
    );
    // With more ranks the rank named may be one that waits on the stuck one: the error says so.
    assert!(
        ours.contains("waiting on a rank that is"),
        "the error allows for a chain of waits: {ours}"
    );
    assert!(
        ended >= Duration::from_secs(timeout),
        "ended {ended:?} after the stop, before the {timeout} s timeout could pass: {all}"
    );
}

/// Writes a `tensors:` data file of 32 rows of 4 features and labels in 0..3 at `path`; with
/// `nan`, input row 20 holds a NaN (refused at load).
fn data_file(path: &Path, nan: bool) {
    let mut x: Vec<f32> = (0..32 * 4).map(|i| (i % 5) as f32 / 5.0).collect();
    if nan {
        x[20 * 4 + 1] = f32::NAN;
    }
    let x: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let y: Vec<u8> = (0..32i64).flat_map(|i| (i % 3).to_le_bytes()).collect();
    let views = [
        ("x", TensorView::new(Dtype::F32, vec![32, 4], &x).unwrap()),
        ("y", TensorView::new(Dtype::I64, vec![32], &y).unwrap()),
    ];
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// Waits for `child` until `deadline` after `since`. Past it (a hang: the margin is a guard,
/// not a measurement) kills it and `pid` (a rank mpirun may not end) and panics, saying `what`.
fn wait_within(
    mut child: std::process::Child,
    (since, deadline): (Instant, Duration),
    pid: Option<u32>,
    what: &str,
) -> Output {
    while child.try_wait().expect("waits").is_none() {
        if since.elapsed() > deadline {
            if let Some(pid) = pid {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what}: the job still runs after {deadline:?}: {}",
                text(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().expect("output")
}

/// A rank that fails with an error of its own (bad data on rank 1 only: each rank reads
/// `--data tensors:data.safetensors` in its own working directory, and rank 1's holds a NaN)
/// tells the others: every rank ends within the communication timeout, and rank 0 names rank 1
/// and its error, not a timeout. The failing rank waits for rank 0 to say it ended before it
/// exits: mpirun ends the whole job as soon as one process exits with an error.
#[test]
fn a_rank_that_fails_on_its_own_is_named_with_its_error_by_the_others() {
    let _job = lock();
    let dir = scratch("mpi-bad-rank");
    let (good, bad) = (dir.path().join("good"), dir.path().join("bad"));
    for (at, nan) in [(&good, false), (&bad, true)] {
        std::fs::create_dir(at).unwrap();
        data_file(&at.join("data.safetensors"), nan);
    }
    let out = in_own_directories([&good, &bad], "bad data");
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    let own = "--data tensors:data.safetensors: input row 20 holds NaN";
    assert!(
        all.lines()
            .any(|l| l.starts_with("error: rank 1 of 2") && l.contains(own)),
        "rank 1 reports its own error: {all}"
    );
    assert!(
        all.lines().any(|l| l.starts_with("error: rank 0 of 2")
            && l.contains("rank 1 failed: rank 1 of 2")
            && l.contains(own)),
        "rank 0 names rank 1 and its error: {all}"
    );
    assert!(
        !all.contains("sent nothing"),
        "not found by the timeout: {all}"
    );
}

/// `mpirun -np 1 -wdir A pipetrain ... : -np 1 -wdir B pipetrain ...` of a 2-replica run on
/// `--data tensors:data.safetensors` (each rank reads its own directory's), waited for within
/// its communication timeout and a margin (`what` names it if it hangs).
fn in_own_directories(dirs: [&Path; 2], what: &str) -> Output {
    let binary = env!("CARGO_BIN_EXE_pipetrain");
    let args: Vec<&str> = "train --data tensors:data.safetensors --classes 3 --width 8 \
        --hidden-layers 1 --batch 8 --micro-batches 2 --steps 3 --stages 1 --replicas 2 \
        --comm-timeout 20"
        .split_whitespace()
        .collect();
    let wdir = |d: &Path| {
        [
            "-np".to_string(),
            "1".into(),
            "-wdir".into(),
            d.display().to_string(),
        ]
    };
    let started = Instant::now();
    let child = Command::new("mpirun")
        .args(wdir(dirs[0]))
        .arg(binary)
        .args(&args)
        .arg(":")
        .args(wdir(dirs[1]))
        .arg(binary)
        .args(&args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts");
    wait_within(child, (started, Duration::from_secs(20 + 40)), None, what)
}

/// Per-node copies of the data that differ (issue 47, class 2): each rank trained on its own
/// with rc 0, and only `--verify` noticed. Every rank now refuses the run at the start, naming
/// the rank and both contents.
#[test]
fn ranks_whose_copies_of_the_data_differ_are_refused_at_the_start() {
    let _job = lock();
    let dir = scratch("mpi-other-data");
    let (one, other) = (dir.path().join("one"), dir.path().join("other"));
    for at in [&one, &other] {
        std::fs::create_dir(at).unwrap();
        data_file(&at.join("data.safetensors"), false);
    }
    // The same shape, one value apart.
    let file = other.join("data.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 8;
    bytes[last] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let out = in_own_directories([&one, &other], "other data");
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("rank 1 reads other data than rank 0: tensors, "),
        "{all}"
    );
    assert!(!all.contains("step "), "refused before training: {all}");
}

/// Two network namespaces joined by a veth pair stand in for two hosts; `mpirun` runs in the
/// first and starts the second's ranks through an rsh agent that runs `ip netns exec`.
struct Hosts {
    dir: PathBuf,
    names: [String; 2],
}

impl Hosts {
    fn create(dir: &Path) -> Result<Hosts, String> {
        let tag = std::process::id() % 10_000;
        let names = [format!("ptmpi_a{tag}"), format!("ptmpi_b{tag}")];
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("`ip` cannot run: {e}"))?;
            match out.status.success() {
                true => Ok(()),
                false => Err(format!(
                    "`ip {}` failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
            }
        };
        ip(&["netns", "add", &names[0]])?;
        let hosts = Hosts {
            dir: dir.to_path_buf(),
            names: names.clone(),
        };
        let (a, b) = (&names[0], &names[1]);
        let (va, vb) = (format!("pv{tag}a"), format!("pv{tag}b"));
        ip(&["netns", "add", b])?;
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        ip(&["link", "set", &va, "netns", a])?;
        ip(&["link", "set", &vb, "netns", b])?;
        ip(&["-n", a, "addr", "add", "10.79.0.1/24", "dev", &va])?;
        ip(&["-n", b, "addr", "add", "10.79.0.2/24", "dev", &vb])?;
        for (ns, dev) in [(a, &va), (b, &vb)] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        let rsh = format!(
            "#!/bin/sh\n# mpirun's rsh agent: host address -> network namespace.\n\
             while [ $# -gt 0 ]; do case \"$1\" in -*) shift;; *) break;; esac; done\n\
             host=\"$1\"; shift\n\
             case \"$host\" in 10.79.0.1) ns={a};; 10.79.0.2) ns={b};; *) exit 1;; esac\n\
             exec ip netns exec \"$ns\" /bin/sh -c \"$*\"\n"
        );
        let agent = dir.join("ns-rsh");
        std::fs::write(&agent, rsh).map_err(|e| e.to_string())?;
        Command::new("chmod")
            .args(["+x", &agent.display().to_string()])
            .status()
            .map_err(|e| e.to_string())?;
        std::fs::write(
            dir.join("hostfile"),
            "10.79.0.1 slots=2\n10.79.0.2 slots=2\n",
        )
        .map_err(|e| e.to_string())?;
        Ok(hosts)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Without `CI` the two-host test may skip where namespaces cannot be made (a plain user);
/// under `CI=true` it must not.
#[test]
fn two_by_two_across_two_hosts_verifies() {
    let _job = lock();
    let dir = scratch("mpi-hosts");
    let hosts = match Hosts::create(dir.path()) {
        Ok(hosts) => hosts,
        Err(why) => {
            // CI runs as root, where namespaces work: there a failure to create them is a
            // broken host, not a reason to pass.
            if let Some(ci) = common::ci() {
                panic!(
                    "CI={ci}: network namespaces cannot be created ({why}); this test must run \
                     in CI (as root, with `ip` from iproute2), so it fails instead of skipping"
                );
            }
            eprintln!("skipped: network namespaces cannot be created here ({why})");
            return;
        }
    };
    let checkpoint = dir.path().join("hosts.st");
    let mut args = job(
        &checkpoint,
        &["--stages", "2", "--balance", "2,1", "--replicas", "2"],
    );
    args.push("--verify".into());
    let hostfile = hosts.dir.join("hostfile").display().to_string();
    let agent = hosts.dir.join("ns-rsh").display().to_string();
    let mpi = [
        "--hostfile",
        &hostfile,
        "--mca",
        "plm_rsh_agent",
        &agent,
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "self,tcp",
        "--mca",
        "btl_tcp_if_include",
        "10.79.0.0/24",
        "--mca",
        "oob_tcp_if_include",
        "10.79.0.0/24",
    ];
    let command = mpirun(4, &mpi, &refs(&args));
    let program = command.get_program().to_owned();
    let rest: Vec<_> = command.get_args().map(|a| a.to_owned()).collect();
    let mut inside = Command::new("ip");
    inside
        .args(["netns", "exec", &hosts.names[0]])
        .arg(program)
        .args(rest);
    for (k, v) in command.get_envs() {
        if let Some(v) = v {
            inside.env(k, v);
        }
    }
    let out = inside.output().expect("ip netns exec mpirun runs");
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(max_rel_diff(&stdout) <= common::TOLERANCE);
    assert!(checkpoint.exists());
}

#[test]
fn a_per_rank_name_that_is_the_data_file_is_refused_on_every_rank_before_training() {
    // Issue 47, class 1: `--profile dd.st` is written as `dd.rank1.st` by rank 1, a name that
    // was not checked: it overwrote the run's own data file `tensors:dd.rank1.st`.
    let _job = lock();
    let dir = scratch("mpi-rank-names");
    let data = dir.path().join("dd.rank1.st");
    data_file(&data, false);
    let before = std::fs::read(&data).unwrap();
    let spec = format!("tensors:{}", data.display());
    let profile = dir.path().join("dd.st").display().to_string();
    let extra = [
        "--stages",
        "2",
        "--data",
        &spec,
        "--classes",
        "3",
        "--profile",
        &profile,
    ];
    let args = job(&dir.path().join("run.st"), &extra);
    let out = mpi_failure(2, &[], &refs(&args), 2);
    assert!(
        out.contains("--profile (rank 1)") && out.contains(&format!("--data {}", data.display())),
        "{out}"
    );
    assert!(!out.contains("step "), "refused before training: {out}");
    assert_eq!(
        std::fs::read(&data).unwrap(),
        before,
        "the data left as it was"
    );
}

/// Under MPMD, a peer that exits 0 without joining (`: -np 1 pipetrain plan`) kept rank 0
/// waiting far past `--comm-timeout` (issue 47, class 4): MPI's start waits for every process
/// of the launch. The world's formation is bounded by the same timeout now.
#[test]
fn a_peer_that_never_joins_ends_the_run_within_the_timeout() {
    let _job = lock();
    let binary = env!("CARGO_BIN_EXE_pipetrain");
    let train: Vec<&str> = [
        &["train", "--stages", "2", "--comm-timeout", "5"][..],
        &TINY,
    ]
    .concat();
    let started = Instant::now();
    let child = Command::new("mpirun")
        .args(["-np", "1", binary])
        .args(&train)
        .args([":", "-np", "1", binary, "plan"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun starts");
    let out = wait_within(
        child,
        (started, Duration::from_secs(5 + 40)),
        None,
        "a peer",
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    // Rank 0's own error, unless mpirun saw the peer end without MPI first and ended the job.
    assert!(
        all.contains("MPI did not start within 5 s") || all.contains("did not call \"init\""),
        "{all}"
    );
}

/// A held MPI job for the signal tests (issue 47): `mpirun -np 2` of a 2-stage `train` for
/// practically endless steps, writing the checkpoint, the metrics and the plot, with step 3 held
/// open on every rank by the test hook (`PIPETRAIN_TEST_HOLD_STEP`) until [`HeldJob::release`].
struct HeldJob {
    child: std::process::Child,
    /// Stderr of mpirun and every rank, line by line, as it comes.
    lines: std::sync::mpsc::Receiver<String>,
    /// Every line read so far.
    seen: String,
    dir: tempfile::TempDir,
}

/// How long a held job may take to say what it was asked to: a guard against a hang.
const HANG: Duration = Duration::from_secs(120);

impl HeldJob {
    /// Starts the job with `mpi` given to mpirun, and waits until both ranks hold step 3.
    fn start(name: &str, mpi: &[&str]) -> HeldJob {
        use std::io::{BufRead, BufReader};
        let dir = scratch(name);
        let hold = format!("3:{}", dir.path().join("release").display());
        let mpi: Vec<&str> = ["-x", "PIPETRAIN_TEST_HOLD_STEP"]
            .iter()
            .chain(mpi)
            .copied()
            .collect();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let mut child = mpirun(2, &mpi, &["train"])
            .args(["--width", "16", "--hidden-layers", "2", "--batch", "16"])
            .args([
                "--stages",
                "2",
                "--steps",
                "1000000",
                "--comm-timeout",
                "20",
            ])
            .args(["--checkpoint", &path("ck.safetensors")])
            .args(["--metrics", &path("m.csv"), "--plot", &path("loss.png")])
            .env("PIPETRAIN_TEST_HOLD_STEP", &hold)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mpirun runs");
        let (send, lines) = std::sync::mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut job = HeldJob {
            child,
            lines,
            seen: String::new(),
            dir,
        };
        job.wait_for(Some("test hook: step 3 held until"), 2);
        job
    }

    /// A file of the job's directory.
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Reads stderr until `what` was seen `count` times (`None`: until the job's end).
    fn wait_for(&mut self, what: Option<&str>, count: usize) {
        use std::sync::mpsc::RecvTimeoutError;
        loop {
            if what.is_some_and(|w| self.seen.matches(w).count() >= count) {
                return;
            }
            match self.lines.recv_timeout(HANG) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!(
                        "no {count} × {what:?} within {HANG:?}; stderr:\n{}",
                        self.seen
                    );
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Sends `signal` (`USR1`, `TERM`) to `pid`.
    fn kill(signal: &str, pid: u32) {
        let kill = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
    }

    /// Ends the hold: the ranks go on.
    fn release(&self) {
        std::fs::write(self.path("release"), b"go").unwrap();
    }

    /// Waits for the job's end: mpirun's exit code and all of stderr.
    fn exit(mut self) -> (Option<i32>, String, tempfile::TempDir) {
        self.wait_for(None, 0);
        let status = self.child.wait().unwrap();
        (status.code(), self.seen, self.dir)
    }
}

/// What every rank stopped after `step` by `signal` leaves: the leader's one line, the
/// checkpoint of that step (it loads), the metrics of every step and the plot.
fn saved_after(step: u64, signal: &str, seen: &str, dir: &Path) {
    let ck = dir.join("ck.safetensors");
    assert_eq!(
        seen.matches(&format!("{signal}: stopped after step {step} of 1000000"))
            .count(),
        1,
        "the leader says once that every rank stopped after step {step}:\n{seen}"
    );
    assert!(
        seen.contains(&format!("checkpoint {} (step {step})", ck.display())),
        "{seen}"
    );
    let saved = pipetrain::Checkpoint::read(&ck).expect("the checkpoint loads");
    assert_eq!(saved.progress().step, step, "{seen}");
    let rows = std::fs::read_to_string(dir.join("m.csv")).unwrap();
    assert_eq!(
        rows.lines().count() as u64,
        step + 1,
        "a header and a row per step:\n{rows}"
    );
    assert!(dir.join("loss.png").is_file(), "the plot: {seen}");
}

/// SIGUSR1 to `mpirun` (issue 47), the graceful stop of a multi-process run: Open MPI 4
/// forwards SIGUSR1 to every rank at once and kills nothing (SIGINT and SIGTERM it turns into a
/// kill, see [`sigterm_to_mpirun_warns_and_saves_within_the_kill_grace`]). Every rank stops
/// after the step the signal reached and the run writes the checkpoint, the metrics and the
/// plot, as one process does; mpirun exits 138.
#[test]
fn sigusr1_to_mpirun_stops_every_rank_after_one_step_and_saves_it() {
    usr1_stops_every_rank("mpi-sigusr1", |job| job.child.id(), 2);
}

/// Holds a job at step 3, sends SIGUSR1 to the pid `target` names and waits until `ranks`
/// ranks took it; then every rank stops after step 3, saving it, and mpirun exits 138.
fn usr1_stops_every_rank(name: &str, target: impl Fn(&HeldJob) -> u32, ranks: usize) {
    let _job = lock();
    let mut job = HeldJob::start(name, &[]);
    HeldJob::kill("USR1", target(&job));
    job.wait_for(Some("test hook: SIGUSR1 arrived during step 3"), ranks);
    job.release();
    let (code, seen, dir) = job.exit();
    assert_eq!(code, Some(138), "{seen}");
    saved_after(3, "SIGUSR1", &seen, dir.path());
}

/// A signal that reaches one rank only (a scheduler or a user signalling one process): the
/// ranks agree at the step's end on it (`Processes::agree_stop`) and all stop after that
/// step, saving it. Rank 1 gets it, the leader, which writes the outputs, does not. Without the
/// agreement rank 1 alone stopped and waited to save while rank 0 went on: the job failed
/// with nothing saved.
#[test]
fn a_signal_to_one_rank_stops_every_rank_after_the_same_step() {
    let rank_1 = |job: &HeldJob| {
        let marker = job.path("ck.safetensors").display().to_string();
        rank_pid(1, &marker).expect("rank 1 runs")
    };
    usr1_stops_every_rank("mpi-one-rank-signal", rank_1, 1);
}

/// SIGTERM (or Ctrl-C's SIGINT) to `mpirun` (issue 47): Open MPI 4.1 does not forward it; it
/// kills the job: SIGCONT to every rank, `odls_base_sigkill_timeout` seconds, SIGTERM, as long
/// again, SIGKILL — and mpirun forwards no output meanwhile. The ranks then stop together after
/// the step they are in and save it, if that fits in the grace (5 s here, the documented remedy;
/// 1 s by default), and the leader says at once what mpirun is about to do and how to stop
/// gracefully instead.
#[test]
fn sigterm_to_mpirun_warns_and_saves_within_the_kill_grace() {
    let _job = lock();
    let job = HeldJob::start("mpi-sigterm", &["--mca", "odls_base_sigkill_timeout", "5"]);
    HeldJob::kill("TERM", job.child.id());
    // mpirun's SIGTERM reaches the ranks 5 s from now: the tiny steps go on until then.
    job.release();
    let (_, seen, dir) = job.exit();
    assert!(
        seen.contains(
            "SIGTERM under Open MPI's mpirun: mpirun sends every rank SIGTERM and kills it 5 s later"
        ) && seen.contains("kill -USR1 <mpirun's pid>"),
        "{seen}"
    );
    let step: u64 = seen
        .split("SIGTERM: stopped after step ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the leader says where every rank stopped:\n{seen}"));
    assert!(step >= 3, "{seen}");
    saved_after(step, "SIGTERM", &seen, dir.path());
}
