"""Every checkpoint on every eval split under every harness variant, through the harness.

One engine serves all checkpoints (they share an architecture and a tokenizer); the next
checkpoint's weights are loaded into it, so the openai engine works the same way. Each
(checkpoint, variant, split) cell runs the first ``eval.tasks`` tasks of the split,
``samples`` episodes each, with the same sampling seed, so cells differ only by what they
name. Long-horizon cells are also broken down by the task's horizon (tool calls needed).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl.chat import ChatFormat
from agentrl.config import EVAL_SPLITS, EvalSection, HarnessSection
from agentrl.dataset import iter_records
from agentrl.envs.registry import Registry
from agentrl.eval.score import score
from agentrl.harness.engine import Engine
from agentrl.harness.loop import Harness
from agentrl.harness.records import Episode
from agentrl.stats import wilson


@dataclass
class Cell:
    checkpoint: str
    variant: str
    split: str
    metrics: dict[str, Any]
    samples: list[Episode]  # the first episodes, kept to read
    by_horizon: dict[int, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0


def horizon_breakdown(episodes: list[Episode], records: list[dict[str, Any]]) -> dict:
    """Grounded success per task horizon (tool calls the task needs), with intervals."""
    horizon = {r["id"]: int(r["difficulty"]["horizon"]) for r in records}
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for episode in episodes:
        bucket = counts[horizon[episode.task_id]]
        bucket[0] += episode.grounded
        bucket[1] += 1
    out = {}
    for h, (wins, n) in sorted(counts.items()):
        rate = wilson(wins, n)
        out[h] = {"grounded_success": round(rate.value, 4), "low": round(rate.low, 4),
                  "high": round(rate.high, 4), "episodes": n}  # fmt: skip
    return out


def run_cells(
    engine: Engine,
    tokenizer: Any,
    fmt: ChatFormat,
    registry: Registry,
    harness: HarnessSection,
    cfg: EvalSection,
    data_root: Path,
    checkpoint: str,
    seed: int,
    progress: Callable[[str], None] = print,
) -> list[Cell]:
    """The cells of one checkpoint whose weights ``engine`` serves now."""
    cells = []
    for variant in cfg.variants:
        settings = variant.applied_to(harness)
        samples = variant.samples or cfg.samples
        for split in variant.splits or EVAL_SPLITS:
            records = list(iter_records(data_root, split, cfg.tasks))
            if not records:
                continue
            started = time.perf_counter()
            runner = Harness(engine, tokenizer, fmt, registry, settings)
            try:
                episodes = runner.run(records, samples=samples, seed=seed)
            finally:
                runner.close()
            cell = Cell(
                checkpoint,
                variant.name,
                split,
                score(episodes, cfg.pass_k),
                [e for e in episodes if e.sample == 0][: cfg.trajectories],
                seconds=time.perf_counter() - started,
            )
            if split == "long_horizon":
                cell.by_horizon = horizon_breakdown(episodes, records)
            m = cell.metrics
            progress(
                f"{checkpoint:9s} {variant.name:10s} {split:16s} grounded {m['grounded_success']:.3f} "
                f"success {m['success']:.3f} valid calls {m['tool_call_validity']:.3f} "
                f"turns {m['turns']:.1f} ({m['episodes']} episodes, {cell.seconds:.0f} s)"
            )
            cells.append(cell)
    return cells


def nest(cells: list[Cell]) -> dict[str, Any]:
    """``{checkpoint: {variant: {split: metrics}}}``: one shape, however many variants, so
    ``dvc metrics diff`` keys stay put when a variant is added."""
    out: dict[str, Any] = {}
    for cell in cells:
        out.setdefault(cell.checkpoint, {}).setdefault(cell.variant, {})[cell.split] = cell.metrics
    return out
