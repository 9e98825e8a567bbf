"""Which training tasks can rl learn from: a model's pass rate at rl's sampling, by kind
of task, and how many of its groups have mixed outcomes (a group all right or all wrong
has zero advantage under GRPO and GiGPO, so it teaches nothing), under the outcome and
under rl's reward with partial credit for the chain's progress.

    python bench/rl_signal.py                                  # models/sft on rl, every kind
    python bench/rl_signal.py --family knowledge_base --per-shape 16
    python bench/rl_signal.py --split heldout_compose --per-shape 8 --max-turns 10
    python bench/rl_signal.py --split heldout_compose --progress-weight 0.25

Runs the first ``--per-shape`` tasks of each family and depth (hops, operations) of
``--split`` through the harness as rl rolls out (params.yaml's harness, ``rl.group_size``
samples a task, one batch) and prints a table: grounded success, the groups whose
outcomes differ, the mean share of the expert's tool results a failed episode obtained
(`rewards.progress`), and the groups whose rewards differ under rl's reward with
``--progress-weight`` (default: rl.progress_weight). ``--max-turns`` gives deeper tasks
the turns their chains need (compose at 4 hops and 4 operations: 9) where rl's budget is
less. Simplification: one seed; a depth's figure is over its first tasks in file order,
not a random draw.
"""

from __future__ import annotations

import argparse
import random
from collections import defaultdict
from pathlib import Path
from statistics import fmean

import torch

from agentrl.chat import get_format
from agentrl.config import EvalVariant, load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import load_registry
from agentrl.harness.build import build_engine
from agentrl.harness.loop import Harness
from agentrl.precision import stage_precision
from agentrl.rl.rewards import expert_results, outcome_rewards, progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", type=Path, default=Path("models/sft"))
    parser.add_argument("--split", default="rl")
    parser.add_argument("--family", default=None, help="only this task family")
    parser.add_argument("--per-shape", type=int, default=16, help="tasks of each depth")
    parser.add_argument("--max-turns", type=int, default=None, help="default: harness.max_turns")
    parser.add_argument(
        "--progress-weight", type=float, default=None, help="default: rl.progress_weight"
    )
    args = parser.parse_args()
    cfg = load_params(args.params)
    data = Path(cfg.base.paths.data) / "synth"
    chosen: dict[str, list[dict]] = defaultdict(list)
    for record in iter_records(data, args.split):
        shape = f"{record['family']} depth {record['depth']}"  # depth: the expert's calls
        if args.family in (None, record["family"]) and len(chosen[shape]) < args.per_shape:
            chosen[shape].append(record)
    shape_of = {r["id"]: s for s, rs in chosen.items() for r in rs}
    tasks = [r for rs in chosen.values() for r in rs]

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
        episodes = harness.run(tasks, samples=cfg.rl.group_size, seed=cfg.base.seed)
    finally:
        harness.close()
    weight = cfg.rl.progress_weight if args.progress_weight is None else args.progress_weight
    rl = cfg.rl.model_validate(cfg.rl.model_dump() | {"progress_weight": weight})
    rewards = outcome_rewards(episodes, rl, random.Random(cfg.base.seed), tasks)
    expert = {r["id"]: expert_results(r) for r in tasks}
    by_shape: dict[str, dict[str, list[tuple[bool, float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for episode, reward in zip(episodes, rewards, strict=True):
        share = progress(expert[episode.task_id], episode.observations)
        by_shape[shape_of[episode.task_id]][episode.task_id].append(
            (episode.grounded, share, reward)
        )

    print(f"{args.model} on {args.split}, T={settings.temperature}, {settings.max_turns} turns, "
          f"{cfg.rl.group_size} samples a task, progress_weight {weight}\n")  # fmt: skip
    print("| shape | tasks | grounded | groups with mixed outcomes | groups with any success "
          "| progress of failed episodes | groups with mixed rewards |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for shape in sorted(by_shape):
        groups = list(by_shape[shape].values())
        outcomes = [[g for g, _, _ in group] for group in groups]
        right, total = sum(map(sum, outcomes)), sum(map(len, outcomes))
        mixed = sum(0 < sum(o) < len(o) for o in outcomes)
        any_right = sum(any(o) for o in outcomes)
        failed = [share for group in groups for g, share, _ in group if not g]
        walked = f"{fmean(failed):.2f}" if failed else "–"
        varied = sum(len({r for _, _, r in group}) > 1 for group in groups)
        print(f"| {shape} | {len(groups)} | {right}/{total} ({right / total:.3f}) | "
              f"{mixed}/{len(groups)} | {any_right}/{len(groups)} | {walked} | "
              f"{varied}/{len(groups)} |")  # fmt: skip


if __name__ == "__main__":
    main()
