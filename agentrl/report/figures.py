"""PNG figures of the report, drawn with matplotlib's Agg backend from the DVC plot files
and metrics/eval.json. PNGs carry no software/date metadata, so an unchanged run redraws
identical bytes."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from agentrl.config import CONTEXT_STRATEGIES


def read_tsv(path: Path) -> list[dict[str, float | str]]:
    """Rows of a DVC plot file, numbers as floats, blanks dropped; [] when it is absent."""
    if not path.is_file():
        return []
    rows = []
    with path.open() as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            parsed: dict[str, float | str] = {}
            for key, value in row.items():
                if value in ("", None):
                    continue
                try:
                    parsed[key] = float(value)
                except ValueError:
                    parsed[key] = value
            rows.append(parsed)
    return rows


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def _series(rows: list[dict[str, Any]], y: str) -> tuple[list[float], list[float]]:
    points = [(r["step"], r[y]) for r in rows if "step" in r and isinstance(r.get(y), float)]
    return [p[0] for p in points], [p[1] for p in points]


def learning_curves(plots: Path, out: Path) -> None:
    """Midtrain and sft loss (train and eval), RL reward and success per step."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, stage in zip(axes[:2], ("midtrain", "sft"), strict=True):
        rows = read_tsv(plots / f"{stage}.tsv")
        for column, style in (("loss", "-"), ("eval_loss", "o--")):
            x, y = _series(rows, column)
            if x:
                ax.plot(x, y, style, label=column, markersize=3)
        ax.set(title=f"{stage} loss", xlabel="step", ylabel="cross-entropy")
        ax.legend()
    rows = read_tsv(plots / "rl.tsv")
    for column in ("reward_mean", "success", "grounded_success"):
        x, y = _series(rows, column)
        if x:
            axes[2].plot(x, y, marker=".", label=column)
    axes[2].set(title="rl", xlabel="step", ylim=(-0.02, 1.02))
    axes[2].legend()
    _save(fig, out)


def eval_bars(cells: list[dict[str, Any]], out: Path) -> None:
    """Per split, a bar per checkpoint: grounded success with its 95% interval (left), and
    tool-call validity (right), the skill that shows first."""
    checkpoints = list(dict.fromkeys(c["checkpoint"] for c in cells))
    splits = list(dict.fromkeys(c["split"] for c in cells))
    width = 0.8 / max(len(checkpoints), 1)
    fig, axes = plt.subplots(1, 2, figsize=(13, 3.6))
    top = 0.0
    for i, checkpoint in enumerate(checkpoints):
        mine = {c["split"]: c["metrics"] for c in cells if c["checkpoint"] == checkpoint}
        xs = [j + i * width for j, split in enumerate(splits) if split in mine]
        ms = [mine[split] for split in splits if split in mine]
        ys = [m["grounded_success"] for m in ms]
        errs = [[m["grounded_success"] - m["grounded_success_low"] for m in ms],
                [m["grounded_success_high"] - m["grounded_success"] for m in ms]]  # fmt: skip
        top = max([top, *(m["grounded_success_high"] for m in ms)])
        axes[0].bar(xs, ys, width, yerr=errs, capsize=3, label=checkpoint)
        axes[1].bar(xs, [m["tool_call_validity"] for m in ms], width, label=checkpoint)
    ticks = [j + width * (len(checkpoints) - 1) / 2 for j in range(len(splits))]
    axes[0].set(ylabel="grounded success (95% CI)", ylim=(0, min(1.0, max(0.1, top * 1.2))),
                title="grounded success on unseen worlds")  # fmt: skip
    axes[1].set(ylabel="share of calls", ylim=(0, 1), title="tool-call validity")
    for ax in axes:
        ax.set_xticks(ticks, splits)
        ax.legend()
    _save(fig, out)


def horizon_lines(rows: list[dict[str, Any]], out: Path) -> None:
    """long_horizon grounded success against task horizon, a line per context strategy."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for strategy in CONTEXT_STRATEGIES:
        points = [(r["horizon"], r[strategy]) for r in rows if strategy in r]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=strategy)
    ax.set(xlabel="task horizon (tool calls needed)", ylabel="grounded success",
           ylim=(-0.02, 1.02), title="context strategies on long_horizon")  # fmt: skip
    ax.legend()
    _save(fig, out)
