#!/usr/bin/env python3
"""A Llama beside pipetrain's: transformers' LlamaForCausalLM layers cut into 2 stages and run by
torch.distributed.pipelining, 2 ranks over gloo: the PyTorch peer of `pipetrain bench`'s "Llama"
row.

  /tmp/peer-venv/bin/python bench_llama_pipe.py --schedule 1f1b --m 8

Run from the shared peers folder (`pipetrain bench` does: this script imports its `common.py`,
the timing every peer shares). The model is transformers' own (`LlamaConfig` from the --llama-*
flags, torch's default init under seed 0, the default SDPA attention, causal), not traced:
pipelining's tracer fails on Hugging Face models with rotary embeddings (pytorch#184361), so
each stage is a module of the model's own parts, as a user writes it by hand. Stage 0 holds the
embedding and the first half of the decoder layers, stage 1 the rest, the final norm and
lm_head; each stage computes the rotary embedding of its positions itself. Data: synthetic token
ids (seeded), the next token as target, mean cross-entropy over every token. Step time = max over
the two ranks of (schedule.step + optimizer.step + zero_grad), as in bench_pipe.py; samples/s are
sequences/s. It prints the same `RESULT {json}` line. The --width, --layers and --batch flags
every peer is given are the MLP workload's, and ignored here.
"""
import argparse
import os
import sys

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
import pipe_steps  # noqa: E402

RANKS = 2


def parse():
    p = C.add_common_args(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--schedule", choices=["gpipe", "1f1b"], default="1f1b")
    p.add_argument("--m", type=int, default=8, help="number of micro-batches")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--llama-hidden", type=int, default=512)
    p.add_argument("--llama-layers", type=int, default=4)
    p.add_argument("--llama-heads", type=int, default=8)
    p.add_argument("--llama-kv-heads", type=int, default=4)
    p.add_argument("--llama-intermediate", type=int, default=1368)
    p.add_argument("--llama-vocab", type=int, default=512)
    p.add_argument("--llama-context", type=int, default=32)
    p.add_argument("--llama-batch", type=int, default=32, help="sequences per step")
    return p.parse_args()


def config(args):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=args.llama_vocab, hidden_size=args.llama_hidden,
        intermediate_size=args.llama_intermediate, num_hidden_layers=args.llama_layers,
        num_attention_heads=args.llama_heads, num_key_value_heads=args.llama_kv_heads,
        max_position_embeddings=args.llama_context, tie_word_embeddings=False)


def stage_module(full, rank, layers):
    import torch
    from torch import nn

    half = layers // 2
    mine = full.model.layers[:half] if rank == 0 else full.model.layers[half:]

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = full.model.embed_tokens if rank == 0 else None
            self.layers = nn.ModuleList(mine)
            self.rotary = full.model.rotary_emb
            self.norm = full.model.norm if rank == RANKS - 1 else None
            self.head = full.lm_head if rank == RANKS - 1 else None

        def forward(self, x):
            h = self.embed(x) if self.embed is not None else x
            n, t = h.shape[0], h.shape[1]
            positions = torch.arange(t, device=h.device).unsqueeze(0).expand(n, t)
            rope = self.rotary(h, positions)
            for layer in self.layers:
                h = layer(h, attention_mask=None, position_ids=positions,
                          position_embeddings=rope)
                h = h[0] if isinstance(h, tuple) else h
            if self.head is not None:
                h = self.head(self.norm(h))
            return h

    return Stage()


def worker(rank, args, port):
    C.set_thread_env(args.threads)
    C.dist_env(port)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    torch.manual_seed(C.INIT_SEED)
    full = LlamaForCausalLM(config(args))
    mod = stage_module(full, rank, args.llama_layers)
    assert args.llama_batch % args.m == 0
    stage = PipelineStage(mod, rank, RANKS, torch.device("cpu"))

    def loss_fn(out, tgt):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), tgt.reshape(-1))

    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[args.schedule]
    sched = cls(stage, n_microbatches=args.m, loss_fn=loss_fn)
    opt = torch.optim.SGD(mod.parameters(), lr=args.lr, momentum=0.0)
    g = torch.Generator().manual_seed(C.DATA_SEED)
    batches = []
    for _ in range(C.NUM_BATCHES):
        ids = torch.randint(0, args.llama_vocab, (args.llama_batch, args.llama_context + 1),
                            generator=g)
        batches.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))

    dist.barrier()
    measured = pipe_steps.run(sched, opt, batches, args, rank == 0, rank == RANKS - 1)
    pipe_steps.report(rank, RANKS, args, measured, args.llama_batch, {
        "bench": "pipe-llama-" + args.schedule,
        "workload": f"Llama-{args.llama_layers}x{args.llama_hidden}",
        "config": f"m={args.m} thr/rank={args.threads}", "m": args.m,
        "threads": args.threads, "batch": args.llama_batch,
    })
    dist.destroy_process_group()


if __name__ == "__main__":
    args = parse()
    C.set_thread_env(args.threads)
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(args, C.free_port()), nprocs=RANKS, join=True)
