"""fp32 against bf16, side by side in one run, on the default model: the speed of every
stage that runs it, and how far rollout and trainer log-probs part at rl step 1.

    python bench/precision.py                          # models/{base,midtrain,sft}, ~15 min
    python bench/precision.py --train-steps 4 --rl-tasks 2 --eval-tasks 16

Every figure is measured on the same data and seeds at both precisions, in this process,
one measurement at a time (2 cores: never two torch jobs at once):

- **the hardware's ceiling**: a 2048x576 by 576x1536 matmul (GFLOP/s) and a forward pass of
  4x512 tokens through ``models/base`` keeping one position's logits (tokens/s), float32
  against bf16 weights. No stage can gain more than these; they differ between machines
  that all report ``avx512_bf16`` (AMD EPYCs measured here: 4.4x and 2.8x on one, 2.5x and
  1.8x on another), so compare a stage's ratio with them.

- **midtrain, sft training**: the DeepSpeed loop of ``train/loop.py`` on the stage's own
  packed rows from its own input model; tokens/s over ``--train-steps`` steps after one
  warm-up step.
- **rl rollout generation**: one step's rollouts (``--rl-tasks`` x ``rl.group_size``
  episodes, ``hf`` engine, the harness and sampling of params.yaml), sampled tokens/s, for
  three engines: fp32 (the module the trainer updates), bf16 autocast over that float32
  module, and the bf16 copy the rl stage uses (refreshed after every update).
- **rl update**: ``RLTrainer.update`` on each trainer's own step-1 rollouts; tokens/s.
- **log-prob gap at step 1, before any update**: mean |rollout log-prob - trainer
  log-prob| over the sampled tokens and the truncated-IS weights min(pi_train/pi_rollout,
  rl.mismatch_cap) that the mismatch correction would apply, for each rollout engine
  against the trainer of its precision.
- **eval episodes**: greedy episodes on eval/test through the harness (the eval stage's
  headline variant), the engine's weights loaded in the precision; seconds per episode.

Simplifications: the rl update's tokens/s is over each precision's own rollouts (their
lengths differ a little); dynamic sampling is off so that both do the same work.
"""

from __future__ import annotations

import argparse
import gc
import math
import tempfile
import time
from pathlib import Path
from statistics import fmean
from typing import Any

import torch

from agentrl.chat import get_format
from agentrl.config import Params, load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import load_registry
from agentrl.harness.engine import HFEngine
from agentrl.harness.loop import Harness
from agentrl.model.build import load_model_dir
from agentrl.precision import DTYPES, Resolved
from agentrl.rl.batch import to_sequences
from agentrl.rl.trainer import RLTrainer, StepData
from agentrl.train.loop import Trainer
from agentrl.train.run import training_rows

PRECISIONS: tuple[Resolved, ...] = ("fp32", "bf16")
SOURCES = {"midtrain": ("base", "midtrain"), "sft": ("midtrain", "sft")}  # model dir, data split


def ceiling(params: Params) -> list[tuple[str, float, float, str]]:
    """What bf16 gives on this CPU before any pipeline code: a matmul and a forward."""
    a, b = torch.randn(2048, 576), torch.randn(576, 1536)
    flops = {}
    for precision in PRECISIONS:
        x, y = a.to(DTYPES[precision]), b.to(DTYPES[precision])
        for _ in range(5):
            x @ y
        tick, repeats = time.perf_counter(), 50
        for _ in range(repeats):
            x @ y
        flops[precision] = 2 * 2048 * 576 * 1536 * repeats / (time.perf_counter() - tick) / 1e9
    fmt = get_format(params.model.format)
    ids = torch.randint(0, 10_000, (4, 512))
    forward = {}
    for precision in PRECISIONS:
        model, _ = load_model_dir(Path(params.base.paths.models) / "base", fmt, DTYPES[precision])
        with torch.no_grad():
            model(input_ids=ids, logits_to_keep=1)
            tick, repeats = time.perf_counter(), 4
            for _ in range(repeats):
                model(input_ids=ids, logits_to_keep=1)
        forward[precision] = ids.numel() * repeats / (time.perf_counter() - tick)
        del model
    return [
        ("matmul 2048x576 @ 576x1536", flops["fp32"], flops["bf16"], "GFLOP/s"),
        ("forward 4x512, models/base", forward["fp32"], forward["bf16"], "tokens/s"),
    ]


def train_tokens_per_s(params: Params, stage: str, precision: Resolved, steps: int) -> float:
    source, split = SOURCES[stage]
    fmt = get_format(params.model.format)
    model, tokenizer = load_model_dir(Path(params.base.paths.models) / source, fmt)
    rows, _, _ = training_rows(stage, params, split, tokenizer, params.file)
    cfg = getattr(params, stage).model_copy(
        update={"max_steps": steps + 1, "log_every": 1, "eval_every": 10**6,
                "checkpoint_every": 10**6}
    )  # fmt: skip
    trainer = Trainer(cfg, model, tokenizer.pad_token_id, params.base.seed, "bench", precision)
    with tempfile.TemporaryDirectory() as ckpt:
        result = trainer.train(rows, [], Path(ckpt), lambda *_: None, progress=False)
    timed = result.history[1:]  # the first step warms up
    return sum(h["tokens_per_s"] * h["step_time_s"] for h in timed) / sum(
        h["step_time_s"] for h in timed
    )


def rl_trainer(params: Params, precision: Resolved, tasks: int) -> RLTrainer:
    fmt = get_format(params.model.format)
    model, tokenizer = load_model_dir(Path(params.base.paths.models) / "sft", fmt)
    cfg = params.rl.model_copy(update={"tasks_per_step": tasks, "dynamic_sampling": False})
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    seed = params.base.seed + params.rl.seed
    return RLTrainer(cfg, params.harness, model, tokenizer, fmt, registry, seed, "b", precision)


def step1_gap(trainer: RLTrainer, data: StepData) -> dict[str, float]:
    """Rollout vs trainer log-probs on the sampled tokens, before any update."""
    sequences = to_sequences(
        data.drawn_episodes, [[0.0] * len(e.turns) for e in data.drawn_episodes]
    )
    trainer.engine.eval()
    gaps, weights = [], []
    for seq, logp in zip(
        sequences, trainer.policy_update.logprobs(trainer.engine.module, sequences), strict=True
    ):
        for taken, rollout, mask in zip(logp.tolist(), seq.rollout_logp, seq.mask, strict=True):
            if mask:
                gaps.append(abs(taken - rollout))
                weights.append(min(math.exp(taken - rollout), trainer.cfg.mismatch_cap))
    trainer.engine.train()
    return {
        "gap_mean": fmean(gaps),
        "gap_max": max(gaps),
        "is_weight_mean": fmean(weights),
        "is_weight_min": min(weights),
        "is_weight_max": max(weights),
        "is_capped_share": fmean(w == trainer.cfg.mismatch_cap for w in weights),
        "tokens": float(len(gaps)),
    }


def rollout_figures(data: StepData) -> dict[str, float]:
    seconds = data.ended - data.began
    return {"tokens_per_s": data.generated / seconds, "seconds": seconds,
            "tokens": float(data.generated)}  # fmt: skip


def rl_figures(params: Params, tasks: int) -> dict[str, dict[str, Any]]:
    records = list(iter_records(Path(params.base.paths.data) / "synth", "rl"))
    out: dict[str, dict[str, Any]] = {}
    for precision in PRECISIONS:
        trainer = rl_trainer(params, precision, tasks)
        data = trainer.collect(records, 0)
        out[f"rollout {precision}"] = rollout_figures(data) | step1_gap(trainer, data)
        if precision == "fp32":  # the alternative to a bf16 copy: autocast over the module
            trainer.rollouts.position = 0
            with torch.autocast("cpu", dtype=torch.bfloat16):
                shared = trainer.collect(records, 0)
            out["rollout bf16 autocast"] = rollout_figures(shared)
            autocast_rollouts = shared  # its gap: against the bf16 trainer, below
        else:
            out["rollout bf16 autocast"] |= step1_gap(trainer, autocast_rollouts)
        update = trainer.update(data)
        out[f"update {precision}"] = {"tokens_per_s": update["update_tokens_per_s"],
                                      "seconds": update["time_update_s"]}  # fmt: skip
        trainer.harness.close()
        del trainer
        gc.collect()
    return out


def eval_seconds_per_episode(params: Params, precision: Resolved, tasks: int) -> float:
    fmt = get_format(params.model.format)
    model, tokenizer = load_model_dir(
        Path(params.base.paths.models) / "sft", fmt, DTYPES[precision]
    )
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    records = list(iter_records(Path(params.base.paths.data) / "synth", "test", tasks))
    greedy = params.harness.model_copy(update={"temperature": 0.0})
    harness = Harness(HFEngine(model, tokenizer), tokenizer, fmt, registry, greedy)
    tick = time.perf_counter()
    episodes = harness.run(records, samples=1, seed=params.base.seed + params.eval.seed)
    seconds = time.perf_counter() - tick
    harness.close()
    grounded = fmean(e.grounded for e in episodes)
    print(f"  eval {precision}: {len(episodes)} greedy episodes, grounded {grounded:.3f}")
    return seconds / len(episodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--train-steps", type=int, default=4)
    parser.add_argument("--rl-tasks", type=int, default=2)
    parser.add_argument("--eval-tasks", type=int, default=16)
    parser.add_argument("--skip", nargs="*", default=[], choices=["ceiling", "train", "rl", "eval"])
    args = parser.parse_args()
    params = load_params(args.params)
    torch.manual_seed(params.base.seed)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    rows: list[tuple[str, float, float, str]] = []
    if "ceiling" not in args.skip:
        rows += ceiling(params)
    if "train" not in args.skip:
        for stage in SOURCES:
            speed = {p: train_tokens_per_s(params, stage, p, args.train_steps) for p in PRECISIONS}
            print(f"  {stage} training tokens/s: {speed}", flush=True)
            rows.append((f"{stage} training", speed["fp32"], speed["bf16"], "tokens/s"))
    if "rl" not in args.skip:
        rl = rl_figures(params, args.rl_tasks)
        for name, figures in rl.items():
            shown = ", ".join(f"{k} {v:.3g}" for k, v in figures.items())
            print(f"  {name}: {shown}", flush=True)
        rows.append(("rl rollout generation (bf16 copy)", rl["rollout fp32"]["tokens_per_s"],
                     rl["rollout bf16"]["tokens_per_s"], "sampled tokens/s"))  # fmt: skip
        rows.append(("rl rollout generation (bf16 autocast)", rl["rollout fp32"]["tokens_per_s"],
                     rl["rollout bf16 autocast"]["tokens_per_s"], "sampled tokens/s"))  # fmt: skip
        rows.append(("rl update", rl["update fp32"]["tokens_per_s"],
                     rl["update bf16"]["tokens_per_s"], "tokens/s"))  # fmt: skip
        print("\n| rollout engine | trainer | gap mean | gap max | IS weight mean [min, max] "
              "| capped share |\n|---|---|---|---|---|---|")  # fmt: skip
        for name, trainer in (("rollout fp32", "fp32"), ("rollout bf16", "bf16 autocast"),
                              ("rollout bf16 autocast", "bf16 autocast")):  # fmt: skip
            f = rl[name]
            print(f"| {name.removeprefix('rollout ')} | {trainer} | {f['gap_mean']:.2e} | "
                  f"{f['gap_max']:.2e} | {f['is_weight_mean']:.4f} [{f['is_weight_min']:.3f}, "
                  f"{f['is_weight_max']:.3f}] | {f['is_capped_share']:.4f} |")  # fmt: skip
    if "eval" not in args.skip:
        per = {p: eval_seconds_per_episode(params, p, args.eval_tasks) for p in PRECISIONS}
        rows.append(("eval episodes", 1 / per["fp32"], 1 / per["bf16"], "episodes/s"))
    print("\n| what | fp32 | bf16 | bf16 / fp32 | unit |\n|---|---|---|---|---|")
    for name, fp32, bf16, unit in rows:
        print(f"| {name} | {fp32:.4g} | {bf16:.4g} | {bf16 / fp32:.2f}x | {unit} |")


if __name__ == "__main__":
    main()
