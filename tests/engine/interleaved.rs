//! Interleaved 1F1B in the engine: every model stage (chunk) runs on a worker of its own, and
//! the chunks of one rank take turns in the plan's order. Training matches a single device
//! within 1e-5 and is bitwise equal to GPipe and 1F1B over the same chunks (every stage
//! accumulates its micro-batches in ascending order under each of them). The five schedules
//! with several chunks per rank also run the equivalence suite's layouts here (replicas, ZeRO-1,
//! remat); `skip_routing.rs` sweeps them with skips, `tied.rs` with tied weights.

use crate::common;

use burn::prelude::*;
use pipetrain::engine::{SingleDevice, difference};
use pipetrain::schedules::{ActionKind, StageId};
use pipetrain::{
    Backward, CrossEntropy, OptimizerConfig, Pipeline, PipelineBuilder, Remat, ScheduleKind,
};
use pipetrain_models::{MlpConfig, MlpLayer, synthetic};

const WIDTH: usize = 8;
const CLASSES: usize = 3;
const BATCH: usize = 24;

/// 8 layers. burn 0.22 initialises parameters lazily, at first use: read them here, under
/// the generator's lock, so that they are drawn from this seed.
fn model() -> Vec<MlpLayer> {
    common::seeded(11, |d| {
        let layers = MlpConfig::new(WIDTH, 7, CLASSES).init(d);
        pipetrain::engine::parameters(&layers);
        layers
    })
}

fn data() -> Vec<pipetrain::Batch> {
    (0..2)
        .map(|k| synthetic::classification(4, k, BATCH, WIDTH, CLASSES, &Device::flex()))
        .collect()
}

/// The weights after training `init` on one device on the same data (the reference).
fn single_device(init: &[MlpLayer]) -> Vec<Vec<f32>> {
    let mut single = SingleDevice::new(init.to_vec(), &Device::flex(), &OptimizerConfig::adam());
    for b in data() {
        single
            .step(b.inputs, b.targets, &CrossEntropy, 1e-2)
            .unwrap();
    }
    single.parameters()
}

/// The backwards (ours, the reference's) of a schedule that places its own `W`s: by default
/// each computes its own micro-batch's, so the reference gets group 1 too.
fn placed_weights() -> [(Backward, Backward); 3] {
    let per_micro_batch = Backward::Split { weight_group: 1 };
    [
        (Backward::default(), per_micro_batch),
        (per_micro_batch, per_micro_batch),
        (Backward::Fused, Backward::Fused),
    ]
}

/// (ranks, chunks per rank, chunk balance, micro-batches)
type Shape = (usize, usize, Vec<usize>, usize);

/// Trains the schedule `kind(v)` at each shape under each pair's first backward: within 1e-5 of
/// one device, and bitwise equal to each of `references` over the same chunks under the pair's
/// second backward.
fn equal_to_one_device_and_bitwise(
    kind: impl Fn(usize) -> ScheduleKind,
    shapes: &[Shape],
    backwards: &[(Backward, Backward)],
    references: &[ScheduleKind],
) {
    let init = model();
    let expected = single_device(&init);
    for (p, v, balance, m) in shapes {
        let (p, v, m) = (*p, *v, *m);
        for &(ours, theirs) in backwards {
            let kind = kind(v);
            let pipeline = train(&init, kind, Some(p), balance, m, ours);
            let what = format!("{kind} p={p} {balance:?} m={m} {ours:?}");
            assert_eq!(pipeline.stages(), p * v, "{what}");
            let got = pipeline.parameters();
            let d = difference(&got, &expected);
            assert!(d.max_relative <= 1e-5, "{what}: vs one device {d:?}");
            for &other in references {
                let reference = train(&init, other, None, balance, m, theirs).parameters();
                assert!(got == reference, "{what}: not bitwise equal to {other}");
            }
        }
    }
}

fn train(
    init: &[MlpLayer],
    schedule: ScheduleKind,
    stages: Option<usize>,
    balance: &[usize],
    m: usize,
    backward: Backward,
) -> Pipeline<MlpLayer> {
    trained(builder(init, schedule, balance, m, backward), stages)
}

/// The sweep's settings of every run: `balance` chunks, `m` micro-batches, Adam, one thread.
fn builder(
    init: &[MlpLayer],
    schedule: ScheduleKind,
    balance: &[usize],
    m: usize,
    backward: Backward,
) -> PipelineBuilder<MlpLayer> {
    Pipeline::builder()
        .layers(init.to_vec())
        .balance(balance.iter().copied())
        .schedule(schedule)
        .micro_batches(m)
        .backward(backward)
        .optimizer(OptimizerConfig::adam())
        .learning_rate(1e-2)
        .threads_per_worker(1)
}

/// `builder` on `stages` ranks (chunks per rank from the balance), trained on [`data`].
fn trained(mut builder: PipelineBuilder<MlpLayer>, stages: Option<usize>) -> Pipeline<MlpLayer> {
    if let Some(p) = stages {
        builder = builder.stages(p);
    }
    let mut pipeline = builder.build().unwrap();
    for batch in data() {
        pipeline.train_step(&batch).unwrap();
    }
    pipeline
}

#[test]
fn interleaved_matches_single_device_and_is_bitwise_equal_to_gpipe_over_the_same_chunks() {
    let shapes = [
        (2, 2, vec![2, 2, 2, 2], 2),
        (2, 2, vec![1, 3, 2, 2], 4),
        (2, 4, vec![1; 8], 4),
        (3, 2, vec![2, 1, 1, 1, 1, 2], 3),
    ];
    let same = [
        (Backward::default(), Backward::default()),
        (Backward::Fused, Backward::Fused),
    ];
    let references = [ScheduleKind::GPipe, ScheduleKind::OneFOneB];
    let interleaved = |v| ScheduleKind::Interleaved { virtual_stages: v };
    equal_to_one_device_and_bitwise(interleaved, &shapes, &same, &references);
}

/// ZB-V (two chunks per rank in a V) runs on the same machinery: within 1e-5 of one device,
/// bitwise equal to GPipe over the same chunks at the same weight-gradient group (ZB-V places
/// its `W`s: by default each computes its own micro-batch, so GPipe gets group 1 too).
#[test]
fn zb_v_matches_single_device_and_gpipe_over_the_same_chunks() {
    let shapes = [
        (2, 2, vec![2, 2, 2, 2], 4),
        (3, 2, vec![1, 2, 1, 1, 2, 1], 3),
    ];
    let backwards = placed_weights();
    let zb_v = |_| ScheduleKind::ZbV;
    equal_to_one_device_and_bitwise(zb_v, &shapes, &backwards, &[ScheduleKind::GPipe]);
}

/// V-Min and V-Half (the controllable-memory V schedules) run on the same machinery: within
/// 1e-5 of one device, bitwise equal to 1F1B over the same chunks at the same weight-gradient
/// group, and to the other split-backward schedules in a V over the same chunks and ranks
/// (ZB-V, and DualPipeV from m = 2p on), m < p included.
#[test]
fn v_min_and_v_half_match_single_device_and_the_other_v_schedules_bitwise() {
    let shapes = [
        (2, 2, vec![1, 3, 2, 2], 4),
        (3, 2, vec![2, 1, 1, 1, 1, 2], 2),
        (3, 2, vec![1, 2, 1, 1, 2, 1], 6),
    ];
    let init = model();
    for kind in [ScheduleKind::VMin, ScheduleKind::VHalf] {
        equal_to_one_device_and_bitwise(
            |_| kind,
            &shapes,
            &placed_weights(),
            &[ScheduleKind::OneFOneB],
        );
        for (p, _, balance, m) in &shapes {
            let (p, m) = (*p, *m);
            let got = train(&init, kind, Some(p), balance, m, Backward::default()).parameters();
            let others = [ScheduleKind::ZbV, ScheduleKind::DualPipeV];
            for other in others.into_iter().filter(|o| o.plan(p, m).is_ok()) {
                let theirs = train(&init, other, Some(p), balance, m, Backward::default());
                assert!(
                    got == theirs.parameters(),
                    "{kind} p={p} {balance:?} m={m}: not bitwise equal to {other}"
                );
            }
        }
    }
}

/// Looped BFS (chunks placed as interleaved's, each rank running every micro-batch through one
/// chunk before the next) runs on the same machinery: within 1e-5 of one device, bitwise equal
/// to 1F1B over the same chunks at the same micro-batch count (each stage runs its backwards
/// oldest first, as 1F1B does), m < p included.
#[test]
fn looped_bfs_matches_single_device_and_is_bitwise_equal_to_1f1b_over_the_same_chunks() {
    let shapes = [
        (2, 2, vec![1, 3, 2, 2], 4),
        (2, 3, vec![1, 1, 2, 2, 1, 1], 3),
        (3, 2, vec![2, 1, 1, 1, 1, 2], 2),
    ];
    let same = [
        (Backward::default(), Backward::default()),
        (Backward::Fused, Backward::Fused),
    ];
    let looped_bfs = |v| ScheduleKind::LoopedBfs { virtual_stages: v };
    equal_to_one_device_and_bitwise(looped_bfs, &shapes, &same, &[ScheduleKind::OneFOneB]);
}

/// Interleaved zero bubble (interleaved's chunks and order, the backward split as in ZB-H1)
/// runs on the same machinery: within 1e-5 of one device, bitwise equal to 1F1B over the same
/// chunks at the same micro-batch count and weight-gradient group (it places its `W`s, one per
/// micro-batch by default, so 1F1B gets group 1 too).
#[test]
fn interleaved_zb_matches_single_device_and_is_bitwise_equal_to_1f1b_over_the_same_chunks() {
    let shapes = [
        (2, 2, vec![1, 3, 2, 2], 4),
        (2, 3, vec![1, 1, 2, 2, 1, 1], 2),
        (3, 2, vec![2, 1, 1, 1, 1, 2], 3),
    ];
    let backwards = placed_weights();
    let interleaved_zb = |v| ScheduleKind::InterleavedZb { virtual_stages: v };
    let one_f_one_b = [ScheduleKind::OneFOneB];
    equal_to_one_device_and_bitwise(interleaved_zb, &shapes, &backwards, &one_f_one_b);
}

/// DualPipeV (two chunks per rank in a V, forward and backward pairs run in sequence) runs on
/// the same machinery: within 1e-5 of one device, bitwise equal to 1F1B over the same chunks at
/// the same micro-batch count and weight-gradient group.
#[test]
fn dualpipev_matches_single_device_and_is_bitwise_equal_to_1f1b_over_the_same_chunks() {
    let shapes = [
        (2, 2, vec![1, 3, 2, 2], 4),
        (2, 2, vec![2, 2, 2, 2], 5),
        (3, 2, vec![2, 1, 1, 1, 1, 2], 6),
    ];
    let dualpipev = |_| ScheduleKind::DualPipeV;
    let one_f_one_b = [ScheduleKind::OneFOneB];
    equal_to_one_device_and_bitwise(dualpipev, &shapes, &placed_weights(), &one_f_one_b);
}

#[test]
fn interleaved_runs_one_worker_per_chunk_in_its_rank_order() {
    let pipeline = train(
        &model(),
        ScheduleKind::Interleaved { virtual_stages: 2 },
        Some(2),
        &[2, 2, 2, 2],
        4,
        Backward::Fused,
    );
    // Each chunk's worker runs its own actions (in its rank's order): stage 2 forwards
    // micro-batches 0 and 1 before stage 2's first backward, as rank 0 does.
    let program: Vec<String> = pipeline
        .plan()
        .program(StageId(2))
        .iter()
        .filter(|a| a.kind.is_compute())
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        program,
        ["2F0", "2F1", "2B0", "2B1", "2F2", "2F3", "2B2", "2B3"]
    );
    assert_eq!(pipeline.plan().count(StageId(3), ActionKind::Backward), 4);
}

#[test]
fn interleaved_refuses_what_it_cannot_run_before_any_thread_starts() {
    let build = |stages: Option<usize>, balance: Option<Vec<usize>>, m: usize| {
        let mut builder = Pipeline::builder()
            .layers(model())
            .schedule(ScheduleKind::Interleaved { virtual_stages: 2 })
            .micro_batches(m);
        if let Some(p) = stages {
            builder = builder.stages(p);
        }
        if let Some(b) = balance {
            builder = builder.balance(b);
        }
        builder.build().err().map(|e| e.to_string())
    };
    let e = build(Some(2), None, 3).expect("3 micro-batches over 2 ranks");
    assert!(
        e.contains(".micro_batches(2)") && e.contains(".micro_batches(4)"),
        "{e}"
    );
    let e = build(None, Some(vec![3, 3, 2]), 2).expect("3 chunks over ranks of 2");
    assert!(
        e.contains("has 3 stages") && e.contains("multiple of 2") && e.contains(".balance([3, 5])"),
        "{e}"
    );
    let e = build(Some(5), None, 5).expect("10 chunks for 8 layers");
    assert!(e.contains("10 chunks") && e.contains("8 layers"), "{e}");
}

/// An MLP layer, or one that panics in its forward.
#[derive(burn::module::Module, Debug)]
enum Tripping {
    Layer(MlpLayer),
    Trip(usize),
}

impl pipetrain::Layer for Tripping {
    fn forward(
        &self,
        input: pipetrain::Activation,
    ) -> Result<pipetrain::Activation, pipetrain::EngineError> {
        match self {
            Tripping::Layer(l) => l.forward(input),
            Tripping::Trip(_) => panic!("tripped on purpose"),
        }
    }
}

/// A panic in the second chunk of rank 0 ends the step with an error naming that stage and
/// action; the chunks waiting for their turn wake up (the test ends).
#[test]
fn a_panic_in_a_chunk_ends_the_step_and_wakes_the_waiting_chunks() {
    let mut layers: Vec<Tripping> = model().into_iter().map(Tripping::Layer).collect();
    layers.insert(4, Tripping::Trip(0)); // first layer of stage 2 (balance 2, 2, 2, 3)
    let mut pipeline = Pipeline::builder()
        .layers(layers)
        .stages(2)
        .balance([2, 2, 2, 3])
        .schedule(ScheduleKind::Interleaved { virtual_stages: 2 })
        .micro_batches(4)
        .threads_per_worker(1)
        .build()
        .unwrap();
    let err = pipeline.train_step(&data()[0]).unwrap_err().to_string();
    assert!(
        err.contains("stage 2") && err.contains("`2F0`") && err.contains("tripped"),
        "{err}"
    );
}

/// Two replicas of an interleaved pipeline: each replica's chunks take their own turns; the
/// result is GPipe's with two replicas, bit for bit.
#[test]
fn interleaved_with_two_replicas_is_bitwise_equal_to_gpipe() {
    let init = model();
    let run = |schedule, stages: Option<usize>| {
        let mut builder = Pipeline::builder()
            .layers(init.clone())
            .balance([2, 2, 2, 2])
            .schedule(schedule)
            .micro_batches(2)
            .replicas(2)
            .threads_per_worker(1);
        if let Some(p) = stages {
            builder = builder.stages(p);
        }
        let mut pipeline = builder.build().unwrap();
        for batch in data() {
            pipeline.train_step(&batch).unwrap();
        }
        pipeline.parameters()
    };
    let interleaved = run(ScheduleKind::Interleaved { virtual_stages: 2 }, Some(2));
    assert!(interleaved == run(ScheduleKind::GPipe, None));
}

/// The seven schedules with several chunks per rank, at v = 2 (ZB-V, DualPipeV, V-Min and
/// V-Half always hold 2).
const MULTI_CHUNK: [ScheduleKind; 7] = [
    ScheduleKind::Interleaved { virtual_stages: 2 },
    ScheduleKind::ZbV,
    ScheduleKind::LoopedBfs { virtual_stages: 2 },
    ScheduleKind::InterleavedZb { virtual_stages: 2 },
    ScheduleKind::DualPipeV,
    ScheduleKind::VMin,
    ScheduleKind::VHalf,
];

/// One layout of the data-parallel and remat sweep: replicas, remat, ZeRO stage.
type Layout = (usize, Remat, u8);

/// Trains `schedule` on 2 ranks (`stages` given) or on its chunks alone (`None`), at `layout`,
/// 4 micro-batches over the chunks `[2, 2, 2, 2]`; every replica's parameters.
fn train_layout(
    init: &[MlpLayer],
    schedule: ScheduleKind,
    stages: Option<usize>,
    (replicas, remat, zero): Layout,
    backward: Backward,
) -> Vec<Vec<Vec<f32>>> {
    let builder = builder(init, schedule, &[2, 2, 2, 2], 4, backward)
        .replicas(replicas)
        .remat(remat)
        .zero(zero);
    let pipeline = trained(builder, stages);
    (0..replicas)
        .map(|r| pipeline.replica_parameters(r))
        .collect()
}

/// The equivalence suite's layouts for the schedules with several chunks per rank: 1 and 2
/// replicas (ZeRO-1 on 2), every remat mode that changes the work (never, always). Each run is
/// within 1e-5 of one device, every replica holds the same bits, and it is bitwise equal to
/// 1F1B over the same 4 chunks at the same layout and weight-gradient group (the schedules that
/// place their `W`s compute one per micro-batch by default: 1F1B gets group 1 too).
#[test]
fn multi_chunk_schedules_on_replicas_and_remat_match_single_device_and_1f1b() {
    let init = model();
    let expected = single_device(&init);
    let layouts: [Layout; 8] = [
        (1, Remat::Never, 0),
        (1, Remat::Always, 0),
        (2, Remat::Never, 0),
        (2, Remat::Always, 0),
        (2, Remat::Never, 1),
        (2, Remat::Never, 2),
        (2, Remat::Always, 3),
        (3, Remat::Never, 3),
    ];
    for layout in layouts {
        let mut references: Vec<(Backward, Vec<Vec<f32>>)> = Vec::new();
        for schedule in MULTI_CHUNK {
            let theirs = match schedule.splits_backward() {
                true => Backward::Split { weight_group: 1 },
                false => Backward::default(),
            };
            let what = format!("{schedule} on 2 ranks, {layout:?}");
            let got = train_layout(&init, schedule, Some(2), layout, Backward::default());
            for (r, replica) in got.iter().enumerate() {
                assert!(replica == &got[0], "{what}: replica {r} differs from 0");
            }
            let d = difference(&got[0], &expected);
            assert!(d.max_relative <= 1e-5, "{what}: vs one device {d:?}");
            let reference = match references.iter().find(|(b, _)| *b == theirs) {
                Some((_, params)) => params.clone(),
                None => {
                    let one_f_one_b = ScheduleKind::OneFOneB;
                    let params = train_layout(&init, one_f_one_b, None, layout, theirs).remove(0);
                    references.push((theirs, params.clone()));
                    params
                }
            };
            assert!(got[0] == reference, "{what}: not bitwise equal to 1f1b");
        }
    }
}

/// A multi-process world must give each process whole ranks: the chunks of a rank take turns,
/// which pass inside one process. A process given stage 0 of interleaved's rank 0 (stages 0 and
/// 2) but not stage 2 is refused before any thread starts, naming both.
#[test]
fn a_process_given_part_of_a_ranks_chunks_is_refused_naming_the_missing_one() {
    use pipetrain::engine::ChannelFabric;
    use pipetrain::{ReplicaId, StageId, WorkerId};
    let worker = |s| WorkerId::new(ReplicaId(0), StageId(s));
    let e = Pipeline::builder()
        .layers(model())
        .stages(2)
        .schedule(ScheduleKind::Interleaved { virtual_stages: 2 })
        .micro_batches(2)
        .distributed(
            vec![worker(0), worker(1), worker(3)],
            Box::new(ChannelFabric::default()),
        )
        .build()
        .err()
        .expect("stage 2 of rank 0 runs elsewhere")
        .to_string();
    assert!(
        e.contains(&format!("runs {} but not {}", worker(0), worker(2)))
            && e.contains("pipeline rank 0"),
        "{e}"
    );
}
