#!/usr/bin/env python3
"""A 2-stage x 2-replica pipeline with each stage's parameters sharded across its replicas, 4
ranks over gloo: the PyTorch peer of `pipetrain bench`'s ZeRO rows.

  /tmp/peer-venv/bin/python bench_fsdp_pipe.py --zero 3 --schedule 1f1b --m 4 --width 1024
  /tmp/peer-venv/bin/python bench_fsdp_pipe.py --zero 0 --schedule gpipe --m 4 --width 1024

Run from the shared peers folder (`pipetrain bench` does: this script imports its `common.py`,
the workload and timing every peer shares). The model is `common.build_model`, cut by
`common.stage_module` into 2 stages (the head and the loss with the last). The 4 ranks form a
2 x 2 device mesh, `init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "pp"))`: rank =
replica * 2 + stage, so ranks {0, 1} are replica 0's pipeline, {2, 3} replica 1's, and the
stage-s ranks {s, s + 2} are stage s's data-parallel group. torch.distributed.pipelining runs
each replica's pipeline (PipelineStage over the "pp" group, ScheduleGPipe or Schedule1F1B by
--schedule); the "dp" group shares each stage by --zero:

  --zero 0  DistributedDataParallel over the dp group: parameters, gradients and optimizer
            state replicated; the gradients all-reduced (mean) in the last micro-batch's
            backward (pipelining keeps DDP in no_sync before it).              sharding "ddp"
  --zero 1  as 0, the optimizer torch's ZeroRedundancyOptimizer over the dp group: each
            replica steps the parameters it owns and broadcasts them. With this workload's
            plain SGD there is no optimizer state to shard, so it saves nothing and costs the
            broadcasts.                                                  sharding "ddp+zero1"
  --zero 2  FSDP2 `fully_shard(reshard_after_forward=False)` over the dp group: FSDP1's
            SHARD_GRAD_OP, the ZeRO-2 torch offers. Parameters rest sharded between steps;
            the first micro-batch's forward all-gathers them and they stay whole until the
            step's gradients are reduce-scattered (mean) after the last backward; gradients
            and the SGD step are per shard. Per FSDP unit and step: 1 all-gather, 1
            reduce-scatter. FSDP2 has no mode that keeps parameters whole between steps
            (DeepSpeed's ZeRO-2 proper).                                     sharding "fsdp2"
  --zero 3  FSDP2 `fully_shard(reshard_after_forward=True)` (FSDP1's FULL_SHARD, ZeRO-3): as 2,
            but every micro-batch's forward all-gathers the unit and frees it after; the
            backward gathers it once more and pipelining keeps it whole until the step's
            reduce-scatter (it sets reshard_after_backward=False and defers the reduction to
            the end of schedule.step). Per unit and step: m + 1 all-gathers, 1 reduce-scatter
            (counted at m = 4: 5 and 1).                                     sharding "fsdp2"

FSDP2 units (--wrap): `layer` (default, torch's recommended use) shards every Linear as its own
unit and then the stage; `stage` makes the stage one unit (one all-gather of all its parameters).
Under --zero 0 and 1, one plain forward/backward of the DDP module on a zero row runs before the
first step (its gradients dropped): DDP rebuilds its buckets from the first backward's order,
and left to the first schedule.step GPipe's m backwards in a row are all recorded and DDP fails
("rebuilt parameter indices size is not same as original model parameters size").
(`static_graph=True` avoids that error but gives wrong gradients under GPipe.)

Data: replica r trains on rows [r*B/2, (r+1)*B/2) of every global batch (as bench_ddp.py), cut
into --m micro-batches of B/(2m) rows (--m is per replica; the loss is the mean cross-entropy per
micro-batch, and pipelining divides the gradients by m, DP by 2, so a step is the full-batch
step). `first_losses` are the mean over both replicas of the last stage's micro-batch losses,
the global batch's loss, equal across --zero levels (and to bench_pipe.py's). Step time = max
over the four ranks of (schedule.step + optimizer.step + zero_grad), as in bench_pipe.py; it
prints the same `RESULT {json}` line, with `sharding` (what ran), `zero`, and
`param_mib_per_rank` (each rank's resident parameter bytes between steps: its shards under
FSDP2).

With torch 2.15 FSDP2 and pipelining run together on CPU over gloo. If FSDP2 fails on a torch
(CPU/gloo), the run is repeated with DDP (--zero 0's setup) and
the line says `"sharding": "ddp"` with `fallback_reason`; --no-fallback makes that an error.
"""
import argparse
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
import pipe_steps  # noqa: E402

DP, PP = 2, 2
RANKS = DP * PP
SHARDING = {0: "ddp", 1: "ddp+zero1", 2: "fsdp2", 3: "fsdp2"}


def parse():
    p = C.add_common_args(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=3, help="ZeRO level (see above)")
    p.add_argument("--schedule", choices=["gpipe", "1f1b"], default="1f1b")
    p.add_argument("--m", type=int, default=4, help="number of micro-batches per replica")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb (--zero 0, 1)")
    p.add_argument("--wrap", choices=["layer", "stage"], default="layer",
                   help="FSDP2 units: every Linear and the stage (layer), or the stage alone")
    p.add_argument("--no-fallback", action="store_true", help="fail instead of falling back to DDP")
    return p.parse_args()


def worker(rank, args, port, sharding, fallback_reason):
    C.set_thread_env(args.threads)
    C.dist_env(port)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    mesh = init_device_mesh("cpu", (DP, PP), mesh_dim_names=("dp", "pp"))
    replica, stage_idx = divmod(rank, PP)
    assert mesh["dp"].get_local_rank() == replica and mesh["pp"].get_local_rank() == stage_idx
    dp_group, pp_group = mesh["dp"].get_group(), mesh["pp"].get_group()

    full = C.build_model(args.width, args.layers)
    mod = C.stage_module(full, args.layers, stage_idx, PP)
    del full
    if sharding == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        reshard = args.zero == 3
        for name, child in mod.named_children():
            if args.wrap == "layer" and name.startswith("fc"):
                fully_shard(child, mesh=mesh["dp"], reshard_after_forward=reshard)
        fully_shard(mod, mesh=mesh["dp"], reshard_after_forward=reshard)
        submod = mod
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP

        submod = DDP(mod, process_group=dp_group, bucket_cap_mb=args.bucket_mb)
        # DDP's bucket rebuild, before the schedule (see the docstring): its gradients dropped.
        width_in = mod[0].in_features
        submod(torch.zeros(1, width_in)).sum().backward()
        for p in mod.parameters():
            p.grad = None
    if sharding == "ddp+zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(list(mod.parameters()), optimizer_class=torch.optim.SGD,
                                      process_group=dp_group, lr=args.lr, momentum=0.0)
    else:
        opt = torch.optim.SGD(mod.parameters(), lr=args.lr, momentum=0.0)

    def local_bytes(p):
        t = p.to_local() if hasattr(p, "to_local") else p
        return t.numel() * t.element_size()

    param_mib = sum(local_bytes(p) for p in mod.parameters()) / 2**20

    half = args.batch // DP
    assert args.batch % DP == 0 and half % args.m == 0, "batch must split into 2 x m micro-batches"
    batches = [(x[replica * half:(replica + 1) * half].contiguous(),
                y[replica * half:(replica + 1) * half].contiguous())
               for x, y in C.make_batches(args.batch, args.width)]
    stage = PipelineStage(submod, stage_idx, PP, torch.device("cpu"), group=pp_group)

    def loss_fn(out, tgt):
        return F.cross_entropy(out, tgt)

    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[args.schedule]
    sched = cls(stage, n_microbatches=args.m, loss_fn=loss_fn)
    first, last = stage_idx == 0, stage_idx == PP - 1

    dist.barrier()
    times, step_losses, cpu = pipe_steps.run(sched, opt, batches, args, first, last)
    if last:  # the global batch's loss: the mean over the replicas of their halves' losses
        l = torch.tensor(step_losses, dtype=torch.float64)
        dist.all_reduce(l, group=dp_group)
        step_losses = (l / DP).tolist()
    sizes = [None] * RANKS
    dist.all_gather_object(sizes, param_mib)
    fields = {
        "bench": f"pipe-zero{args.zero}", "workload": f"MLP-{args.layers}x{args.width}",
        "config": f"{DP}x{PP} {args.schedule} m={args.m} thr/rank={args.threads}",
        "schedule": cls.__name__, "zero": args.zero, "sharding": sharding,
        "replicas": DP, "stages": PP, "m": args.m, "micro_batch": half // args.m,
        "threads": args.threads, "batch": args.batch, "width": args.width, "layers": args.layers,
        "param_mib_per_rank": sizes,
    }
    if sharding == "fsdp2":
        fields["reshard_after_forward"] = args.zero == 3
        fields["wrap"] = args.wrap
    else:
        fields["bucket_mb"] = args.bucket_mb
    if fallback_reason:
        fields["fallback_reason"] = fallback_reason
    pipe_steps.report(rank, RANKS, args, (times, step_losses, cpu), args.batch, fields)
    dist.destroy_process_group()


if __name__ == "__main__":
    args = parse()
    C.set_thread_env(args.threads)
    import torch.multiprocessing as mp

    sharding = SHARDING[args.zero]
    try:
        mp.spawn(worker, args=(args, C.free_port(), sharding, None), nprocs=RANKS, join=True)
    except Exception as e:  # noqa: BLE001 (a rank's failure, re-raised by spawn)
        if sharding != "fsdp2" or args.no_fallback:
            raise
        reason = str(e).strip().splitlines()[-1][:300] if str(e).strip() else type(e).__name__
        print(f"FSDP2 failed ({reason}); running the data-parallel dimension with DDP instead",
              file=sys.stderr, flush=True)
        mp.spawn(worker, args=(args, C.free_port(), "ddp", reason), nprocs=RANKS, join=True)
