"""Every checkpoint on every eval split under every harness variant, through the harness.

One engine serves all checkpoints (they share an architecture and a tokenizer); the next
checkpoint's weights are loaded into it, so the openai engine works the same way. Each
(checkpoint, variant, split) cell runs the first ``tasks`` tasks of the split (the variant's
or ``eval.tasks``), ``samples`` episodes each, with the same sampling seed, so cells differ
only by what they name and two checkpoints' cells pair task by task (``paired``).
Each cell counts its episodes by the first thing that went wrong (``first_fault``: the
kinds of ``agentrl.eval.failures``, read against the task's expert trajectory), so what
training fixed shows split by split. Long-horizon cells are also broken down by the
task's horizon (tool calls needed). Each cell keeps where its time went (``timing``:
prefill, decode, tools, verify, total seconds); timings stay out of metrics/eval.json,
which two runs must write byte for byte.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from agentrl.chat import ChatFormat
from agentrl.config import ConfigError, EvalSection, EvalVariant, HarnessSection
from agentrl.dataset import iter_records, split_dir
from agentrl.envs.registry import Registry
from agentrl.eval.failures import breakdown, failure_kind
from agentrl.eval.score import score
from agentrl.harness.engine import Engine
from agentrl.harness.loop import Harness
from agentrl.harness.records import Episode
from agentrl.stats import Paired, paired_difference, wilson


@dataclass
class Cell:
    checkpoint: str
    variant: str
    split: str
    metrics: dict[str, Any]
    samples: list[Episode]  # the first episodes, kept to read
    outcomes: dict[tuple[str, int], bool] = field(default_factory=dict)  # (task, sample)
    by_horizon: dict[int, dict[str, float]] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.timing.get("total", 0.0)


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


def check_cells(cfg: EvalSection, harness: HarnessSection, data_root: Path, file: str) -> None:
    """Every cell's split holds the tasks it asks for, and its turn budget fits them: no
    task needs more assistant turns in its expert trajectory than the cell allows (a cell
    cut short measures its cap, not the model). Checked before any model is loaded."""
    for variant, split, tasks in cfg.cells():
        records = list(iter_records(data_root, split, tasks))
        if len(records) < tasks:
            key = f"eval.variants.{variant.name}.tasks" if variant.tasks else "eval.tasks"
            raise ConfigError(
                f"{file}: {key}: {tasks} tasks of {split} (variant {variant.name!r}), but "
                f"{split_dir(data_root, split)} holds {len(records)}"
            )
        turns = variant.applied_to(harness).max_turns
        check_turn_budget(records, turns, f"{file}: {max_turns_key(variant)}", split)


def max_turns_key(variant: EvalVariant) -> str:
    """The params key that sets ``variant``'s turn budget."""
    if "max_turns" in variant.harness:
        return f"eval.variants.{variant.name}.harness.max_turns"
    return "harness.max_turns"


def check_turn_budget(records: list[dict[str, Any]], max_turns: int, key: str, split: str) -> None:
    """Stop when an expert trajectory of ``records`` takes more assistant turns than
    ``max_turns`` (``key`` names the setting)."""
    longest = max((r["meta"]["turns"] for r in records), default=0)
    if longest > max_turns:
        raise ConfigError(
            f"{key}: {max_turns}, but {split}'s expert trajectories take up to {longest} "
            "assistant turns: those tasks could not be finished"
        )


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
    """The cells of one checkpoint whose weights ``engine`` serves now: each split's tasks
    go through the harness as one batch."""
    cells = []
    clock: Counter[str] = getattr(engine, "seconds", Counter())
    for variant, split, tasks in cfg.cells():
        settings = variant.applied_to(harness)
        samples = variant.samples or cfg.samples
        records = list(iter_records(data_root, split, tasks))
        started, engine_before = time.perf_counter(), Counter(clock)
        runner = Harness(engine, tokenizer, fmt, registry, settings)
        try:
            episodes = runner.run(records, samples=samples, seed=seed)
        finally:
            runner.close()
        engine_spent = Counter(clock)
        engine_spent.subtract(engine_before)
        by_id = {r["id"]: r for r in records}
        faults = [failure_kind(e.to_json(), by_id[e.task_id], fmt) for e in episodes]
        cell = Cell(
            checkpoint,
            variant.name,
            split,
            score(episodes, cfg.pass_k) | {"first_fault": breakdown(faults)},
            [e for e in episodes if e.sample == 0][: cfg.trajectories],
            outcomes={(e.task_id, e.sample): e.grounded for e in episodes},
            timing=_timing(time.perf_counter() - started, runner.seconds, engine_spent),
        )
        if split == "long_horizon":
            cell.by_horizon = horizon_breakdown(episodes, records)
        m, t = cell.metrics, cell.timing
        progress(
            f"{checkpoint:9s} {variant.name:10s} {split:16s} grounded {m['grounded_success']:.3f} "
            f"success {m['success']:.3f} valid calls {m['tool_call_validity']:.3f} "
            f"turns {m['turns']:.1f} ({m['episodes']} episodes, {t['total']:.0f} s: prefill "
            f"{t['prefill']:.0f}, decode {t['decode']:.0f}, tools {t['tools']:.0f}, "
            f"verify {t['verify']:.1f})"
        )
        cells.append(cell)
    return cells


def _timing(total: float, harness: Counter[str], engine: Counter[str]) -> dict[str, float]:
    """Seconds of a cell by part; an engine without its own clock (a server) has its whole
    generate time under decode."""
    prefill = engine.get("prefill", 0.0)
    decode = engine.get("decode", harness["generate"] - prefill)
    parts = {"prefill": prefill, "decode": decode, "tools": harness["tools"],
             "verify": harness["verify"]}  # fmt: skip
    return parts | {"harness": max(0.0, total - sum(parts.values())), "total": total}


def paired(cells: list[Cell], order: list[str]) -> dict[str, Any]:
    """Each checkpoint against the one before it in ``order`` (``rl-sft``: rl minus sft),
    per variant and split, over the (task, sample) pairs both ran: ``{pair: {variant:
    {split: difference, interval, won, lost, verdict}}}``."""
    found = {(c.checkpoint, c.variant, c.split): c for c in cells}
    out: dict[str, Any] = {}
    for before, after in pairwise(order):
        for (checkpoint, variant, split), cell in found.items():
            base = found.get((before, variant, split))
            if checkpoint != after or base is None:
                continue
            out.setdefault(f"{after}-{before}", {}).setdefault(variant, {})[split] = compare(
                base, cell
            ).as_dict()
    return out


def compare(before: Cell, after: Cell) -> Paired:
    """``after - before`` over the (task, sample) pairs both cells ran."""
    keys = sorted(set(before.outcomes) & set(after.outcomes))
    return paired_difference([before.outcomes[k] for k in keys], [after.outcomes[k] for k in keys])


def nest(cells: list[Cell]) -> dict[str, Any]:
    """``{checkpoint: {variant: {split: metrics}}}``: one shape, however many variants, so
    ``dvc metrics diff`` keys stay put when a variant is added."""
    out: dict[str, Any] = {}
    for cell in cells:
        out.setdefault(cell.checkpoint, {}).setdefault(cell.variant, {})[cell.split] = cell.metrics
    return out
