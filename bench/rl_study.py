"""The learning study: does RL beat its sft start, and a random-reward control?

    python bench/rl_study.py --midtrain-ablation               # gigpo, grpo, random; seeds 0 1 2
    python bench/rl_study.py --arms gigpo,random --seeds 0 --eval-n 300
    python bench/rl_study.py --set rl.steps=44 --results reports/rl_study_long --out runs/rl_study_long
    python bench/rl_study.py --arms none --midtrain-ablation   # sft from base vs midtrain only

Runs go seed by seed (every arm at seed 0, then seed 1, ...), so a study cut short still
pairs each arm with its control. A run whose params equal the workspace's (an arm and seed
that params.yaml already names) adopts ``models/rl`` of the DAG when ``dvc status rl`` says
it is up to date, rather than training the same weights again. The random-reward control
changes only the reward: it keeps the recipe's advantage estimator and every other knob.
With pivot rollouts (``rl.rollouts`` pivots or mix) every run draws the DAG's
``data/pivots``, so the study first brings the pivots stage up to date (``dvc repro
pivots``, about half an hour on 2 cores when models/sft is new).

Each arm x seed is a real rl stage run (``stages/rl.py``) from ``models/sft`` with the
params.yaml in force plus the arm's overrides and ``rl.seed``, in its own directory under
--out (models, checkpoints, metrics, MLflow store). Every checkpoint, sft included, is then
run through the harness on the evaluation splits (worlds never seen in training), each
split under the first eval variant that runs it (greedy; ``long_horizon`` with its context
strategy and turn budget), and scored by **grounded** success: the verifier's verdict and
an answer read off a tool observation of that episode. A study that resumes evaluates
what its finished runs lack, and again a split whose variant has changed since. Rates get
Wilson 95% intervals per run and mean ± std over seeds per arm. Every run sees the same
tasks, so differences are paired (``agentrl.stats.paired_difference``, as the eval
stage's): each run against sft, each arm pooled over its seeds against sft, against the
random-reward control and (gigpo) against grpo, pairing seed with seed and task with task
(the simplification, stated: the (task, seed) pairs of an arm are treated as independent,
though a task recurs once per seed). The midtrain ablation (sft straight from
``models/base``) is scored on the two splits mid-training is meant to move. study.md
also counts grounded episodes by task family × expert calls (where an arm gains). Writes
``<results>/study.json`` and ``<results>/study.md``; runs stay in ``--out``.

A study may span sessions on different kinds of CPU. The sft stages reproduce their bytes
only on one kind (bf16 kernels differ between an AMX Xeon and an AVX512-BF16 EPYC, and a
CPU without native bf16 trains in fp32), so each kind's ``models/sft`` is an entry of its
own (``sft``, then ``sft@<digest>``: digest and CPU), evaluated when first met, and each
run records the one it started from and is paired against it, in every table. A run
begun from another machine's sft is kept as it is (its model is not here). Stated: the
seeds of an arm may then differ in their machine as well as their seed, and an arm paired
against the control at the same seed may pair runs from two sfts (task by task still).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import yaml
from study_runs import (
    BAND_KEYS,
    is_start,
    overrides_of,
    rollout_cell,
    run_params,
    run_stage,
    scored_under,
    split_variants,
    start_key,
    task_shapes,
)

from agentrl.config import EvalVariant, load_params
from agentrl.eval.failures import FAILURES, breakdown
from agentrl.stats import over_seeds, paired_difference, wilson

ARMS = {
    "grpo": {"rl.advantage": "grpo", "rl.reward": "verifier"},
    "gigpo": {"rl.advantage": "gigpo", "rl.reward": "verifier"},
    "rloo": {"rl.advantage": "rloo", "rl.reward": "verifier"},
    "random": {"rl.reward": "random"},  # the recipe's estimator: only the reward differs
}
SPLITS = ("test", "heldout_tools", "heldout_compose", "long_horizon")
ABLATION_SPLITS = ("heldout_tools", "heldout_compose")
# arm pairs reported besides each arm against sft and against the random control
HEAD_TO_HEAD = (("gigpo", "grpo"),)


def workspace_rl(run_params_path: Path, workspace_params: Path) -> Path | None:
    """The workspace's ``models/rl`` when it is this run's model: every param but the paths
    equal and the DAG's rl stage up to date (so it was trained from this ``models/sft`` on
    these data), else None."""

    def without_paths(path: Path) -> dict:
        tree = yaml.safe_load(path.read_text())
        tree["base"].pop("paths", None)
        return tree

    if without_paths(run_params_path) != without_paths(workspace_params):
        return None
    status = subprocess.run(["dvc", "status", "rl", "--json"], capture_output=True, text=True)
    if status.returncode or json.loads(status.stdout or "{}"):
        return None
    model = Path(load_params(workspace_params).base.paths.models) / "rl"
    return model.resolve() if (model / "config.json").exists() else None


def profile_pivots(params: Path, common: dict[str, object]) -> None:
    """With pivot rollouts under ``params``, the DAG's pivots stage brought up to date: the
    runs draw the workspace's data/pivots, profiled on its models/sft with params.yaml's
    pivots section, so a ``--set`` of another profile (any pivots.* but the band the rl
    stage applies) stops here."""
    if load_params(params).rl.rollouts == "episodes":
        return
    key = next((k for k in common if k.startswith("pivots.") and k not in BAND_KEYS), None)
    if key:
        raise SystemExit(
            f"--set {key}={common[key]}: the runs draw the DAG's data/pivots, profiled with "
            "params.yaml's pivots section: change it there"
        )
    subprocess.run(["dvc", "repro", "pivots"], check=True)


def stale_splits(done: dict, variants: dict[str, EvalVariant], n: int) -> list[str]:
    """Splits of ``variants`` that ``done`` (a run's evaluation so far) lacks, or ran on
    other than ``n`` tasks or under other harness changes than the variant's now."""
    return [s for s, variant in variants.items() if not scored_under(done.get(s, {}), n, variant)]


def evaluate(
    model_dir: Path, params_path: Path, splits: tuple[str, ...], n: int, done: dict | None = None
) -> dict:
    """``model_dir`` on the first ``n`` tasks of every split, under the split's eval variant
    (``split_variants``). A split in ``done`` (an earlier evaluation) is kept when it ran
    the same tasks under the same harness changes, else run again."""
    out = dict(done or {})
    variants = split_variants(params_path, splits)
    for split in stale_splits(out, variants, n):
        cell = rollout_cell(
            model_dir, params_path, split, n, variants[split],
            params_path.parent / f"{model_dir.name}.{split}.jsonl",
        )  # fmt: skip
        out[split] = {
            "grounded": sum(cell["grounded"]),
            "n": len(cell["grounded"]),
            "variant": cell["variant"],
            "harness": cell["harness"],
            "outcomes": cell["grounded"],  # task order: pairs across runs
            "failures": cell["failures"],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--arms", default="gigpo,grpo,random")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--eval-n", type=int, default=200, help="tasks per split (1 episode each)")
    parser.add_argument("--splits", default=",".join(SPLITS))
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every arm")
    parser.add_argument("--out", type=Path, default=Path("runs/rl_study"), help="run dirs")
    parser.add_argument(
        "--results", type=Path, default=Path("reports/rl_study"), help="study.json, study.md"
    )
    parser.add_argument(
        "--midtrain-ablation",
        action="store_true",
        help="also run sft straight from models/base (no midtrain) and evaluate it: what "
        "mid-training buys (the MidTool claim)",
    )
    args = parser.parse_args()
    base = yaml.safe_load(Path(args.params).read_text())
    workspace_metrics = Path(base["base"]["paths"]["metrics"])
    common = overrides_of(args.set)
    splits = tuple(args.splits.split(","))
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    args.results.mkdir(parents=True, exist_ok=True)
    results_path = args.results / "study.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}

    data = Path(base["base"]["paths"]["data"]) / "synth"
    shapes = {split: task_shapes(data, split, args.eval_n) for split in splits}

    def save() -> None:
        results_path.write_text(json.dumps(results, indent=1))
        report(results, splits, args.results / "study.md", shapes)

    sft_params = run_params(base, args.out / "sft", common)
    profile_pivots(sft_params, common)
    start = start_key(results, Path(base["base"]["paths"]["models"]) / "sft")
    started = time.perf_counter()
    results[start]["eval"] = evaluate(
        args.out / "sft/models/sft", sft_params, splits, args.eval_n, results[start].get("eval")
    )
    print(f"{start} evaluated in {time.perf_counter() - started:.0f} s", flush=True)
    save()

    def elsewhere(name: str) -> bool:
        """Did ``name`` start from another machine's sft? Its model is not here: its
        cells stay as they were."""
        theirs = results[name].get("start", "sft")
        if theirs != start:
            print(f"{name}: started from {theirs}, not this machine's {start}: kept as it is")
        return theirs != start

    if args.midtrain_ablation:
        run_dir = (args.out / "sft_from_base").resolve()
        path = run_params(base, run_dir, common, link=("midtrain", "base"))
        if "sft_from_base" not in results:
            train_s = round(run_stage("sft", path, run_dir), 1)
            results["sft_from_base"] = {"train_s": train_s, "start": start}
        if not elsewhere("sft_from_base"):
            ablation_splits = tuple(s for s in ABLATION_SPLITS if s in splits)
            results["sft_from_base"]["eval"] = evaluate(
                run_dir / "models/sft", path, ablation_splits, args.eval_n,
                results["sft_from_base"].get("eval"),
            )  # fmt: skip
            save()
    arms = [a for a in args.arms.split(",") if a != "none"]
    for seed in seeds:
        for arm in arms:
            name = f"{arm}-s{seed}"
            run_dir = args.out / name
            path = run_params(base, run_dir, {**ARMS[arm], **common, "rl.seed": seed})
            if name in results:  # trained: evaluate what is missing or ran another harness
                if elsewhere(name):
                    continue
                model = run_dir / "models/rl"
                if results[name]["adopted"]:
                    model = workspace_rl(path, Path(args.params))
                    if model is None:
                        raise SystemExit(
                            f"{name}: adopted the DAG's models/rl, which has changed since: "
                            f"drop {name} from {results_path} to train it"
                        )
                results[name]["eval"] = evaluate(
                    model, path, splits, args.eval_n, results[name]["eval"]
                )
                save()
                continue
            adopted = workspace_rl(path, Path(args.params))
            trained = (run_dir / "metrics/rl.json").exists()  # by a study stopped before eval
            if adopted is None:
                train_s = None if trained else round(run_stage("rl", path, run_dir), 1)
                rl_metrics = json.loads((run_dir / "metrics/rl.json").read_text())
                model = run_dir / "models/rl"
            else:  # the DAG's rl stage trained exactly this run
                train_s = None
                rl_metrics = json.loads((workspace_metrics / "rl.json").read_text())
                model = adopted
                print(f"{name}: the workspace's models/rl is this run: adopted", flush=True)
            results[name] = {
                "arm": arm,
                "seed": seed,
                "train_s": train_s,
                "adopted": adopted is not None,
                "start": start,
                "rl": rl_metrics["mean"],
                "eval": evaluate(model, path, splits, args.eval_n),
            }
            print(f"{name}: trained {train_s} s, {results[name]['eval']}", flush=True)
            save()
    save()


def start_of(results: dict, result: dict) -> dict:
    """The sft entry ``result`` is paired against: the sft it started from (runs made
    before runs recorded it started from ``sft``), or itself for an sft entry."""
    return result if is_start(result) else results[result.get("start", "sft")]


def current(result: dict, sft: dict, split: str) -> dict | None:
    """``result``'s cell on ``split`` when it ran sft's tasks under sft's harness changes,
    else None. sft is evaluated first in every study run, so its cells are the current
    ones: a cell the study has yet to redo (a split added, a variant changed) is left out
    of every table until it is, never mixed with current ones."""
    cell, ref = result.get("eval", {}).get(split), sft.get("eval", {}).get(split)
    if cell is None or ref is None:
        return None
    return cell if (cell.get("harness"), cell["n"]) == (ref.get("harness"), ref["n"]) else None


def pooled(runs: list[dict], controls: list[dict], split: str, results: dict) -> str:
    """``runs`` minus ``controls`` on ``split``, paired run by run (seed with seed) and task
    by task; '–' where a run lacks a current cell of the split (against the sft it started
    from) or per-task outcomes."""
    before, after = [], []
    for run, control in zip(runs, controls, strict=True):
        mine = (current(run, start_of(results, run), split) or {}).get("outcomes")
        theirs = (current(control, start_of(results, control), split) or {}).get("outcomes")
        if mine is None or theirs is None or len(mine) != len(theirs):
            return "–"
        before += [bool(x) for x in theirs]
        after += [bool(x) for x in mine]
    return str(paired_difference(before, after)) if after else "–"


def shape_table(
    split: str, shape: list[str], rows: dict[str, list[dict]], results: dict
) -> list[str]:
    """Grounded episodes on ``split`` by task family × expert calls (``shape``: the tasks in
    order), one row per name of ``rows``, its runs' current cells pooled: where an arm
    gains or loses, by the kind of task."""
    kinds = sorted(set(shape))
    lines = ["", f"### {split}", "", "| checkpoint | " + " | ".join(kinds) + " |",
             "|---" * (len(kinds) + 1) + "|"]  # fmt: skip
    for name, runs in rows.items():
        cells = [cell for run in runs if (cell := current(run, start_of(results, run), split))]
        if not cells or any(len(c["outcomes"]) != len(shape) for c in cells):
            continue
        won = {k: [o for c in cells for o, s in zip(c["outcomes"], shape, strict=True) if s == k]
               for k in kinds}  # fmt: skip
        lines.append(
            f"| {name} | " + " | ".join(f"{sum(won[k])}/{len(won[k])}" for k in kinds) + " |"
        )
    return lines


def report(
    results: dict, splits: tuple[str, ...], path: Path, shapes: dict[str, list[str]] | None = None
) -> None:
    """Four tables: every run against sft; every arm over its seeds against sft, the
    random control and its head-to-head rival; the first fault of failed episodes; and
    grounded episodes by kind of task, each arm's seeds pooled."""
    sft = results["sft"]
    starts = {name: entry for name, entry in results.items() if is_start(entry)}
    made = [f"{name} `{entry.get('digest', '?')}`, made on "
            f"{entry.get('cpu', 'a CPU not recorded')}" for name, entry in starts.items()]  # fmt: skip
    pairing = (
        ["", "Each run is paired against the sft it started from (its machine's): "
         "'sft' in the tables below means that one."] if len(starts) > 1 else []
    )  # fmt: skip
    ran = [f"{s} {sft['eval'][s]['variant']} `{json.dumps(sft['eval'][s]['harness'])}`"
           for s in splits if "variant" in sft.get("eval", {}).get(s, {})]  # fmt: skip
    lines = ["; ".join(made), *pairing, "", f"Eval variant of each split: {'; '.join(ran)}.", "", "## Runs", "", "| run | " + " | ".join(f"{s} grounded [95% CI] | vs sft (paired)"
             for s in splits) + " |", "|---" * (2 * len(splits) + 1) + "|"]  # fmt: skip
    for name, result in results.items():
        cells, own = [], start_of(results, result)
        for s in splits:
            cell = current(result, own, s)
            cells.append(str(wilson(cell["grounded"], cell["n"])) if cell else "–")
            cells.append(
                pooled([result], [own], s, results) if not is_start(result) and cell else ""
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    by_arm: dict[str, dict[int, dict]] = {}
    for result in results.values():
        if "arm" in result:
            by_arm.setdefault(result["arm"], {})[result["seed"]] = result
    rivals = {arm: ["sft", "random"] for arm in by_arm}
    for arm, rival in HEAD_TO_HEAD:
        rivals.get(arm, []).append(rival)
    lines += ["", "## Arms over seeds (paired: the rival's run at the same seed, task by task)",
              "", "| arm | seeds | rival | " + " | ".join(
                  f"{s} arm (mean ± std) | arm - rival" for s in splits) + " |",
              "|---" * (2 * len(splits) + 3) + "|"]  # fmt: skip
    for arm, runs_by_seed in sorted(by_arm.items()):
        for rival in rivals[arm]:
            if rival == arm or (rival != "sft" and rival not in by_arm):
                continue
            seeds = sorted(s for s in runs_by_seed if rival == "sft" or s in by_arm[rival])
            runs = [runs_by_seed[s] for s in seeds]
            controls = [
                start_of(results, run) if rival == "sft" else by_arm[rival][s]
                for s, run in zip(seeds, runs, strict=True)
            ]
            cells = []
            for s in splits:
                shown = [current(r, start_of(results, r), s) for r in runs]
                rates = [c["grounded"] / c["n"] for c in shown if c]
                whole = rates and len(rates) == len(runs)  # a mean over some seeds misleads
                cells += [
                    str(over_seeds(rates)) if whole else "–",
                    pooled(runs, controls, s, results),
                ]
            lines.append(f"| {arm} | {len(runs)} | {rival} | " + " | ".join(cells) + " |")
    lines += ["", f"## Episodes by first fault ({', '.join(splits)})", "",
              "| run | " + " | ".join(FAILURES) + " |", "|---" * (len(FAILURES) + 1) + "|"]  # fmt: skip
    for name, result in results.items():
        shown = [cell for s in splits if (cell := current(result, start_of(results, result), s))]
        counts = breakdown([k for cell in shown for k in cell["failures"]])
        lines.append(f"| {name} | " + " | ".join(str(counts[f]) for f in FAILURES) + " |")
    arm_rows = {
        f"{arm} ({len(runs)} seed{'s' * (len(runs) > 1)})": list(runs.values())
        for arm, runs in sorted(by_arm.items())
    }
    if shapes:
        lines += ["", "## Grounded episodes by task family × expert calls (seeds pooled)"]
        for split in splits:
            sft_rows = {name: [entry] for name, entry in starts.items()}
            lines += shape_table(split, shapes[split], sft_rows | arm_rows, results)
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
