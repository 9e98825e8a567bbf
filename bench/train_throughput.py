"""Training speed: DeepSpeed step time against a plain torch loop on the same model and
batch, tokens per second, and model FLOP utilisation against a measured CPU matmul peak.

    python bench/train_throughput.py                  # sizes from params.yaml (model, sft)
    python bench/train_throughput.py --steps 30 --stage midtrain

FLOPs per step follow the PaLM appendix: 6·N·tokens for the weights plus 12·L·H·T·tokens
for attention (N = non-embedding parameters, L layers, H hidden size, T context).
The batch is a packed batch of two documents per row, as in training.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from transformers import AutoTokenizer

from agentrl.config import load_params
from agentrl.model.build import build_tiny
from agentrl.train.data import Example, collate, pack
from agentrl.train.loop import Trainer, cosine_with_warmup, lm_loss


def matmul_peak(size: int = 1024, repeats: int = 20) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--stage", default="sft")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    params = load_params(args.params)
    cfg = getattr(params, args.stage)
    tokenizer = AutoTokenizer.from_pretrained(f"{params.base.paths.models}/base")
    model = build_tiny(params.model, tokenizer, seed=0)
    half = cfg.context // 2
    docs = [
        Example(torch.randint(10, len(tokenizer), (half,)).tolist(), [1] * half)
        for _ in range(2 * cfg.micro_batch_size)
    ]
    batch = collate(pack(docs, cfg.context, 0, True), cfg.context, tokenizer.pad_token_id)
    tokens = cfg.micro_batch_size * cfg.context

    plain = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(plain.parameters(), lr=cfg.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(cfg))

    def plain_step() -> None:
        loss, _ = lm_loss(plain, batch, 256)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plain.parameters(), cfg.grad_clip)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)

    trainer = Trainer(
        cfg.model_copy(update={"grad_accum": 1}), model, tokenizer.pad_token_id, 0, "bench", "fp32"
    )

    def ds_step() -> None:
        loss, _ = lm_loss(trainer.engine, batch, 256)
        trainer.engine.backward(loss)
        trainer.engine.step()

    timings = {}
    for name, step in (("torch", plain_step), ("deepspeed", ds_step), ("torch_again", plain_step)):
        for _ in range(3):
            step()
        started = time.perf_counter()
        for _ in range(args.steps):
            step()
        timings[name] = (time.perf_counter() - started) / args.steps
    torch_time = min(timings["torch"], timings["torch_again"])
    embed = model.get_input_embeddings().weight.numel()
    n = sum(p.numel() for p in model.parameters()) - embed
    flops = (
        6 * n * tokens
        + 12 * params.model.num_layers * params.model.hidden_size * cfg.context * tokens
    )
    flops += 6 * embed * tokens  # the tied output projection is a matmul of the full vocabulary
    peak = matmul_peak()
    ds_time = timings["deepspeed"]
    print(
        f"batch={cfg.micro_batch_size}x{cfg.context} threads={torch.get_num_threads()} params={n + embed:,}"
    )
    print(
        f"torch_step_s={torch_time:.4f} deepspeed_step_s={ds_time:.4f} deepspeed_overhead={ds_time / torch_time - 1:+.1%}"
    )
    print(f"tokens_per_s torch={tokens / torch_time:.0f} deepspeed={tokens / ds_time:.0f}")
    print(
        f"matmul_peak_gflops={peak / 1e9:.1f} model_gflops_per_step={flops / 1e9:.2f} mfu={flops / ds_time / peak:.1%}"
    )


if __name__ == "__main__":
    main()
