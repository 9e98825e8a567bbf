"""RL step wall time: our rl loop against TRL's GRPOTrainer, same model, same single-turn
tool task, same group size, batch and lengths, both on this CPU.

    pip install -e '.[bench]'                 # TRL and its datasets/accelerate, bench only
    python bench/trl_compare.py               # models/sft, 8 tasks x G=8, 128 new tokens, 4 steps
    python bench/trl_compare.py --precision fp32  # both sides in float32 (default: both bf16
                                                  # where the CPU has it, TRL's bf16=True)

The task is the first turn of `eval/test` tasks (prompt: the rendered system + user turn
with its tools). TRL is rewarded for a valid tool call (parsed against the offered
schemas), ours by the verifier (one turn, so outcomes are mostly 0); both run every step's
full update whatever the rewards (our dynamic sampling is off, TRL's zero-std groups
still train), so the time compared is generation + scoring + loss + optimizer step.
The first step of each is warm-up and not counted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from agentrl.chat import get_format, parse, render_text
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import Registry
from agentrl.model.build import load_model_dir
from agentrl.precision import stage_precision
from agentrl.rl.trainer import RLTrainer


def trl_step_seconds(args, records, fmt) -> list[float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = load_model_dir(Path(args.model), fmt)
    tools_of = {}
    prompts = []
    for record in records:
        prompt = render_text(fmt, record["messages"][:1], record["tools"], True)[0]
        tools_of[prompt] = record["tools"]
        prompts.append(prompt)

    def valid_call(prompts: list[str], completions: list[str], **_: object) -> list[float]:
        out = []
        for prompt, completion in zip(prompts, completions, strict=True):
            parsed = parse(completion, fmt, tools_of[prompt])
            out.append(float(bool(parsed.calls) and not parsed.errors))
        return out

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.tick = time.perf_counter()

        def on_step_end(self, *_, **__):
            times.append(time.perf_counter() - self.tick)

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.tasks * args.group,
        num_generations=args.group,
        max_completion_length=args.max_new_tokens,
        max_steps=args.steps,
        learning_rate=args.lr,
        beta=0.0,
        temperature=1.0,
        use_cpu=True,
        bf16=args.precision == "bf16",
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=valid_call,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts * args.steps}),
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    trainer.train()
    return times


def our_step_seconds(args, records, fmt, params) -> list[float]:
    model, tokenizer = load_model_dir(Path(args.model), fmt)
    rl = params.rl.model_copy(
        update={
            "steps": args.steps,
            "tasks_per_step": args.tasks,
            "group_size": args.group,
            "dynamic_sampling": False,
            "overlong": "keep",
            "lr": args.lr,
            "mini_batch": args.tasks * args.group,
            "checkpoint_every": 10**6,
        }
    )
    harness = params.harness.model_copy(
        update={"max_turns": 1, "max_new_tokens": args.max_new_tokens}
    )
    registry = Registry(params.synth.envs, params.synth.heldout_tool_share)
    trainer = RLTrainer(rl, harness, model, tokenizer, fmt, registry, 0, "bench", args.precision)
    _, history, _ = trainer.train(records, Path(tempfile.mkdtemp()), lambda *_: None)
    parts = ("time_rollout_s", "time_reference_s", "time_update_s", "time_sync_s")
    times = [sum(h.get(p, 0.0) for p in parts) for h in history]
    trainer.harness.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", default="models/sft")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    args = parser.parse_args()
    params = load_params(args.params)
    args.precision = stage_precision(args.precision, "--precision")
    fmt = get_format(params.model.format)
    records = list(iter_records(Path(params.base.paths.data) / "synth", "test", args.tasks))
    threads = torch.get_num_threads()
    ours = our_step_seconds(args, records, fmt, params)[1:]
    torch.set_num_threads(threads)
    theirs = trl_step_seconds(args, records, fmt)[1:]
    mean_ours, mean_theirs = sum(ours) / len(ours), sum(theirs) / len(theirs)
    print(
        f"{args.tasks} tasks x G={args.group}, {args.max_new_tokens} new tokens, "
        f"threads={threads}, precision {args.precision} on both sides"
    )
    print(f"agentrl rl step: {mean_ours:.2f} s  (steps {', '.join(f'{t:.2f}' for t in ours)})")
    print(f"TRL GRPOTrainer: {mean_theirs:.2f} s  (steps {', '.join(f'{t:.2f}' for t in theirs)})")
    print(f"ratio: {mean_ours / mean_theirs:.2f} of TRL's time")


if __name__ == "__main__":
    main()
