"""The timed steps and the `RESULT` line of pipetrain's own torch.distributed.pipelining peers
(`bench_pipe_schedules.py`, `bench_llama_pipe.py`), as the shared harness's `bench_pipe.py`
times them: step time = max over the ranks of (schedule.step + optimizer.step + zero_grad).

Imported by those scripts, after they have put the shared peers folder (its `common.py`) on
`sys.path`.
"""
import common as C


def run(sched, opt, batches, args, first, last):
    """`args.warmup + args.steps` steps of `sched` on `batches` (x, y pairs, cycled); `first`
    and `last`: whether this rank holds the first and the last stage. Returns each step's
    seconds, the last stage's mean loss per step (empty elsewhere) and the CPU time of the timed
    steps."""
    import torch

    times, step_losses = [], []
    for s in range(args.warmup + args.steps):
        x, y = batches[s % len(batches)]
        if s == args.warmup:
            snap0 = C.cpu_snapshot()
        t0 = C.now()
        losses = []
        if first and last:
            sched.step(x, target=y, losses=losses)
        elif first:
            sched.step(x)
        else:
            sched.step(target=y, losses=losses)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(C.now() - t0)
        if last:
            step_losses.append(float(torch.stack([l.detach() for l in losses]).mean()))
    return times, step_losses, C.cpu_delta(snap0, C.cpu_snapshot())


def report(rank, ranks, args, measured, batch, fields):
    """Gathers every rank's `measured` (`run`'s answer) and, on rank 0, prints the `RESULT` line
    over `batch` samples a step, with `fields` added (name, configuration, versions)."""
    import torch
    import torch.distributed as dist

    times, step_losses, cpu = measured
    dist.barrier()
    result = {"rank": rank, "times": times, "cpu": cpu, "peak_rss_mib": C.peak_rss_mib(),
              "losses": step_losses}
    gathered = [None] * ranks
    dist.all_gather_object(gathered, result)
    if rank != 0:
        return
    step_t = C.combine_rank_times([g["times"][args.warmup:] for g in gathered])
    res = C.summarize(step_t, batch)
    res["cpu_per_rank"] = [g["cpu"] for g in gathered]
    res["foreign_cores"] = C.foreign_load([g["cpu"] for g in gathered])
    losses = next(g["losses"] for g in gathered if g["losses"])
    res.update(fields)
    res.update({
        "peak_rss_mib_max": max(g["peak_rss_mib"] for g in gathered),
        "first_losses": losses[:5], "torch": torch.__version__, "tag": args.tag,
    })
    C.emit(res, args.out)
    print(C.fmt_row(res))
