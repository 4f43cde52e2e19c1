#!/usr/bin/env python3
"""Can two processes share one GPU over NCCL (issue 46)? NCCL refuses two ranks on one GPU by
comparing host hash and bus id; distinct NCCL_HOSTIDs may let them talk over sockets. Two ranks
on cuda:0: one all_reduce, one send/recv. Prints one line: `nccl probe: works ...` or `fails ...`."""
import datetime, os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def rank_main(rank, port, results):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_HOSTID=f"probe-{rank}")
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=30))
        x = torch.full((4,), rank + 1.0, device="cuda:0")
        dist.all_reduce(x)
        y = torch.arange(4.0, device="cuda:0") if rank == 0 else torch.zeros(4, device="cuda:0")
        dist.send(y, dst=1) if rank == 0 else dist.recv(y, src=0)
        torch.cuda.synchronize()
        ok = x.tolist() == [3.0] * 4 and y.tolist() == [0.0, 1.0, 2.0, 3.0]
        results.put((rank, ok, "" if ok else f"all_reduce {x.tolist()}, recv {y.tolist()}"))
        dist.destroy_process_group()
    except Exception as e:  # the probe reports, it never raises
        results.put((rank, False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    ranks = [ctx.Process(target=rank_main, args=(r, port, results)) for r in (0, 1)]
    [p.start() for p in ranks]
    got = []
    try:
        got = [results.get(timeout=60) for _ in ranks]
    except Exception:
        got.append((-1, False, "no answer within 60 s (hung in NCCL init or a collective)"))
    [p.terminate() for p in ranks if p.is_alive()]
    failed = [f"rank {r}: {why}" for r, ok, why in got if not ok]
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
    print(f"nccl probe (torch {torch.__version__}, NCCL {nccl}, 2 ranks on cuda:0, distinct NCCL_HOSTID): "
          + ("works: all_reduce and send/recv correct" if not failed else "fails: " + "; ".join(failed)))
    sys.exit(0 if not failed else 1)
