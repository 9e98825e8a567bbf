"""When does the tiny model learn to copy? Train the default model from scratch on
"Repeat exactly: ..." items only and score greedy copies of spans from the eval world.

    python bench/copy_emergence.py                          # 8x128 rows, 3,000 steps
    python bench/copy_emergence.py --batch 16 --steps 1500 --kv-heads 2
    python bench/copy_emergence.py --layers 4             # depth against wall time

Copying a string from the context into a call is what the sft targets need (exact first
call; renamed and held-out tool names), and in a from-scratch model it had not appeared by
3 M tokens. This isolates that skill: loss on the copy target only, the same model code,
tokenizer (models/base) and packing as training, plain torch (the DeepSpeed overhead is
measured separately by bench/train_throughput.py). Prints loss, whole-span copy accuracy
and one sample every --every steps.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from transformers import AutoTokenizer

from agentrl.chat import get_format
from agentrl.chat.render import render_ids_batch
from agentrl.config import load_params
from agentrl.envs.world import World
from agentrl.model.build import build_tiny
from agentrl.model.generate import greedy_batch
from agentrl.train.data import build_examples, collate, pack
from agentrl.train.loop import lm_loss


def copy_record(index: int, partition: str) -> dict:
    rng = random.Random(f"bench:{partition}:{index}")
    world = World(rng, partition)  # type: ignore[arg-type]
    draws = [world.entity, world.word, lambda: str(world.number(0, 99999))]
    span = " ".join(str(rng.choice(draws)()) for _ in range(rng.randint(1, 8)))
    return {
        "messages": [
            {"role": "user", "content": f"Repeat exactly: {span}"},
            {"role": "assistant", "content": span},
        ],
        "tools": None,
    }


def copy_accuracy(model, tokenizer, fmt, records: list[dict]) -> tuple[float, str]:
    model.eval()
    prompts = [
        ids
        for ids, _ in render_ids_batch(
            tokenizer, fmt, [(r["messages"][:1], None) for r in records], add_generation_prompt=True
        )
    ]
    rows = greedy_batch(model, tokenizer, prompts, 60)
    got = [tokenizer.decode(row, skip_special_tokens=True).strip() for row in rows]
    wanted = [r["messages"][1]["content"] for r in records]
    model.train()
    return sum(g == w for g, w in zip(got, wanted, strict=True)) / len(records), (
        f"{wanted[0]!r} -> {got[0]!r}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--kv-heads", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--every", type=int, default=250)
    args = parser.parse_args()
    params = load_params(args.params)
    model_cfg = params.model
    if args.kv_heads is not None:
        model_cfg = model_cfg.model_copy(update={"num_kv_heads": args.kv_heads})
    if args.layers is not None:
        model_cfg = model_cfg.model_copy(update={"num_layers": args.layers})
    fmt = get_format(params.model.format)
    tokenizer = AutoTokenizer.from_pretrained(f"{params.base.paths.models}/base")
    examples, _ = build_examples(
        [copy_record(i, "train") for i in range(30_000)],
        tokenizer,
        fmt,
        "assistant",
        args.context,
        "drop",
    )
    rows = pack(examples, args.context, 0, True)
    evals = [copy_record(i, "eval") for i in range(100)]
    model = build_tiny(model_cfg, tokenizer, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50))
    rng, order, started = random.Random(0), [], time.perf_counter()
    for step in range(1, args.steps + 1):
        if len(order) < args.batch:
            order = list(range(len(rows)))
            rng.shuffle(order)
        batch = collate(
            [rows[order.pop()] for _ in range(args.batch)], args.context, tokenizer.pad_token_id
        )
        loss, _ = lm_loss(model, batch, 256)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % args.every == 0:
            accuracy, sample = copy_accuracy(model, tokenizer, fmt, evals)
            print(
                f"step={step} seconds={time.perf_counter() - started:.0f} loss={loss.item():.3f} "
                f"copy_exact={accuracy:.2f} sample={sample}",
                flush=True,
            )


if __name__ == "__main__":
    main()
