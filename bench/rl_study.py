"""The learning study: does RL beat its sft start, and a random-reward control?

    python bench/rl_study.py                                   # grpo and random, seeds 0 1 2
    python bench/rl_study.py --arms grpo,gigpo,random --seeds 0,1,2 --eval-n 300
    python bench/rl_study.py --set rl.steps=24 --out runs/rl_study_long
    python bench/rl_study.py --arms none --midtrain-ablation   # sft from base vs midtrain

Each arm x seed is a real rl stage run (``stages/rl.py``) from ``models/sft`` with the
params.yaml in force plus the arm's overrides and ``rl.seed``, in its own directory under
--out (models, checkpoints, metrics, MLflow store). Every checkpoint, sft included, is then
run through the harness greedy (the eval stage's headline; ``long_horizon`` with the
summary restart) on the evaluation splits (worlds never seen in training), and scored by
**grounded** success: the verifier's verdict and an
answer read off a tool observation of that episode. Rates get Wilson 95% intervals per run
and mean ± std over seeds per arm. Every run sees the same tasks, so differences are paired
(``agentrl.stats.paired_difference``, as the eval stage's): each run against sft, and each
arm against the random-reward control, pairing seed with seed and task with task (the
simplification, stated: the (task, seed) pairs of an arm are treated as independent,
though a task recurs once per seed). Writes ``<out>/study.json`` and ``<out>/study.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from agentrl.chat import get_format
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.eval.failures import failure_kind
from agentrl.stats import over_seeds, paired_difference, wilson

ARMS = {
    "grpo": {"rl.advantage": "grpo", "rl.reward": "verifier"},
    "gigpo": {"rl.advantage": "gigpo", "rl.reward": "verifier"},
    "rloo": {"rl.advantage": "rloo", "rl.reward": "verifier"},
    "random": {"rl.advantage": "grpo", "rl.reward": "random"},
}
SPLITS = ("test", "heldout_tools", "heldout_compose", "long_horizon")
# long_horizon tasks outgrow the context: they run with the model-written summary restart
SPLIT_CONTEXT = {"long_horizon": "summary"}


def set_key(tree: dict, dotted: str, value: object) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[leaf] = value


def overrides_of(pairs: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` strings as a dict, values read as YAML.

    >>> overrides_of(["rl.lr=2e-5", "rl.rollouts=mix", "rl.lora.r=16"])
    {'rl.lr': 2e-05, 'rl.rollouts': 'mix', 'rl.lora.r': 16}
    """
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"bench: {pair!r} is not KEY=VALUE")
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str):  # YAML 1.1 reads 2e-5 (no dot) as a string
            with contextlib.suppress(ValueError):
                parsed = float(parsed)
        out[key] = parsed
    return out


def run_params(
    base: dict, run_dir: Path, overrides: dict[str, object], link: tuple[str, str] = ("sft", "sft")
) -> Path:
    """A params.yaml for one run: outputs under ``run_dir``, models/<link[0]> linked to the
    workspace's models/<link[1]>."""
    tree = json.loads(json.dumps(base))
    for key, value in overrides.items():
        set_key(tree, key, value)
    for name in ("models", "checkpoints", "metrics", "plots", "reports"):
        set_key(tree, f"base.paths.{name}", str(run_dir / name))
    set_key(tree, "base.paths.data", str(Path(tree["base"]["paths"]["data"]).resolve()))
    (run_dir / "models").mkdir(parents=True, exist_ok=True)
    target = run_dir / "models" / link[0]
    if not target.exists():
        target.symlink_to(Path(base["base"]["paths"]["models"]).resolve() / link[1])
    path = run_dir / "params.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    load_params(path)  # fail here, naming the key, rather than inside the stage
    return path


def run_stage(stage: str, params: Path, run_dir: Path) -> float:
    """``stages/<stage>.py`` on ``params``, logging to ``run_dir``'s own MLflow store (a
    scratch run stays out of the workspace's); its wall seconds."""
    env = os.environ | {"MLFLOW_TRACKING_URI": f"sqlite:///{run_dir.resolve()}/mlflow.db"}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, f"stages/{stage}.py", "--params", str(params)], env=env, check=True
    )
    return time.perf_counter() - started


def rollout_cell(
    model: Path,
    params: Path,
    split: str,
    n: int,
    temperature: float,
    out: Path,
    context: str | None = None,
) -> dict[str, list]:
    """Grounded outcomes of ``model`` on the first ``n`` tasks of ``split`` (one episode
    each, ``agentrl rollout``: the eval stage's engine, precision and seed), by task, with
    each failure's kind; the trajectories stay in ``out``."""
    subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "rollout", "--model", str(model), "--split",
         split, "--n", str(n), "--temperature", str(temperature), "--params", str(params),
         "--out", str(out), *(["--context", context] if context else [])],
        check=True,
    )  # fmt: skip
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    cfg = load_params(params)
    fmt = get_format(cfg.model.format)
    records = {r["id"]: r for r in iter_records(Path(cfg.base.paths.data) / "synth", split, n)}
    return {
        "tasks": [e["task_id"] for e in episodes],
        "grounded": [int(e["grounded"]) for e in episodes],
        "failures": [failure_kind(e, records[e["task_id"]], fmt) for e in episodes],
    }


def evaluate(model_dir: Path, params_path: Path, splits: tuple[str, ...], n: int) -> dict:
    """``model_dir`` greedy on the first ``n`` tasks of every split (the eval stage's
    headline), long_horizon with the summary restart."""
    out = {}
    for split in splits:
        cell = rollout_cell(
            model_dir, params_path, split, n, 0.0,
            params_path.parent / f"{model_dir.name}.{split}.jsonl", SPLIT_CONTEXT.get(split),
        )  # fmt: skip
        out[split] = {
            "grounded": sum(cell["grounded"]),
            "n": len(cell["grounded"]),
            "outcomes": cell["grounded"],  # task order: pairs across runs
            "failures": cell["failures"],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--arms", default="grpo,random")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--eval-n", type=int, default=200, help="tasks per split (1 episode each)")
    parser.add_argument("--splits", default=",".join(SPLITS))
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every arm")
    parser.add_argument("--out", type=Path, default=Path("runs/rl_study"))
    parser.add_argument(
        "--midtrain-ablation",
        action="store_true",
        help="also run sft straight from models/base (no midtrain) and evaluate it: what "
        "mid-training buys (the MidTool claim)",
    )
    args = parser.parse_args()
    base = yaml.safe_load(Path(args.params).read_text())
    common = overrides_of(args.set)
    splits = tuple(args.splits.split(","))
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "study.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}

    def save() -> None:
        results_path.write_text(json.dumps(results, indent=1))

    sft_params = run_params(base, args.out / "sft", common)
    if "sft" not in results:
        started = time.perf_counter()
        results["sft"] = {
            "eval": evaluate(args.out / "sft/models/sft", sft_params, splits, args.eval_n)
        }
        print(f"sft evaluated in {time.perf_counter() - started:.0f} s", flush=True)
        save()
    if args.midtrain_ablation and "sft_from_base" not in results:
        run_dir = (args.out / "sft_from_base").resolve()
        path = run_params(base, run_dir, common, link=("midtrain", "base"))
        run_stage("sft", path, run_dir)
        results["sft_from_base"] = {
            "eval": evaluate(run_dir / "models/sft", path, splits, args.eval_n)
        }
        save()
    for arm in [a for a in args.arms.split(",") if a != "none"]:
        for seed in seeds:
            name = f"{arm}-s{seed}"
            if name in results:
                continue
            run_dir = args.out / name
            path = run_params(base, run_dir, {**ARMS[arm], **common, "rl.seed": seed})
            train_s = run_stage("rl", path, run_dir)
            rl_metrics = json.loads((run_dir / "metrics/rl.json").read_text())
            results[name] = {
                "arm": arm,
                "seed": seed,
                "train_s": round(train_s, 1),
                "rl": rl_metrics["mean"],
                "eval": evaluate(run_dir / "models/rl", path, splits, args.eval_n),
            }
            print(f"{name}: trained {train_s:.0f} s, {results[name]['eval']}", flush=True)
            save()
    report(results, splits, args.out / "study.md")


def versus(runs: list[dict], controls: list[dict], split: str) -> str:
    """``runs`` minus ``controls`` on ``split``, paired run by run (seed with seed) and task
    by task; '–' where a run predates per-task outcomes."""
    before, after = [], []
    for run, control in zip(runs, controls, strict=True):
        mine, theirs = run["eval"][split].get("outcomes"), control["eval"][split].get("outcomes")
        if mine is None or theirs is None or len(mine) != len(theirs):
            return "–"
        before += [bool(x) for x in theirs]
        after += [bool(x) for x in mine]
    return str(paired_difference(before, after))


def report(results: dict, splits: tuple[str, ...], path: Path) -> None:
    lines = ["| run | " + " | ".join(f"{s} grounded [95% CI] | vs sft (paired)" for s in splits)
             + " |", "|---" * (2 * len(splits) + 1) + "|"]  # fmt: skip
    for name, result in results.items():
        cells = []
        for s in splits:
            cells.append(str(wilson(result["eval"][s]["grounded"], result["eval"][s]["n"])))
            cells.append(versus([result], [results["sft"]], s) if name != "sft" else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "| arm | seeds | " + " | ".join(f"{s} (mean ± std) | vs random (paired)"
                                                  for s in splits) + " |"]  # fmt: skip
    lines.append("|---" * (2 * len(splits) + 2) + "|")
    arms = sorted({r["arm"] for r in results.values() if "arm" in r})
    for arm in arms:
        runs = sorted((r for r in results.values() if r.get("arm") == arm), key=lambda r: r["seed"])
        control = {r["seed"]: r for r in results.values() if r.get("arm") == "random"}
        paired_runs = [r for r in runs if r["seed"] in control]
        cells = []
        for s in splits:
            rates = [r["eval"][s]["grounded"] / r["eval"][s]["n"] for r in runs]
            cells.append(str(over_seeds(rates)))
            cells.append(
                versus(paired_runs, [control[r["seed"]] for r in paired_runs], s)
                if arm != "random" and paired_runs else ""
            )  # fmt: skip
        lines.append(f"| {arm} | {len(runs)} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
