"""Context strategies on eval/long_horizon: peak context, processed tokens and success.

    python bench/long_horizon.py                          # models/sft, 24 tasks, 2 samples
    python bench/long_horizon.py --model models/rl --tasks 100 --samples 4

``none`` runs with a context large enough for the whole episode (--large, default 4096;
the default model was trained on 1024 positions, so its turns past that are out of
distribution); ``window``, ``summary`` and ``adaptive`` run within harness.context_limit.
Processed tokens are what a cache-less engine attends over per episode (every turn's
prompt plus its generation), the cost compaction exists to cut.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from agentrl.chat import get_format
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import Registry
from agentrl.eval.suite import check_turn_budget
from agentrl.harness.engine import HFEngine
from agentrl.harness.loop import Harness
from agentrl.harness.metrics import summarize
from agentrl.model.build import load_model_dir


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", default="models/sft")
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--large", type=int, default=4096, help="context_limit of `none`")
    parser.add_argument(
        "--max-turns", type=int, default=24, help="at least the longest expert's (summaries count)"
    )
    args = parser.parse_args()
    params = load_params(args.params)
    fmt = get_format(params.model.format)
    model, tokenizer = load_model_dir(Path(args.model), fmt)
    records = list(iter_records(Path(params.base.paths.data) / "synth", "long_horizon", args.tasks))
    check_turn_budget(records, args.max_turns, "--max-turns", "long_horizon")
    registry = Registry(params.synth.envs, params.synth.heldout_tool_share)
    print(
        f"{len(records)} long_horizon tasks x {args.samples} samples, model={args.model}, "
        f"max_turns={args.max_turns}, limit={params.harness.context_limit}"
    )
    header = f"{'strategy':<9} {'limit':>5} {'peak':>5} {'processed':>9} {'turns':>5} "
    header += f"{'restarts':>8} {'success':>7} {'grounded':>8} {'calls ok':>8} {'s':>6}"
    print(header)
    for strategy in ("none", "window", "summary", "adaptive"):
        limit = args.large if strategy == "none" else params.harness.context_limit
        cfg = params.harness.model_copy(
            update={"context": strategy, "context_limit": limit, "max_turns": args.max_turns}
        )
        harness = Harness(HFEngine(model, tokenizer), tokenizer, fmt, registry, cfg)
        started = time.perf_counter()
        episodes = harness.run(records, samples=args.samples, seed=params.base.seed)
        seconds = time.perf_counter() - started
        harness.close()
        figures = summarize(episodes)
        calls_ok = 1 - figures["tool_error_rate"]
        print(
            f"{strategy:<9} {limit:>5} {figures['peak_context']:>5} "
            f"{figures['processed_tokens']:>9.0f} {figures['turns']:>5.1f} "
            f"{figures['compactions'] / len(episodes):>8.2f} {figures['success']:>7.3f} "
            f"{figures['grounded_success']:>8.3f} {calls_ok:>8.3f} {seconds:>6.1f}"
        )


if __name__ == "__main__":
    main()
