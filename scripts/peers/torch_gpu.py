"""PyTorch peer of `pipetrain bench --device cuda:N`: the same workload on the same GPU.

fp32 with TF32 off (as pipetrain computes), or with --bf16 the forward and loss under
torch.autocast(bfloat16) (pipetrain --precision bf16); SGD at lr 0.01, seeded init and data; a
step is timed between synchronize() calls. --device cpu runs the same on the CPU. With --m > 1 the batch is cut into m micro-batches
whose gradients accumulate before one optimizer step (a pipeline's work on one GPU). Prints one
JSON line: {"median": samples/s, "rates": [...], "torch": version, "device": GPU name}.

  model mlp: x[B, W] -> L x (Linear(W, W) + ReLU) -> Linear(W, 10); cross-entropy
  model gpt: token + position embeddings, L pre-LayerNorm blocks (causal self-attention with
             q/k/v/out projections, MLP 4x with GELU), final LayerNorm, unembedding;
             next-token cross-entropy over B sequences of --context tokens
"""
import argparse
import json
import math
import statistics
import time

import torch
from torch import nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        split = lambda y: y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, context, d, heads, layers):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--tf32", action="store_true",
                   help="matmuls and convolutions on TF32 tensor cores (pipetrain --matmul-precision tf32)")
    p.add_argument("--bf16", action="store_true",
                   help="forward and loss under torch.autocast(bfloat16) (pipetrain --precision bf16)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads (torch.set_num_threads); 0 leaves torch's default")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    if a.model == "mlp":
        blocks = []
        for _ in range(a.layers):
            blocks += [nn.Linear(a.width, a.width), nn.ReLU()]
        model = nn.Sequential(*blocks, nn.Linear(a.width, 10)).to(dev)
        g = torch.Generator(device=dev).manual_seed(1234)
        data = [(torch.randn(a.batch, a.width, device=dev, generator=g),
                 torch.randint(0, 10, (a.batch,), device=dev, generator=g)) for _ in range(5)]
        loss_of = lambda out, y: F.cross_entropy(out, y)
    else:
        heads = a.heads if a.width % a.heads == 0 else 1
        model = Gpt(a.vocab, a.context, a.width, heads, a.layers).to(dev)
        g = torch.Generator(device=dev).manual_seed(1234)
        data = []
        for _ in range(5):
            seq = torch.randint(0, a.vocab, (a.batch, a.context + 1), device=dev, generator=g)
            data.append((seq[:, :-1], seq[:, 1:]))
        loss_of = lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rates = []
    for step in range(a.warmup + a.steps):
        x, y = data[step % len(data)]
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for xs, ys in zip(x.tensor_split(a.m), y.tensor_split(a.m)):
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16):
                loss = loss_of(model(xs), ys) * (xs.shape[0] / x.shape[0])
            loss.backward()
        opt.step()
        sync()
        if step >= a.warmup:
            rates.append(a.batch / (time.perf_counter() - t0))
    print(json.dumps({"median": statistics.median(rates), "rates": rates,
                      "torch": torch.__version__, "bf16": a.bf16,
                      "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"}))


if __name__ == "__main__":
    main()
