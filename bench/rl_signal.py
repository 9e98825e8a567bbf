"""Which training tasks can rl learn from: a model's pass rate at rl's sampling, by kind
of task, and how many of its groups have mixed outcomes (a group all right or all wrong
has zero advantage under GRPO and GiGPO, so it teaches nothing).

    python bench/rl_signal.py                                  # models/sft on rl, every kind
    python bench/rl_signal.py --family knowledge_base --per-shape 16
    python bench/rl_signal.py --split heldout_compose --per-shape 8 --max-turns 10

Runs the first ``--per-shape`` tasks of each family and depth (hops, operations) of
``--split`` through the harness as rl rolls out (params.yaml's harness, ``rl.group_size``
samples a task, one batch) and prints a table. ``--max-turns`` gives deeper tasks the
turns their chains need (compose at 4 hops and 4 operations: 9) where rl's budget is less. Simplification: one seed; a depth's figure
is over its first tasks in file order, not a random draw.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import torch

from agentrl.chat import get_format
from agentrl.config import EvalVariant, load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import load_registry
from agentrl.harness.build import build_engine
from agentrl.harness.loop import Harness
from agentrl.precision import stage_precision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", type=Path, default=Path("models/sft"))
    parser.add_argument("--split", default="rl")
    parser.add_argument("--family", default=None, help="only this task family")
    parser.add_argument("--per-shape", type=int, default=16, help="tasks of each depth")
    parser.add_argument("--max-turns", type=int, default=None, help="default: harness.max_turns")
    args = parser.parse_args()
    cfg = load_params(args.params)
    data = Path(cfg.base.paths.data) / "synth"
    chosen: dict[str, list[dict]] = defaultdict(list)
    for record in iter_records(data, args.split):
        shape = f"{record['family']} depth {record['depth']}"  # rl tasks carry no expert calls
        if args.family in (None, record["family"]) and len(chosen[shape]) < args.per_shape:
            chosen[shape].append(record)
    shape_of = {r["id"]: s for s, rs in chosen.items() for r in rs}

    fmt = get_format(cfg.model.format)
    registry = load_registry(cfg.synth.envs, cfg.synth.heldout_tool_share, args.params)
    turns = {} if args.max_turns is None else {"max_turns": args.max_turns}
    settings = EvalVariant(name="signal", harness=turns).applied_to(cfg.harness)
    engine, tokenizer = build_engine(
        settings, args.model, fmt, stage_precision(cfg.base.precision, args.params)
    )
    torch.manual_seed(cfg.base.seed)
    harness = Harness(engine, tokenizer, fmt, registry, settings)
    try:
        episodes = harness.run(
            [r for rs in chosen.values() for r in rs], samples=cfg.rl.group_size, seed=cfg.base.seed
        )
    finally:
        harness.close()
    groups: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for episode in episodes:
        groups[shape_of[episode.task_id]][episode.task_id].append(int(episode.grounded))

    print(f"{args.model} on {args.split}, T={settings.temperature}, {settings.max_turns} turns, "
          f"{cfg.rl.group_size} samples a task\n")  # fmt: skip
    print("| shape | tasks | grounded | groups with mixed outcomes | groups with any success |")
    print("|---|---|---|---|---|")
    for shape in sorted(groups):
        by_task = list(groups[shape].values())
        right, total = sum(map(sum, by_task)), sum(map(len, by_task))
        mixed = sum(0 < sum(g) < len(g) for g in by_task)
        any_right = sum(sum(g) > 0 for g in by_task)
        print(f"| {shape} | {len(by_task)} | {right}/{total} ({right / total:.3f}) | "
              f"{mixed}/{len(by_task)} | {any_right}/{len(by_task)} |")  # fmt: skip


if __name__ == "__main__":
    main()
