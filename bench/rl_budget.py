"""Gain against rl minutes: what a longer rl budget buys, from a screen's finished arms.

    python bench/rl_budget.py reports/rl_screen_sft240

Arms of ``bench/rl_screen.py`` with the same overrides differ only in their time budget
(``--budget-min``), so they trace one recipe's gain over sft as its rl loop runs longer.
For every such recipe this prints each budget's paired difference to sft per view (the
same tasks, Newcombe's 95% interval) and to the next shorter budget, and draws
``gain_vs_minutes.png`` next to ``screen.json`` (sft at 0 minutes). This is what the
default's ``rl.steps`` is chosen from. Simplification, stated: one seed per budget; the
shorter and longer runs share their first steps only when their step pace agrees.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from agentrl.stats import Paired, paired_difference


def recipes(arms: dict[str, dict]) -> dict[str, list[str]]:
    """Arms grouped by their overrides, shortest loop first; recipes with one budget out.

    >>> recipes({"a": {"overrides": {"x": 1}, "loop_s": 9}, "b": {"overrides": {"x": 1},
    ...          "loop_s": 4}, "c": {"overrides": {}, "loop_s": 5}})
    {'x=1': ['b', 'a']}
    """
    groups: dict[str, list[str]] = {}
    for name, arm in arms.items():
        key = ", ".join(f"{k}={v}" for k, v in sorted(arm["overrides"].items()))
        groups.setdefault(key, []).append(name)
    return {
        key: sorted(names, key=lambda n: arms[n]["loop_s"])
        for key, names in groups.items()
        if len(names) > 1
    }


def outcomes_of(cells: dict[str, dict], name: str, view: str) -> list[bool] | None:
    cell = cells.get(f"{name}.{view}")
    return [bool(g) for g in cell["grounded"]] if cell else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="a bench/rl_screen.py --results dir")
    args = parser.parse_args()
    screen = json.loads((args.results / "screen.json").read_text())
    arms, cells = screen["arms"], screen["cells"]
    views = sorted({key.split(".", 1)[1] for key in cells if key.startswith("sft.")})
    groups = recipes(arms)
    if not groups:
        raise SystemExit(f"bench: {args.results}/screen.json has no recipe at two budgets")
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4), squeeze=False)
    for ax, (recipe, names) in zip(axes[0], groups.items(), strict=True):
        print(f"\n{recipe}\n\n| arm | steps | loop min | view | vs sft | vs shorter |")
        print("|---|---|---|---|---|---|")
        for view in views:
            sft = outcomes_of(cells, "sft", view)
            points: list[tuple[float, Paired]] = []
            shorter = None
            for name in names:
                mine = outcomes_of(cells, name, view)
                if sft is None or mine is None:
                    continue
                gain = paired_difference(sft, mine)
                step = paired_difference(shorter, mine) if shorter else ""
                minutes = arms[name]["loop_s"] / 60
                print(
                    f"| {name} | {arms[name]['steps']} | {minutes:.1f} | {view} | {gain} | {step} |"
                )
                points.append((minutes, gain))
                shorter = mine
            if points:
                x = [0.0] + [m for m, _ in points]
                y = [0.0] + [p.difference for _, p in points]
                low = [0.0] + [p.difference - p.low for _, p in points]
                high = [0.0] + [p.high - p.difference for _, p in points]
                ax.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=view)
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.set(xlabel="rl loop minutes (2 cores)", ylabel="grounded success - sft's")
        ax.set_title(textwrap.fill(recipe, 70), fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = args.results / "gain_vs_minutes.png"
    fig.savefig(out, dpi=110, metadata={"Software": None})
    print(f"\n{out}")


if __name__ == "__main__":
    main()
