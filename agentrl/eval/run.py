"""The eval stage: models/{midtrain,sft,rl} x eval splits x harness variants, and BFCL.

Writes, each atomically:
- ``metrics/eval.json``: ``{checkpoint: {variant: {split: metrics}}}`` (always that shape),
  ``paired: {"rl-sft": {variant: {split: ...}}}`` (each checkpoint minus the one before it,
  over the same tasks, with Newcombe's paired interval, the tasks won and lost, and the
  verdict the interval gives) and ``bfcl: {checkpoint: {category: ...}, "rl-sft": ...}``;
- ``plots/eval_success.tsv``: grounded success with its interval per checkpoint and split
  under the headline variant (a bar per cell);
- ``plots/eval_horizon.tsv``: the last checkpoint's grounded success on long_horizon per
  task horizon, a column per context strategy;
- ``reports/trajectories/``: sample episodes and BFCL answers as JSONL.

MLflow gets one run with every metric (flattened), each cell's seconds by part
(``time.<checkpoint>.<variant>.<split>.<part>``), the table of cells, the trajectories,
and the sample episodes of the headline variant as traces.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

from agentrl.atomic import atomic_dir
from agentrl.bfcl.bench import load_questions, run_bfcl
from agentrl.chat import get_format
from agentrl.config import CONTEXT_STRATEGIES, Params
from agentrl.envs.registry import load_registry
from agentrl.errors import StageError
from agentrl.eval.suite import Cell, check_cells, nest, paired, run_cells
from agentrl.eval.traces import log_episode_trace
from agentrl.harness.build import build_engine
from agentrl.outputs import write_metrics, write_plot
from agentrl.precision import stage_precision
from agentrl.stats import paired_difference
from agentrl.tracking import flatten, stage_run

TABLE_COLUMNS = ("checkpoint", "variant", "split", "grounded_success", "grounded_success_low",
                 "grounded_success_high", "success", "pass_at_1", "reward", "tool_call_validity",
                 "tool_error_rate", "turns", "tokens_per_episode", "peak_context", "episodes")  # fmt: skip


def success_rows(cells: list[Cell], headline: str) -> list[dict[str, Any]]:
    return [
        {"cell": f"{c.checkpoint} · {c.split}", "checkpoint": c.checkpoint, "split": c.split,
         "grounded_success": c.metrics["grounded_success"],
         "low": c.metrics["grounded_success_low"], "high": c.metrics["grounded_success_high"]}
        for c in cells if c.variant == headline
    ]  # fmt: skip


def horizon_rows(cells: list[Cell], params: Params) -> list[dict[str, Any]]:
    """One row per horizon; a column per context strategy (the first variant using it)."""
    last = params.eval.checkpoints[-1]
    columns: dict[str, dict[int, dict[str, float]]] = {}
    for cell in cells:
        if cell.checkpoint == last and cell.split == "long_horizon":
            strategy = params.eval.variant(cell.variant).applied_to(params.harness).context
            columns.setdefault(strategy, cell.by_horizon)
    horizons = sorted({h for table in columns.values() for h in table})
    return [
        {"horizon": h} | {s: columns[s][h]["grounded_success"] for s in columns if h in columns[s]}
        for h in horizons
    ]


def write_trajectories(out: Path, cells: list[Cell], bfcl_answers: dict[str, Any]) -> None:
    """A cell's sample episodes to ``<checkpoint>.<variant>.<split>.jsonl``; every BFCL
    answer (text, parsed calls, verdict) to ``<checkpoint>.bfcl.jsonl``."""
    for cell in cells:
        lines = [json.dumps(e.to_json(), sort_keys=True) for e in cell.samples]
        file = out / f"{cell.checkpoint}.{cell.variant}.{cell.split}.jsonl"
        file.write_text("".join(line + "\n" for line in lines))
    for name, by_category in bfcl_answers.items():
        rows = [r | {"category": c} for c, results in by_category.items() for r in results]
        (out / f"{name}.bfcl.jsonl").write_text(
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        )


def eval_stage(params: Params) -> dict[str, Any]:
    cfg, paths = params.eval, params.base.paths
    fmt = get_format(params.model.format)
    precision = stage_precision(params.base.precision, params.file)
    print(f"eval: {precision} (base.precision {params.base.precision})")
    dirs = {name: Path(paths.models) / name for name in cfg.checkpoints}
    for name, path in dirs.items():
        if not (path / "config.json").is_file():
            raise StageError(f"{path}: no model (eval.checkpoints names {name!r}); run its stage")
    data = Path(paths.data) / "synth"
    bfcl_dir = Path(paths.data) / "bfcl"
    if cfg.bfcl.categories and not (bfcl_dir / "source.json").is_file():
        raise StageError(f"{bfcl_dir}: no BFCL data (eval.bfcl.categories); run the bfcl stage")
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    check_cells(cfg, params.harness, data, params.file)
    sections = {
        "eval": params.section_dict("eval"),
        "harness": params.section_dict("harness"),
        "model.format": params.model.format,
        "precision": precision,
    }
    inputs = dirs | {"eval_data": data / "eval"}
    if cfg.bfcl.categories:
        inputs["bfcl"] = bfcl_dir
    seed = params.base.seed + cfg.seed
    headline = cfg.variants[0].name
    with stage_run("eval", params.tracking, sections, inputs) as run:
        engine, tokenizer = build_engine(params.harness, dirs[cfg.checkpoints[0]], fmt, precision)
        questions = load_questions(bfcl_dir, cfg.bfcl) if cfg.bfcl.categories else {}
        cells: list[Cell] = []
        bfcl: dict[str, Any] = {}
        bfcl_answers: dict[str, Any] = {}
        for index, name in enumerate(cfg.checkpoints):
            if index:
                engine.load_weights(dirs[name])
            cells += run_cells(
                engine, tokenizer, fmt, registry, params.harness, cfg, data, name, seed
            )
            if cfg.bfcl.categories:
                bfcl[name], bfcl_answers[name] = run_bfcl(
                    engine, tokenizer, fmt, questions, cfg.bfcl, params.harness.context_limit, seed
                )
                print(f"{name:9s} bfcl " + "  ".join(
                    f"{c} {m['accuracy']:.3f} ({m['over_context']} over context)"
                    for c, m in bfcl[name].items()
                ), flush=True)  # fmt: skip
        if hasattr(engine, "close"):
            engine.close()
        metrics = nest(cells) | {"paired": paired(cells, cfg.checkpoints)}
        if bfcl:
            metrics["bfcl"] = bfcl | paired_bfcl(bfcl_answers, cfg.checkpoints)
        with atomic_dir(Path(paths.reports) / "trajectories") as out:
            write_trajectories(out, cells, bfcl_answers)
            run.record_output(out)
            run.log_artifact(out, "trajectories")
        write_plot(Path(paths.plots) / "eval_success.tsv", success_rows(cells, headline),
                   ("cell", "checkpoint", "split", "grounded_success", "low", "high"))  # fmt: skip
        write_plot(Path(paths.plots) / "eval_horizon.tsv", horizon_rows(cells, params),
                   ("horizon", *CONTEXT_STRATEGIES))  # fmt: skip
        write_metrics(Path(paths.metrics) / "eval.json", metrics)
        run.log_metrics(_numeric(flatten(metrics)))
        run.log_metrics(
            {f"time.{c.checkpoint}.{c.variant}.{c.split}.{part}": round(seconds, 3)
             for c in cells for part, seconds in c.timing.items()}
        )  # fmt: skip
        run.log_dict(metrics, "eval.json")
        _log_table(cells)
        for cell in cells:
            if cell.variant == headline:
                for episode in cell.samples:
                    log_episode_trace(episode, fmt, {"checkpoint": cell.checkpoint,
                                                     "split": cell.split, "variant": cell.variant})  # fmt: skip
        _flush_traces()
    return metrics


def paired_bfcl(answers: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """``{"rl-sft": {category: paired difference}}`` over the questions both answered."""
    out: dict[str, Any] = {}
    for before, after in pairwise(order):
        for category, results in answers.get(after, {}).items():
            base = {r["id"]: r["correct"] for r in answers.get(before, {}).get(category, [])}
            now = {r["id"]: r["correct"] for r in results if r["id"] in base}
            diff = paired_difference([base[q] for q in now], list(now.values()))
            out.setdefault(f"{after}-{before}", {})[category] = diff.as_dict()
    return out


def _numeric(flat: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in flat.items() if isinstance(v, int | float)}


def _log_table(cells: list[Cell]) -> None:
    import mlflow

    rows = [{"checkpoint": c.checkpoint, "variant": c.variant, "split": c.split} | c.metrics
            for c in cells]  # fmt: skip
    table = {col: [row.get(col) for row in rows] for col in TABLE_COLUMNS}
    mlflow.log_table(table, "eval_table.json")


def _flush_traces() -> None:
    import mlflow

    mlflow.flush_trace_async_logging()
