//! What `pipetrain train --help` shows after the flags: worked examples and the exit codes.

use crate::exit::Exit;

/// Worked examples shown under `pipetrain train --help`.
pub const EXAMPLES: &str = "\
Examples:
  # MLP-8x1024 on 2 stages, 1F1B, 20 steps (train is the default command)
  pipetrain --stages 2 --micro-batches 8

  # check against single-device training on the same data and device, every step (exit 3 if
  # max_rel_diff > 1e-5); --end-to-end compares once at the end, from the same initial weights
  pipetrain train --stages 2 --replicas 2 --optimizer adamw --lr 1e-3 --steps 200 --verify
  pipetrain train --stages 3 --micro-batches 4 --schedule gpipe --width 64 --steps 5 --verify --end-to-end
  pipetrain train --stages 2 --balance 5,4 --remat never --optimizer adam --lr 1e-3

  # data parallelism: 2 replicas × 2 stages, ZeRO-1 optimizer-state sharding, accumulation
  pipetrain train --stages 2 --replicas 2 --micro-batches 4 --zero 1 --optimizer adam
  pipetrain train --stages 1 --replicas 2 --accumulate 4 --width 64 --steps 5 --verify

  # chrome trace (open in ui.perfetto.dev): a track per worker, arrows from sends to receives
  pipetrain train --stages 4 --micro-batches 8 --steps 3 --profile trace.json

  # metrics per optimizer step (.csv or .jsonl) and a PNG of the loss curve
  pipetrain train --stages 2 --metrics run.csv --plot loss.png

  # flags from a TOML file (keys are flag names; flags on the command line win)
  #   run.toml:  stages = 2
  #              micro-batches = 4
  #              balance = [5, 4]
  #              verify = true
  pipetrain train --config run.toml --steps 50

  # models: ResNet-like CNN (batch norm: remat is never) and GPT-like decoder
  pipetrain train --model resnet --channels 16 --blocks 4 --image 32 --stages 2
  pipetrain train --model unet --channels 8 --depth 2 --image 16 --stages 3   # long skips across stages
  pipetrain plan --stages 4 --skip 0:3 --lowered   # skips sent straight from stage 0 to 3 (SK/RK)
  pipetrain train --model gpt --vocab 256 --context 64 --d-model 128 --heads 4 --layers 4
  pipetrain train --model gpt --tie-embeddings --stages 2   # embedding and head tied across stages
  pipetrain train --model gpt --context 128 --context-range 32..128   # a new length every step

  # checkpoints: save every 10 steps; resume under another layout; start from PyTorch weights
  pipetrain train --stages 2 --replicas 2 --steps 50 --checkpoint run.safetensors --checkpoint-every 10
  pipetrain train --stages 1 --steps 100 --resume run.safetensors --checkpoint run.safetensors
  pipetrain train --init torch_state_dict.safetensors --stages 2
  pipetrain eval --init run.safetensors

  # from PyTorch: torch.optim settings and defaults, lr schedules, clipping, state dicts
  pipetrain train --optimizer adamw --lr 1e-3 --lr-schedule cosine --warmup-steps 100 --min-lr 1e-5
  pipetrain train --stages 2 --replicas 2 --clip-grad-norm 1.0 --skip-nonfinite --verify
  pipetrain train --init torch_sd.safetensors --rename '^module\\.=' --checkpoint run.safetensors
  pipetrain export run.safetensors --format pytorch -o trained.safetensors

  # on a GPU (a build with --features cuda)
  pipetrain train --device cuda:0 --stages 2 --micro-batches 8
  pipetrain train --devices cuda:0,cuda:1 --stages 2 --replicas 2   # one GPU per stage

  # real data with a held-out split; accuracy (or perplexity) on it at the end
  pipetrain train --data mnist:data/mnist --width 784 --held-out 0.1 --steps 200
  pipetrain train --model resnet --data cifar10:data/cifar-10-batches-bin
  pipetrain train --model gpt --data text:input.txt --context 64
  pipetrain train --data tensors:data.safetensors --classes 3
  pipetrain eval --data mnist:data/mnist --width 784 --seed 0";

/// What `pipetrain train --help` shows after the flags: the worked examples and the exit codes.
pub fn after_help() -> String {
    format!("{EXAMPLES}\n\n{}", Exit::table())
}
