"""Rollout speed: generated tokens and episodes per second with N concurrent episodes
against a one-episode-at-a-time loop over the same hf engine and tasks.

    python bench/rollout_throughput.py                       # models/sft, eval/test, 64 episodes
    python bench/rollout_throughput.py --model models/sft --episodes 64 --sequential 16

The sequential loop runs only the first --sequential episodes (it is slow); rates are per
second either way, so the ratio compares like with like.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from agentrl.chat import get_format
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import Registry
from agentrl.harness.engine import HFEngine
from agentrl.harness.loop import Harness
from agentrl.model.build import load_model_dir


def rate(harness: Harness, records: list[dict], batch: int) -> tuple[float, float]:
    started, tokens = time.perf_counter(), 0
    for start in range(0, len(records), batch):
        episodes = harness.run(records[start : start + batch], seed=start)
        tokens += sum(t.generated_tokens for e in episodes for t in e.turns)
    seconds = time.perf_counter() - started
    return tokens / seconds, len(records) / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", default="models/sft")
    parser.add_argument("--split", default="test")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--sequential", type=int, default=16)
    args = parser.parse_args()
    params = load_params(args.params)
    fmt = get_format(params.model.format)
    model, tokenizer = load_model_dir(Path(args.model), fmt)
    records = list(iter_records(Path(params.base.paths.data) / "synth", args.split, args.episodes))
    harness = Harness(
        HFEngine(model, tokenizer),
        tokenizer,
        fmt,
        Registry(params.synth.envs, params.synth.heldout_tool_share),
        params.harness,
    )
    print(f"threads={torch.get_num_threads()} episodes={len(records)} model={args.model}")
    batch_tok, batch_eps = rate(harness, records, len(records))
    print(f"concurrent: {batch_tok:.0f} generated tok/s, {batch_eps:.2f} episodes/s")
    seq_tok, seq_eps = rate(harness, records[: args.sequential], 1)
    print(f"sequential: {seq_tok:.0f} generated tok/s, {seq_eps:.2f} episodes/s")
    print(f"speed-up: {batch_tok / seq_tok:.1f}x tokens, {batch_eps / seq_eps:.1f}x episodes")
    harness.close()


if __name__ == "__main__":
    main()
