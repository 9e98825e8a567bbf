"""Full-episode RL against pivot-state RL (and their mix) at equal rl wall time.

    python bench/pivot_rl.py                                  # episodes, pivots, mix
    python bench/pivot_rl.py --arms episodes,pivots --eval-n 200 --splits test,heldout_tools

Every arm is a real rl stage run (``stages/rl.py``) from the workspace's ``models/sft``
with params.yaml plus ``rl.rollouts`` set to the arm, in its own directory under --out
(models, checkpoints, metrics, MLflow store: scratch, not committed). The pivot arms read the workspace's
``data/pivots`` (run ``dvc repro pivots`` first). The episodes arm runs params.yaml's
``rl.steps``; its loop seconds (rollouts, update, sync: the sum of its per-step times in
MLflow, model loading left out) are the budget. A pivot arm first runs a 2-step probe,
then as many steps as fit the budget at the probe's seconds per step.

Every checkpoint, sft included, then runs greedy through the harness on the first
--eval-n tasks of each split (``agentrl rollout``, the eval stage's engine and seed), and
grounded success is compared task by task (``agentrl.stats.paired_difference``): each
arm against sft, and each pivot arm against episodes. Per source and step: groups drawn
and kept, zero-variance share, rollout seconds per kept group. Every finished cell (an
arm's training figures, a checkpoint's outcomes on a split) goes into
``<results>/bench.json`` at once, and a rerun skips it, so the bench may span sessions
that keep only what is committed; an arm trained but not yet evaluated when its run
directory is lost trains again. The table is ``<results>/bench.md``.

Simplification, stated: one seed per arm; equal wall time is equal loop time on this
machine, measured, not a fixed budget inside the stage.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import fmean

import yaml
from rl_study import run_params

from agentrl.stats import paired_difference, wilson

STEP_TIMES = ("time_rollout_s", "time_reference_s", "time_update_s", "time_sync_s")
SOURCES = ("episodes", "pivots")


def mlflow_steps(run_dir: Path) -> list[dict[str, float]]:
    """Every step's figures of the rl run logged in ``run_dir``'s MLflow store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_dir.resolve()}/mlflow.db")
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id])
        if r.data.tags.get("stage") == "rl" and r.info.status == "FINISHED"
    ]
    run = max(runs, key=lambda r: r.info.start_time)
    steps: dict[int, dict[str, float]] = {}
    for key in run.data.metrics:
        for m in client.get_metric_history(run.info.run_id, key):
            steps.setdefault(m.step, {})[key] = m.value
    return [steps[s] for s in sorted(steps)]


def train(run_dir: Path, params: dict, overrides: dict[str, object]) -> dict:
    """One rl stage run; its loop seconds and per-source figures."""
    path = run_params(params, run_dir, overrides)  # data: the workspace's, pivots included
    env = os.environ | {"MLFLOW_TRACKING_URI": f"sqlite:///{run_dir.resolve()}/mlflow.db"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "stages/rl.py", "--params", str(path)], env=env, check=True)
    wall = time.perf_counter() - started
    steps = mlflow_steps(run_dir)
    loop = sum(s.get(k, 0.0) for s in steps for k in STEP_TIMES)
    out = {"steps": len(steps), "stage_s": round(wall, 1), "loop_s": round(loop, 1)}
    for source in SOURCES:
        drawn = sum(s.get(f"{source}_groups_drawn", 0.0) for s in steps)
        if not drawn:
            continue
        kept = sum(s[f"{source}_groups_kept"] for s in steps)
        seconds = sum(
            s[f"{source}_time_per_kept_group_s"] * max(1.0, s[f"{source}_groups_kept"])
            for s in steps
        )
        out[source] = {
            "groups_drawn": drawn,
            "groups_kept": kept,
            "zero_variance_share": round(
                fmean(s[f"{source}_zero_variance_share"] for s in steps), 3
            ),
            "reward_mean": round(fmean(s[f"{source}_reward_mean"] for s in steps), 3),
            "seconds_per_kept_group": round(seconds / max(1.0, kept), 2),
        }
    out["grounded_success"] = [round(s["grounded_success"], 3) for s in steps]
    return out


def rollout_cell(model: Path, params: Path, split: str, n: int, out: Path) -> dict[str, list]:
    """Greedy grounded outcomes of ``model`` on the first ``n`` tasks of ``split``, by task."""
    subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "rollout", "--model", str(model), "--split",
         split, "--n", str(n), "--temperature", "0", "--params", str(params), "--out", str(out)],
        check=True,
    )  # fmt: skip
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    return {
        "tasks": [e["task_id"] for e in episodes],
        "grounded": [int(e["grounded"]) for e in episodes],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--arms", default="episodes,pivots,mix")
    parser.add_argument("--eval-n", type=int, default=200)
    parser.add_argument("--splits", default="test,heldout_tools")
    parser.add_argument("--out", type=Path, default=Path("runs/pivot_rl"), help="run dirs")
    parser.add_argument("--results", type=Path, default=Path("reports/pivot_rl"))
    args = parser.parse_args()
    base = yaml.safe_load(Path(args.params).read_text())
    splits, arms = args.splits.split(","), args.arms.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    args.results.mkdir(parents=True, exist_ok=True)
    results_path = args.results / "bench.json"
    saved = json.loads(results_path.read_text()) if results_path.exists() else {}
    results: dict = saved.get("arms", {})
    cells: dict = saved.get("cells", {})

    def save() -> None:
        results_path.write_text(json.dumps({"arms": results, "cells": cells}, indent=1))

    def cell(name: str, model: Path, params: Path, split: str) -> list[int]:
        key = f"{name}.{split}"
        if key not in cells or len(cells[key]["tasks"]) != args.eval_n:
            cells[key] = rollout_cell(model, params, split, args.eval_n, args.out / f"{key}.jsonl")
            save()
        return cells[key]["grounded"]

    outcomes: dict[str, dict[str, list[int]]] = {}
    models = Path(base["base"]["paths"]["models"]).resolve()
    outcomes["sft"] = {s: cell("sft", models / "sft", Path(args.params), s) for s in splits}
    for arm in arms:
        run_dir = (args.out / arm).resolve()
        evaluated = all(f"{arm}.{s}" in cells for s in splits)
        if arm not in results or not (evaluated or (run_dir / "models" / "rl").is_dir()):
            overrides: dict[str, object] = {"rl.rollouts": arm}
            if arm != "episodes":
                budget = results["episodes"]["loop_s"]
                probe = train(run_dir.with_name(f"{arm}-probe"), base, overrides | {"rl.steps": 2})
                per_step = probe["loop_s"] / probe["steps"]
                overrides["rl.steps"] = max(2, math.floor(budget / per_step))
                print(f"{arm}: {per_step:.1f} s a step: {overrides['rl.steps']} steps", flush=True)
            results[arm] = train(run_dir, base, overrides)
            save()
        outcomes[arm] = {
            s: cell(arm, run_dir / "models" / "rl", run_dir / "params.yaml", s) for s in splits
        }
    report(results, outcomes, splits, args.results / "bench.md")


def report(results: dict, outcomes: dict, splits: list[str], path: Path) -> None:
    lines = [
        "| arm | steps | loop min | source | groups kept/drawn | zero-variance | s per kept group |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, r in results.items():
        for source in SOURCES:
            if source in r:
                s = r[source]
                lines.append(
                    f"| {arm} | {r['steps']} | {r['loop_s'] / 60:.1f} | {source} | "
                    f"{s['groups_kept']:.0f}/{s['groups_drawn']:.0f} | "
                    f"{s['zero_variance_share']:.0%} | {s['seconds_per_kept_group']:.1f} |"
                )
    lines += ["", "| checkpoint | " + " | ".join(
        f"{s} grounded | vs sft | vs episodes" for s in splits) + " |",
        "|---" * (3 * len(splits) + 1) + "|"]  # fmt: skip
    for name, cells in outcomes.items():
        row = []
        for s in splits:
            row.append(str(wilson(sum(cells[s]), len(cells[s]))))
            row.append(
                str(paired_difference(outcomes["sft"][s], cells[s])) if name != "sft" else ""
            )
            versus = name not in ("sft", "episodes") and "episodes" in outcomes
            row.append(str(paired_difference(outcomes["episodes"][s], cells[s])) if versus else "")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
