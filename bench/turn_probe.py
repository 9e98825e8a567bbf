"""Turn accuracy under the expert's history: where a checkpoint's single turns go wrong.

    python bench/turn_probe.py --model models/sft --model runs/rl_screen/pivots/models/rl
    python bench/turn_probe.py --split heldout_tools --n 100 --model models/sft ...

Every assistant turn of the expert trajectories of the first --n tasks of an evaluation
split is a state (the pivot stage's candidates: the history up to that turn). Each
--model generates one greedy turn at every state through the harness and engine
(``Harness.one_turn``), judged by the pivot verifier (``agentrl.rl.turn_reward``): the
expert's call or one with the same observation, or an answer the task's verifier takes.
Episodes compound a turn's error into the turns after it; this isolates each turn, so
"answers wrong from the right observation" and "skips the second operation" show up as
the turn kind and index they are. The first --model is the reference the others are
paired against, state by state. Prints a table by family, turn kind and index, and writes
it to --out.

Simplification, stated: one greedy turn per state (no sampling), the expert's history
rendered as the pivot stage renders it (structured tool calls in the chat format).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from agentrl.chat import get_format
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import load_registry
from agentrl.harness.build import build_engine
from agentrl.harness.loop import Harness
from agentrl.precision import stage_precision
from agentrl.rl.pivots import PivotJudge, candidates, fits, profile
from agentrl.stats import paired_difference


def turn_outcomes(model: Path, params_path: Path, split: str, n: int) -> dict[str, int]:
    """Pass (1) or fail (0) of ``model``'s greedy turn at every expert state of the first
    ``n`` tasks of ``split``, keyed "family|kind|index|pivot id"."""
    params = load_params(params_path)
    fmt = get_format(params.model.format)
    cfg = params.harness.model_copy(update={"temperature": 0.0})
    precision = stage_precision(params.base.precision, params.file)
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    engine, tokenizer = build_engine(cfg, model, fmt, precision)
    records = list(iter_records(Path(params.base.paths.data) / "synth", split, n))
    states = [
        p
        for p in candidates(records)
        if fits(p, tokenizer, fmt, cfg.context_limit, cfg.max_new_tokens)
    ]
    harness = Harness(engine, tokenizer, fmt, registry, cfg)
    try:
        judge = PivotJudge(registry, fmt, harness.sandbox)
        rows = profile(harness, judge, states, 1, params.base.seed, params.rl.grounded_only)
        return {f"{p.record['family']}|{p.kind}|{p.index}|{p.id}": int(rate) for p, rate, _ in rows}
    finally:
        harness.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--n", type=int, default=200, help="tasks (all their expert turns)")
    parser.add_argument("--out", type=Path, default=Path("reports/rl_screen/turns.md"))
    args = parser.parse_args()
    outcomes = {m: turn_outcomes(m, args.params, args.split, args.n) for m in args.model}
    reference, *others = args.model
    keys = sorted(outcomes[reference])
    lines = [
        f"Greedy turns under the expert's history, {args.split}, first {args.n} tasks "
        f"(passed / states; reference {reference}):",
        "",
        "| family | kind | turn | " + " | ".join(str(m) for m in args.model) + " |",
        "|---" * (3 + len(args.model)) + "|",
    ]
    groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for key in keys:
        family, kind, index, _ = key.split("|")
        groups[(family, kind, index)].append(key)
    for (family, kind, index), members in sorted(groups.items()):
        cells = [f"{sum(outcomes[m][k] for k in members)}/{len(members)}" for m in args.model]
        lines.append(f"| {family} | {kind} | {index} | " + " | ".join(cells) + " |")
    lines += ["", "| checkpoint | kind | vs reference, paired by state |", "|---|---|---|"]
    for model in others:
        for kind in ("call", "answer"):
            chosen = [k for k in keys if k.split("|")[1] == kind]
            diff = paired_difference(
                [outcomes[reference][k] for k in chosen], [outcomes[model][k] for k in chosen]
            )
            lines.append(f"| {model} | {kind} | {diff} |")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
