"""The pivots stage: models/sft and the expert trajectories of ``pivots.split`` -> every
candidate state's sampled pass rate -> ``data/pivots/pivots.jsonl`` (one row per candidate:
pivot id, task, turn index, kind, pass rate, kept) and ``metrics/pivots.json`` (counts,
kept share, zero-variance share, pass rate by kind). The rl stage draws the kept rows when
``rl.rollouts`` is pivots or mix (``read_pivots``). With ``rl.rollouts: episodes`` rl draws
no pivot, so the stage profiles nothing: it writes an empty pivots.jsonl and metrics saying
why (profiling 256 tasks is about half an hour on 2 cores). ``rl.rollouts`` is therefore
one of the stage's params: switching it to pivots or mix profiles.

Sampling is the rl rollouts' (``harness.temperature``, ``harness.max_new_tokens``) from the
frozen sft weights, seeded by ``base.seed``, so the stage's outputs are the same bytes on a
rerun; profiling seconds go to MLflow only.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from statistics import fmean
from typing import Any

import torch
from tqdm import tqdm

from agentrl.atomic import atomic_dir
from agentrl.chat import get_format
from agentrl.config import ConfigError, Params
from agentrl.dataset import expert_trajectory, iter_records, split_dir
from agentrl.envs.registry import load_registry
from agentrl.errors import StageError
from agentrl.harness.build import build_engine
from agentrl.harness.loop import Harness
from agentrl.outputs import write_metrics
from agentrl.precision import stage_precision
from agentrl.rl.pivots import Pivot, PivotJudge, candidates, fits, informative, profile
from agentrl.tracking import StageRun, stage_run

PIVOTS_FILE = "pivots.jsonl"


def spread(records: list[Any], n: int) -> list[Any]:
    """``n`` records evenly spaced over ``records`` (all of them when there are fewer).

    Synth writes a training split in curriculum order (one-call tasks first), so the first
    ``n`` would hold one depth and a few families; pivots from them taught the policy to
    answer after the first observation, early on every deeper task.

    >>> spread(list(range(10)), 4)
    [0, 2, 5, 7]
    >>> spread([1, 2], 5)
    [1, 2]
    """
    if n >= len(records):
        return list(records)
    return [records[i * len(records) // n] for i in range(n)]


def pivot_records(params: Params) -> list[dict[str, Any]]:
    """The tasks whose trajectories give the pivots: ``pivots.tasks`` of the split, spread
    evenly over it, so their depths and families are the split's."""
    cfg = params.pivots
    root = Path(params.base.paths.data) / "synth"
    records = spread(list(iter_records(root, cfg.split)), cfg.tasks)
    if not any(expert_trajectory(r) for r in records):
        raise ConfigError(
            f"{params.file}: pivots.split: {cfg.split!r}: {split_dir(root, cfg.split)} holds "
            "no expert trajectories (synthesised before they were kept? rerun synth)"
        )
    return records


def profile_rows(path: Path, records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], Pivot]]:
    """Every profiled candidate of a pivots stage output ``path`` (its row, and the pivot
    on its task record)."""
    file = path / PIVOTS_FILE
    if not file.is_file():
        raise StageError(f"{file}: not found (run the pivots stage first)")
    by_id = {r["id"]: r for r in records}
    rows = []
    for line in file.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["task"] not in by_id:
            raise StageError(
                f"{file}: pivot {row['pivot']} names task {row['task']}, not in its split"
            )
        rows.append((row, Pivot(by_id[row["task"]], row["index"])))
    return rows


def read_pivots(
    path: Path, records: list[dict[str, Any]], band: tuple[float, float]
) -> list[Pivot]:
    """The informative pivots of a pivots stage output ``path`` in the pass-rate ``band``,
    on their task records. Selection is redone from the stored pass rates (the stage's
    ``kept`` column is its own view), so the band can be varied without profiling again."""
    rows = profile_rows(path, records)
    pool = [pivot for row, pivot in rows if informative(row["pass_rate"], band)]
    if not pool:
        why = (
            "the pivots stage profiled nothing: it ran with rl.rollouts episodes"
            if not rows
            else f"no pivot has a pass rate in (0, 1) and in [{band[0]}, {band[1]}] "
            "(see metrics/pivots.json)"
        )
        raise StageError(f"{path / PIVOTS_FILE}: {why}")
    return pool


def read_anchors(
    path: Path, records: list[dict[str, Any]], band: tuple[float, float]
) -> list[Pivot]:
    """The answer states of the profile that ``read_pivots`` leaves out at ``band``
    (``rl.anchor_share`` draws them)."""
    rows = profile_rows(path, records)
    anchors = [
        pivot
        for row, pivot in rows
        if row["kind"] == "answer" and not informative(row["pass_rate"], band)
    ]
    if not anchors:
        raise StageError(
            f"{path / PIVOTS_FILE}: no answer state outside the kept pivots to anchor on "
            "(set rl.anchor_share: 0)"
        )
    return anchors


def pivots_stage(params: Params) -> dict[str, Any]:
    cfg, paths, harness_cfg = params.pivots, params.base.paths, params.harness
    precision = stage_precision(params.base.precision, params.file)
    fmt = get_format(params.model.format)
    records = pivot_records(params)
    source = Path(paths.models) / "sft"
    if params.rl.rollouts == "episodes":
        return unprofiled(params, precision, len(list(candidates(records))))
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    engine, tokenizer = build_engine(harness_cfg, source, fmt, precision)
    found = list(candidates(records))
    room = harness_cfg.max_new_tokens
    usable = [p for p in found if fits(p, tokenizer, fmt, harness_cfg.context_limit, room)]
    sections = {
        "pivots": params.section_dict("pivots"),
        "harness": params.section_dict("harness"),
        "rl.grounded_only": params.rl.grounded_only,
        "rl.rollouts": params.rl.rollouts,
        "precision": precision,
    }
    inputs = {"model": source, "data": split_dir(Path(paths.data) / "synth", cfg.split)}
    with stage_run("pivots", params.tracking, sections, inputs) as run:
        harness = Harness(engine, tokenizer, fmt, registry, harness_cfg)
        judge = PivotJudge(registry, fmt, harness.sandbox)
        torch.manual_seed(params.base.seed)
        began = time.perf_counter()
        rows, verdicts = [], Counter()
        try:
            profiled = profile(
                harness, judge, usable, cfg.samples, params.base.seed, params.rl.grounded_only
            )
            for pivot, rate, drawn in tqdm(profiled, total=len(usable), desc="pivots"):
                verdicts.update(drawn)
                rows.append(
                    {
                        "pivot": pivot.id,
                        "task": pivot.record["id"],
                        "index": pivot.index,
                        "kind": pivot.kind,
                        "pass_rate": rate,
                        "kept": informative(rate, cfg.band),
                    }
                )
        finally:
            harness.close()
        seconds = time.perf_counter() - began
        metrics = pivot_figures(rows, len(found), cfg.samples, precision) | {
            "verdicts": dict(sorted(verdicts.items()))
        }
        run.log_metrics(
            {"profile_s": seconds, "profile_per_candidate_s": seconds / max(1, len(rows))}
        )
        run.log_dict(metrics, "pivots_summary.json")
        write_outputs(params, run, rows, metrics)
    kept = metrics["kept"]
    print(
        f"pivots: {kept} of {len(rows)} candidates kept ({metrics['kept_share']:.0%}), "
        f"{len(found) - len(rows)} too long for the context, {seconds:.0f} s"
    )
    return metrics


def write_outputs(
    params: Params, run: StageRun, rows: list[dict[str, Any]], metrics: dict[str, Any]
) -> None:
    """data/pivots/pivots.jsonl (one row per profiled candidate; empty when none was) and
    metrics/pivots.json; the output's lineage goes to ``run``."""
    paths = params.base.paths
    with atomic_dir(Path(paths.data) / "pivots") as tmp:
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        (tmp / PIVOTS_FILE).write_text(text, encoding="utf-8")
        run.record_output(tmp)
    write_metrics(Path(paths.metrics) / "pivots.json", metrics)


def unprofiled(params: Params, precision: str, found: int) -> dict[str, Any]:
    """The stage's outputs when rl draws no pivots: no row, and metrics that say why."""
    paths = params.base.paths
    sections = {"pivots": params.section_dict("pivots"), "rl.rollouts": params.rl.rollouts}
    inputs = {"data": split_dir(Path(paths.data) / "synth", params.pivots.split)}
    figures = pivot_figures([], found, params.pivots.samples, precision)
    metrics = {k: v for k, v in figures.items() if k != "too_long"} | {
        "profiled_because": "nothing: rl.rollouts is episodes, rl draws no pivot"
    }  # fits the context was not asked: no model, no tokenizer
    with stage_run("pivots", params.tracking, sections | {"precision": precision}, inputs) as run:
        write_outputs(params, run, [], metrics)
    print(f"pivots: none profiled ({found} candidates): rl.rollouts is episodes")
    return metrics


def pivot_figures(
    rows: list[dict[str, Any]], found: int, samples: int, precision: str
) -> dict[str, Any]:
    """metrics/pivots.json: what profiling found, overall and by the expert's action kind.

    >>> rows = [{"kind": "call", "pass_rate": r, "kept": 0 < r < 1} for r in (0, 0.5, 1)]
    >>> f = pivot_figures(rows, found=4, samples=8, precision="bf16")
    >>> f["kept"], f["zero_variance_share"], f["too_long"], f["by_kind"]["call"]["mean_pass_rate"]
    (1, 0.6667, 1, 0.5)
    """

    def part(subset: list[dict[str, Any]]) -> dict[str, Any]:
        rates = [r["pass_rate"] for r in subset]
        return {
            "profiled": len(subset),
            "kept": sum(r["kept"] for r in subset),
            "mean_pass_rate": round(fmean(rates), 4) if rates else 0.0,
            "all_fail": sum(r == 0.0 for r in rates),
            "all_pass": sum(r == 1.0 for r in rates),
        }

    overall = part(rows)
    flat = overall["all_fail"] + overall["all_pass"]
    return {
        "candidates": found,
        "too_long": found - len(rows),
        **overall,
        "kept_share": round(overall["kept"] / max(1, len(rows)), 4),
        "zero_variance_share": round(flat / max(1, len(rows)), 4),
        "samples": samples,
        "precision": precision,
        "by_kind": {
            kind: part([r for r in rows if r["kind"] == kind]) for kind in ("call", "answer")
        },
    }
