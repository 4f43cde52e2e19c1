//! The table's rows, in order: data parallel, model parallel, pipelined, the schedules beyond
//! 1F1B (MLP and GPT), hybrid, MPI, ZeRO-1, the ZeRO levels and the backward comparisons.

use crate::{Backward, ScheduleKind};

use super::configs::{BenchModel, Row, Shape, over_mpi, peer, pipeline, with_backward};

/// The table's configurations for `ms` micro-batch counts, in order (single-device and
/// independent-worker reference rows are added by the command where limits need them); with
/// `mpi`, the data-parallel and hybrid rows again across processes.
pub fn rows(ms: &[usize], threads: usize, mpi: bool) -> Vec<Row> {
    let t = threads.to_string();
    let mut rows = Vec::new();
    // PyTorch's best single process on this machine uses both cores: so may ours.
    if threads == 1 {
        let mut shape = pipeline(1, 1, 1, ScheduleKind::GPipe, 0);
        if let Shape::Pipeline { threads, .. } = &mut shape {
            *threads = Some(2);
        }
        rows.push(Row {
            group: "single device",
            name: "1 worker, 2 threads, m=1".into(),
            shape,
            peer: Some(peer(
                "bench_single.py",
                "one process, gradients accumulated over m micro-batches",
                &["--threads".into(), "2".into(), "--m".into(), "1".into()],
            )),
        });
    }
    rows.extend([
        Row {
            group: "data parallel",
            name: "2 replicas x 1 stage, m=1".into(),
            shape: pipeline(2, 1, 1, ScheduleKind::OneFOneB, 0),
            peer: Some(peer(
                "bench_ddp.py",
                "DistributedDataParallel, 2 gloo ranks",
                &["--threads".into(), t.clone()],
            )),
        },
        Row {
            group: "model parallel",
            name: "2 stages, m=1".into(),
            shape: pipeline(1, 2, 1, ScheduleKind::GPipe, 0),
            peer: Some(peer(
                "bench_pipe.py",
                "torch.distributed.pipelining, 2 ranks",
                &[
                    "--schedule".into(),
                    "gpipe".into(),
                    "--m".into(),
                    "1".into(),
                    "--threads".into(),
                    t.clone(),
                ],
            )),
        },
    ]);
    let schedules = [
        (ScheduleKind::GPipe, "GPipe", "gpipe"),
        (ScheduleKind::OneFOneB, "1F1B", "1f1b"),
    ];
    for (schedule, name, flag) in schedules {
        for &m in ms {
            if m == 1 && schedule == ScheduleKind::GPipe {
                continue; // the model-parallel row
            }
            // torch.distributed.pipelining's 1F1B needs at least as many micro-batches as
            // stages; it refuses m = 1.
            let comparable = schedule == ScheduleKind::GPipe || m >= 2;
            rows.push(Row {
                group: "pipelined",
                name: format!("{name}, 2 stages, m={m}"),
                shape: pipeline(1, 2, m, schedule, 0),
                peer: comparable.then(|| {
                    peer(
                        "bench_pipe.py",
                        "torch.distributed.pipelining, 2 ranks",
                        &[
                            "--schedule".into(),
                            flag.into(),
                            "--m".into(),
                            m.to_string(),
                            "--threads".into(),
                            t.clone(),
                        ],
                    )
                }),
            });
        }
    }
    // The schedules beyond 1F1B at m = 8 (or the largest count given): zero bubble,
    // interleaved, looped BFS and DualPipeV on 2 ranks; their bubble is below the fill-drain bound the limit assumes.
    if let Some(&m) = ms
        .iter()
        .filter(|&&m| m >= 2)
        .min_by_key(|&&m| m.abs_diff(8))
    {
        // Each beside torch.distributed.pipelining's same schedule (`bench_pipe_schedules.py`,
        // its flag and chunks per rank): ZB-H1 is its interleaved zero bubble at one chunk per
        // rank.
        let beyond = [
            (ScheduleKind::ZbH1, "ZB-H1", ("interleaved-zb", 1)),
            (
                ScheduleKind::Interleaved { virtual_stages: 2 },
                "interleaved v=2",
                ("interleaved", 2),
            ),
            (ScheduleKind::ZbV, "ZB-V", ("zb-v", 2)),
            (
                ScheduleKind::LoopedBfs { virtual_stages: 2 },
                "looped BFS v=2",
                ("looped-bfs", 2),
            ),
            (
                ScheduleKind::InterleavedZb { virtual_stages: 2 },
                "interleaved ZB v=2",
                ("interleaved-zb", 2),
            ),
            (ScheduleKind::DualPipeV, "DualPipeV", ("dualpipev", 2)),
        ];
        // A schedule that cannot run m micro-batches on 2 ranks (DualPipeV below m = 4) has
        // no row.
        let beyond = beyond
            .into_iter()
            .filter(|(schedule, ..)| schedule.plan(2, m).is_ok());
        let beyond: Vec<_> = beyond.collect();
        for &(schedule, name, (flag, chunks)) in &beyond {
            rows.push(Row {
                group: "schedules",
                name: format!("{name}, 2 ranks, m={m}"),
                shape: pipeline(1, 2, m, schedule, 0),
                peer: Some(peer(
                    "bench_pipe_schedules.py",
                    "torch.distributed.pipelining, the same schedule, 2 ranks",
                    &[
                        "--schedule".into(),
                        flag.into(),
                        "--virtual-stages".into(),
                        chunks.to_string(),
                        "--m".into(),
                        m.to_string(),
                        "--threads".into(),
                        t.clone(),
                    ],
                )),
            });
        }
        // The same schedules on the GPT, against its own 1F1B.
        let beyond = beyond.iter().map(|&(schedule, name, _)| (schedule, name));
        for (schedule, name) in [(ScheduleKind::OneFOneB, "1F1B")].into_iter().chain(beyond) {
            let mut shape = pipeline(1, 2, m, schedule, 0);
            if let Shape::Pipeline { model, .. } = &mut shape {
                *model = BenchModel::Gpt;
            }
            rows.push(Row {
                group: "GPT schedules",
                name: format!("{name}, 2 ranks, m={m}"),
                shape,
                peer: None,
            });
        }
        // The Llama, beside transformers' own under torch.distributed.pipelining's 1F1B.
        let mut shape = pipeline(1, 2, m, ScheduleKind::OneFOneB, 0);
        if let Shape::Pipeline { model, .. } = &mut shape {
            *model = BenchModel::Llama;
        }
        // Its model's flags (`llama_peer_args`) follow at run time, from the workload's width.
        let args = [
            "--schedule".into(),
            "1f1b".into(),
            "--m".into(),
            m.to_string(),
            "--threads".into(),
            t.clone(),
        ];
        rows.push(Row {
            group: "Llama",
            name: format!("1F1B, 2 ranks, m={m}"),
            shape,
            peer: Some(peer(
                "bench_llama_pipe.py",
                "transformers' Llama by hand in 2 stages, torch.distributed.pipelining's 1F1B, 2 ranks",
                &args,
            )),
        });
    }
    // The memory dial (issue 51): the controllable-memory schedules beside 1F1B at each
    // micro-batch count given, on 2 ranks and on 4 (where V-Min holds half of 1F1B's first
    // stage's activations; on 2 they hold the same); torch ships none of them, so no peer.
    // The group's label holds `schedules: `, so that docs/benchmarks-schedules.md's
    // `--only "schedules: "` run has them.
    for &m in ms.iter().filter(|&&m| m >= 2) {
        for ranks in [2, 4] {
            for (schedule, name) in [
                (ScheduleKind::OneFOneB, "1F1B"),
                (ScheduleKind::VMin, "V-Min"),
                (ScheduleKind::VHalf, "V-Half"),
                (ScheduleKind::Zb2p, "ZB-2P"),
            ] {
                rows.push(Row {
                    group: "memory-dial schedules",
                    name: format!("{name}, {ranks} ranks, m={m}"),
                    shape: pipeline(1, ranks, m, schedule, 0),
                    peer: None,
                });
            }
        }
    }
    rows.push(Row {
        group: "hybrid",
        name: "2 replicas x 2 stages, 1F1B, m=4".into(),
        shape: pipeline(2, 2, 4, ScheduleKind::OneFOneB, 0),
        peer: None,
    });
    if mpi {
        rows.push(Row {
            group: "MPI",
            name: "2 replicas x 1 stage, m=1, 2 processes".into(),
            shape: over_mpi(pipeline(2, 1, 1, ScheduleKind::OneFOneB, 0)),
            peer: Some(peer(
                "bench_ddp.py",
                "DistributedDataParallel, 2 gloo ranks",
                &["--threads".into(), t.clone()],
            )),
        });
        rows.push(Row {
            group: "MPI",
            name: "2 replicas x 2 stages, 1F1B, m=4, 4 processes".into(),
            shape: over_mpi(pipeline(2, 2, 4, ScheduleKind::OneFOneB, 0)),
            peer: None,
        });
    }
    rows.push(Row {
        group: "ZeRO-1",
        name: "2 replicas x 1 stage, m=1, optimizer state sharded".into(),
        shape: pipeline(2, 1, 1, ScheduleKind::OneFOneB, 1),
        peer: None,
    });
    // ZeRO levels 0-3 (issue 50) on 2 replicas x 2 stages, in process and (with `mpi`) one
    // process per worker, each beside PyTorch's 2 x 2 mesh of the same level
    // (`bench_fsdp_pipe.py`: DDP at 0, ZeroRedundancyOptimizer at 1, FSDP2 at 2 and 3, with
    // torch.distributed.pipelining's 1F1B).
    for processes in [false, true].into_iter().filter(|&p| !p || mpi) {
        for level in 0..=3u8 {
            let shape = pipeline(2, 2, 4, ScheduleKind::OneFOneB, level);
            let (shape, how) = match processes {
                true => (over_mpi(shape), ", 4 processes"),
                false => (shape, ""),
            };
            rows.push(Row {
                group: "ZeRO",
                name: format!("ZeRO-{level}, 2 replicas x 2 stages, 1F1B, m=4{how}"),
                shape,
                peer: Some(peer(
                    "bench_fsdp_pipe.py",
                    "the same level on a 2 x 2 gloo mesh: DDP (0), ZeroRedundancyOptimizer (1), \
                     FSDP2 (2, 3), torch.distributed.pipelining's 1F1B",
                    &[
                        "--zero".into(),
                        level.to_string(),
                        "--schedule".into(),
                        "1f1b".into(),
                        "--m".into(),
                        "4".into(),
                        "--threads".into(),
                        t.clone(),
                    ],
                )),
            });
        }
    }
    // The split backward against autodiff's fused one, and its weight-gradient groups (memory
    // against speed), at the largest micro-batch count.
    if let Some(&m) = ms.iter().max().filter(|&&m| m > 1) {
        let fused = Backward::Fused;
        rows.push(Row {
            group: "backward",
            name: format!("1 worker, m={m}, fused (autodiff)"),
            shape: with_backward(pipeline(1, 1, m, ScheduleKind::GPipe, 0), fused),
            peer: None,
        });
        rows.push(Row {
            group: "backward",
            name: format!("1F1B, 2 stages, m={m}, fused (autodiff)"),
            shape: with_backward(pipeline(1, 2, m, ScheduleKind::OneFOneB, 0), fused),
            peer: None,
        });
        let mut groups = vec![1, m / 4];
        groups.dedup();
        for group in groups.into_iter().filter(|&g| g >= 1 && g < m) {
            rows.push(Row {
                group: "backward",
                name: format!("1F1B, 2 stages, m={m}, split, weight group {group}"),
                shape: with_backward(
                    pipeline(1, 2, m, ScheduleKind::OneFOneB, 0),
                    Backward::Split {
                        weight_group: group,
                    },
                ),
                peer: None,
            });
        }
    }
    rows
}
