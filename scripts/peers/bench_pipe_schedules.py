#!/usr/bin/env python3
"""torch.distributed.pipelining's schedules with several stages per rank, 2 ranks over gloo: the
PyTorch peer of `pipetrain bench`'s "schedules" rows (interleaved 1F1B, looped BFS, interleaved
zero bubble, ZBV zero bubble, DualPipeV).

  /tmp/peer-venv/bin/python bench_pipe_schedules.py --schedule interleaved --m 8 --width 1024

Run from the shared peers folder (`pipetrain bench` does: this script imports its `common.py`,
the workload and timing every peer shares). The model is `common.build_model`, cut into 2 x v
chunks of equal hidden blocks (v = --virtual-stages, 2 by default), the head with the last. Chunk
c sits on rank c mod 2 (the loop placement of interleaved, looped BFS and interleaved zero
bubble), or on rank c for c < 2 and 3 - c after (the V placement of ZBV and DualPipeV, whose
first and last chunks share rank 0). Step time = max over the two ranks of (schedule.step +
optimizer.step + zero_grad), as in bench_pipe.py; it prints the same `RESULT {json}` line.
"""
import argparse
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
import pipe_steps  # noqa: E402

SCHEDULES = {
    "interleaved": ("ScheduleInterleaved1F1B", "loop"),
    "looped-bfs": ("ScheduleLoopedBFS", "loop"),
    "interleaved-zb": ("ScheduleInterleavedZeroBubble", "loop"),
    "zb-v": ("ScheduleZBVZeroBubble", "v"),
    "dualpipev": ("ScheduleDualPipeV", "v"),
}
RANKS = 2


def parse():
    p = C.add_common_args(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--schedule", choices=sorted(SCHEDULES), required=True)
    p.add_argument("--m", type=int, default=8, help="number of micro-batches")
    p.add_argument("--virtual-stages", type=int, default=2, help="chunks per rank (V schedules: 2)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    return p.parse_args()


def chunks_of(rank, placement, v):
    """The chunk (stage) indices rank `rank` holds, in the order the schedule wants them."""
    if placement == "v":
        return [rank, 2 * RANKS - 1 - rank]
    return [rank + RANKS * k for k in range(v)]


def worker(rank, args, port):
    C.set_thread_env(args.threads)
    C.dist_env(port)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)

    name, placement = SCHEDULES[args.schedule]
    v = 2 if placement == "v" else args.virtual_stages
    n = RANKS * v
    full = C.build_model(args.width, args.layers)
    mine = chunks_of(rank, placement, v)
    mods = [C.stage_module(full, args.layers, c, n) for c in mine]
    del full
    assert args.batch % args.m == 0
    stages = [PipelineStage(m, c, n, torch.device("cpu")) for m, c in zip(mods, mine)]

    def loss_fn(out, tgt):
        return F.cross_entropy(out, tgt)

    sched = getattr(S, name)(stages, n_microbatches=args.m, loss_fn=loss_fn)
    params = [p for m in mods for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.0)
    batches = C.make_batches(args.batch, args.width)
    first, last = 0 in mine, (n - 1) in mine

    dist.barrier()
    measured = pipe_steps.run(sched, opt, batches, args, first, last)
    pipe_steps.report(rank, RANKS, args, measured, args.batch, {
        "bench": "pipe-" + args.schedule, "workload": f"MLP-{args.layers}x{args.width}",
        "config": f"m={args.m} v={v} thr/rank={args.threads}", "schedule": name,
        "m": args.m, "virtual_stages": v, "threads": args.threads, "batch": args.batch,
        "width": args.width, "layers": args.layers,
    })
    dist.destroy_process_group()


if __name__ == "__main__":
    args = parse()
    C.set_thread_env(args.threads)
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(args, C.free_port()), nprocs=RANKS, join=True)
