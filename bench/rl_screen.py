"""Screening rl recipes: every arm from the same ``models/sft`` at one rl time budget, each
checkpoint paired task by task against sft (and against a reference arm).

    python bench/rl_screen.py                              # episodes vs pivots vs mix, 20 min
    python bench/rl_screen.py --budget-min 20 \\
        --arm lr2e-5 rl.lr=2e-5 --arm lora16 rl.lora.r=16 rl.lr=5e-5 \\
        --arm t07 harness.temperature=0.7 --arm rft rl.advantage=rft rl.dynamic_sampling=false
    python bench/rl_screen.py --set rl.track_drift=true --versus episodes ...
    python bench/rl_screen.py --report-only              # screen.md again from screen.json

An arm is a NAME and KEY=VALUE overrides of params.yaml (values read as YAML); ``--set``
applies to every arm. An arm with ``synth.*`` overrides (``synth.splits.rl.difficulty.ops=
[1,3]``: rl on deeper tasks than sft's) trains rl on its own rl split; an arm that draws
pivots (``rl.rollouts=pivots`` or ``mix``) profiles them first (the pivots stage, ~20 min,
reported as profile min, not rl loop time) on the sft it starts from. Arms whose data would
come out the same share it (``data-<digest>`` under --out); every checkpoint is still
scored on the workspace's eval splits. An arm with ``sft.*`` overrides first retrains sft
from the workspace's ``models/midtrain`` (``--arm sft240 sft.max_steps=240``; with
``synth.splits.sft.*`` overrides, on its own sft split); with nothing else of its own it is
scored as that sft, otherwise its rl starts there.

Each arm is a real rl stage run (``stages/rl.py``) in its own directory under --out
(models, checkpoints, metrics, MLflow store: scratch). Its step count fills --budget-min
of rl loop time (rollouts, update, sync: the per-step times in MLflow; model loading left
out) at the seconds a step took in a 2-step probe run. Arms that share the settings a
step's time depends on (``PACE_KEYS``) share one probe. An arm that sets ``rl.steps``
runs that many steps instead (a recipe compared at its own length).

``screen.json`` names the sft its cells scored (``sft.digest``, the content digest of the
workspace's ``models/sft`` but its chat template, which no rollout reads) and the CPU that
made it (``sft.cpu``); a run against another sft stops: screen it with another --results.
bf16 stages reproduce their bytes only on the same kind of CPU (an AMX Xeon's midtrain
differs from an AVX512-BF16 EPYC's in the last bits, and capping oneDNN below AMX does not
bring it back), so a screening that spans sessions needs machines of one kind. Every
checkpoint, sft included, then runs through the harness with the workspace's params (only
the model differs) on the first --eval-n tasks of each split under the eval variant that
runs it (greedy, with its turn budget), and on --sampled N tasks of ``test`` under
--sampled-variant (T=1) (``agentrl rollout --variant``: the eval stage's engine, harness
and seed). A cell records its variant's harness changes; one scored under others is
scored again when its model is still there. Grounded success is compared task by task
(``agentrl.stats.paired_difference``): each arm against sft and against --versus.

Every finished cell (a probe's pace, an arm's training figures and curves, a checkpoint's
outcomes on a split) goes into ``<results>/screen.json`` at once and a rerun skips it, so
a screening may span sessions that keep only what is committed. An arm whose run directory
is lost while some of its views are unscored trains again with the same settings and step
count and keeps the cells it had (the stages are bitwise reproducible); if its training
figures come out different, its cells are dropped and scored again. The table is
``<results>/screen.md``.

Simplifications, stated: one seed per arm (a screening; the study in ``rl_study.py``
takes seeds); equal time is equal loop time measured on this machine, not a budget
enforced inside the stage, so an arm can end up to one step short of or over it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from statistics import fmean

import yaml
from study_runs import (
    BAND_KEYS,
    overrides_of,
    pin_sft,
    rollout_cell,
    run_params,
    run_stage,
    scored_under,
    split_variants,
    task_shapes,
)

from agentrl.config import load_params
from agentrl.eval.failures import FAILURES, breakdown
from agentrl.rl.sources import SOURCES
from agentrl.stats import paired_difference, wilson

STEP_TIMES = ("time_rollout_s", "time_reference_s", "time_update_s", "time_sync_s")
# the settings a step's seconds depend on: arms equal in these share a probe
PACE_KEYS = (  # with the synth.* overrides: the tasks set a step's time
    "rl.rollouts", "rl.pivot_share", "rl.anchor_share", "rl.tasks_per_step", "rl.group_size", "rl.epochs",
    "rl.lora.r", "rl.track_drift", "rl.max_resample", "rl.dynamic_sampling",
    "harness.temperature", "harness.max_turns", "harness.max_new_tokens",
)  # fmt: skip
# the overrides that change the sft an arm starts from: its params, or its training data
SFT_KEYS = ("sft.", "synth.splits.sft.")
# the overrides that change the bytes of an arm's data: synth's, and a pivot profile's
DATA_KEYS = ("synth.", "sft.", "pivots.", "harness.", "rl.grounded_only")
CURVES = ("grounded_success", "reward_mean", "entropy", "kl_to_start", "logprob_change")
DEFAULT_ARMS = [
    ["episodes", "rl.rollouts=episodes"],
    ["pivots", "rl.rollouts=pivots"],
    ["mix", "rl.rollouts=mix"],
]


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


def draws_pivots(params: dict, overrides: dict[str, object]) -> bool:
    """Whether rl under ``overrides`` draws pivot states (rl.rollouts pivots or mix)."""
    return overrides.get("rl.rollouts", params["rl"]["rollouts"]) != "episodes"


def data_of(out: Path, params: dict, overrides: dict[str, object]) -> Path | None:
    """The data directory an arm trains on, shared by the arms that would write the same
    bytes there: ``synth.*`` overrides synthesise their own rl split (the other splits come
    out as the workspace's: a sample is drawn from seed, split and index), and an arm that
    draws pivots profiles them on the sft it starts from (in its own directory: the
    workspace's data/pivots may be stale), with its ``sft.*``, ``pivots.*`` (but the band:
    rl reselects from the pass rates), ``harness.*`` and rl.grounded_only.
    None: the workspace's data."""
    shaping = {k: v for k, v in overrides.items() if k.startswith(DATA_KEYS[:1])}
    if draws_pivots(params, overrides):
        shaping |= {
            k: v for k, v in overrides.items() if k.startswith(DATA_KEYS) and k not in BAND_KEYS
        }
    elif not shaping:
        return None
    key = json.dumps(shaping | {"pivots": draws_pivots(params, overrides)}, sort_keys=True)
    return (out / f"data-{hashlib.sha256(key.encode()).hexdigest()[:10]}").resolve()


def prepare_data(data: Path, params_path: Path, run_dir: Path) -> dict:
    """The synth stage into ``data`` and, when the arm draws pivots, the pivots stage on it
    (~20 min on 2 cores): each once, their seconds in ``data/prepared.json``."""
    data.mkdir(parents=True, exist_ok=True)
    done = data / "prepared.json"
    prepared = json.loads(done.read_text()) if done.exists() else {}
    params = yaml.safe_load(params_path.read_text())
    stages = ["synth"] + (["pivots"] if draws_pivots(params, {}) else [])
    for stage in stages:
        if f"{stage}_s" not in prepared:
            prepared[f"{stage}_s"] = round(run_stage(stage, params_path, run_dir), 1)
            done.write_text(json.dumps(prepared, indent=1))
    return prepared


def train(run_dir: Path, params: dict, overrides: dict[str, object]) -> dict:
    """One rl stage run: its loop seconds, per-source figures and per-step curves. An arm
    with ``synth.*`` overrides, or one that draws pivots, trains on data of its own
    (``data_of``); otherwise on the workspace's."""
    data = data_of(run_dir.parent, params, overrides)
    path = run_params(params, run_dir, overrides | ({"base.paths.data": str(data)} if data else {}))
    prepared = prepare_data(data, path, run_dir) if data else {}
    wall = run_stage("rl", path, run_dir)
    steps = mlflow_steps(run_dir)
    loop = sum(s.get(k, 0.0) for s in steps for k in STEP_TIMES)
    out: dict = {"steps": len(steps), "stage_s": round(wall, 1), "loop_s": round(loop, 1)}
    out |= {"profile_s": prepared["pivots_s"]} if "pivots_s" in prepared else {}
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
    out["curves"] = {c: [s.get(c) for s in steps] for c in CURVES if any(c in s for s in steps)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--arm", nargs="+", action="append", metavar="NAME [KEY=VALUE]")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="every arm")
    parser.add_argument("--budget-min", type=float, default=20.0, help="rl loop minutes an arm")
    parser.add_argument("--eval-n", type=int, default=200, help="greedy tasks per split")
    parser.add_argument("--splits", default="test,heldout_tools")
    parser.add_argument("--sampled", type=int, default=100, help="test tasks at T=1 (0: none)")
    parser.add_argument("--sampled-variant", default="sampled", help="eval variant of --sampled")
    parser.add_argument("--versus", default="episodes", help="the arm others pair against")
    parser.add_argument("--out", type=Path, default=Path("runs/rl_screen"), help="run dirs")
    parser.add_argument("--results", type=Path, default=Path("reports/rl_screen"))
    parser.add_argument("--report-only", action="store_true", help="rewrite screen.md, run nothing")
    args = parser.parse_args()
    base = yaml.safe_load(args.params.read_text())
    common = overrides_of(args.set)
    arms = {spec[0]: common | overrides_of(spec[1:]) for spec in args.arm or DEFAULT_ARMS}
    # (cell name, split, n, eval variant): each split under the variant the eval stage runs
    # it with (greedy), and test sampled under --sampled-variant
    cfg = load_params(args.params)
    variants = split_variants(args.params, tuple(args.splits.split(",")))
    views = [(s, s, args.eval_n, v) for s, v in variants.items()]
    if args.sampled:
        if args.sampled_variant not in [v.name for v in cfg.eval.variants]:
            raise SystemExit(f"--sampled-variant: {args.params} has no eval variant "
                             f"{args.sampled_variant!r}")  # fmt: skip
        sampled = cfg.eval.variant(args.sampled_variant)
        views.append(("test_sampled", "test", args.sampled, sampled))
    greedy = {view for view, *_, v in views if v.applied_to(cfg.harness).temperature == 0}
    args.out.mkdir(parents=True, exist_ok=True)
    args.results.mkdir(parents=True, exist_ok=True)
    results_path = args.results / "screen.json"
    saved = json.loads(results_path.read_text()) if results_path.exists() else {}
    paces, results, cells = saved.get("paces", {}), saved.get("arms", {}), saved.get("cells", {})
    sft_arms = saved.get("sft_arms", {})
    models = Path(base["base"]["paths"]["models"]).resolve()
    sft = saved.get("sft", {})
    if not args.report_only:  # every "vs sft" pairs against the sft these cells scored
        pin_sft(sft, models / "sft", results_path)

    def save() -> None:
        tables = dict(sft=sft, paces=paces, arms=results, sft_arms=sft_arms, cells=cells)
        results_path.write_text(json.dumps(tables, indent=1))

    def evaluate(name: str, model: Path) -> dict[str, list[int]]:
        for view, split, n, variant in views:
            key = f"{name}.{view}"
            if not scored_under(cells.get(key, {}), n, variant):
                if not model.is_dir():
                    print(f"{key}: {model} is gone, the cell stays as it was", flush=True)
                    continue
                jsonl = args.out / f"{key}.jsonl"
                cells[key] = rollout_cell(model, args.params, split, n, variant, jsonl)
                save()
        return scored_outcomes(name)

    def scored_outcomes(name: str) -> dict[str, list[int]]:
        return {v: cells[f"{name}.{v}"]["grounded"] for v, *_ in views if f"{name}.{v}" in cells}

    def drop_cells(arm: str) -> None:
        for view, *_ in views:
            cells.pop(f"{arm}.{view}", None)

    def run_arms() -> dict[str, dict[str, list[int]]]:
        """Train what is missing, score what is unscored: every arm's outcomes by view. A
        model lost with views still unscored is trained again with the same settings; the
        stages are bitwise reproducible, so its scored cells stay unless its training
        figures come out different."""
        outcomes = {"sft": evaluate("sft", models / "sft")}
        for arm, overrides in arms.items():
            run_dir = (args.out / arm).resolve()
            unscored = any(f"{arm}.{view}" not in cells for view, *_ in views)
            tuned = {k: v for k, v in overrides.items() if k.startswith(SFT_KEYS)}
            sft_only = bool(tuned) and set(overrides) - set(tuned) <= set(common)
            trained = arm in results and results[arm]["overrides"] == overrides
            rl_model = run_dir / "models" / "rl"
            rl_needed = not sft_only and (not trained or (unscored and not rl_model.is_dir()))
            if tuned:
                model = run_dir / "models" / "sft"
                done = sft_arms.get(arm, {}).get("overrides") == tuned
                twin = next(
                    (a for a, r in sft_arms.items() if a != arm and r["overrides"] == tuned
                     and (args.out / a / "models" / "sft").is_dir()),
                    None,
                )  # fmt: skip
                if twin and not model.exists():  # its sft is trained: share it
                    model.parent.mkdir(parents=True, exist_ok=True)
                    model.symlink_to((args.out / twin / "models" / "sft").resolve())
                    sft_arms[arm], done = sft_arms[twin], True
                lost = not model.is_dir() and (rl_needed or (sft_only and unscored))
                if not done or lost:
                    again = retrain_sft(run_dir, base, tuned)
                    if not done or again["metrics"] != sft_arms[arm]["metrics"]:
                        results.pop(arm, None)  # an rl arm on top trains again
                        trained, rl_needed = False, not sft_only
                        drop_cells(arm)
                    sft_arms[arm] = again
                    save()
                if sft_only:  # an sft arm: scored as it is
                    outcomes[arm] = evaluate(arm, model)
                    continue
            if rl_needed:
                paced = {k: v for k, v in overrides.items() if k.startswith("synth.")}
                paced |= {k: overrides[k] for k in PACE_KEYS if k in overrides}
                pace = json.dumps(paced, sort_keys=True)
                if trained:  # the lost model again, at its own step count
                    steps = results[arm]["steps"]
                elif "rl.steps" in overrides:  # a recipe's own step count, not the budget's
                    steps = int(overrides["rl.steps"])
                else:
                    if pace not in paces:
                        probe = train(
                            args.out / f"probe-{len(paces)}", base, overrides | {"rl.steps": 2}
                        )
                        paces[pace] = probe["loop_s"] / probe["steps"]
                        save()
                    steps = max(2, round(args.budget_min * 60 / paces[pace]))
                print(f"{arm}: {steps} steps", flush=True)
                again = train(run_dir, base, overrides | {"rl.steps": steps})
                if not trained or again["curves"] != results[arm]["curves"]:
                    if trained:
                        print(f"{arm}: trained again, other curves: its cells are dropped")
                    drop_cells(arm)
                results[arm] = again | {"overrides": overrides}
                save()
            outcomes[arm] = evaluate(arm, rl_model)
        return outcomes

    if args.report_only:  # the table again from what screen.json holds
        names = dict.fromkeys(["sft", *sft_arms, *results])
        outcomes = {name: scored_outcomes(name) for name in names}
    else:
        outcomes = run_arms()
    kinds = {
        name: {v: cells[f"{name}.{v}"]["failures"] for v, *_ in views if v in greedy and v in got}
        for name, got in outcomes.items()
    }
    data = Path(base["base"]["paths"]["data"]) / "synth"
    shapes = {v: task_shapes(data, split, n) for v, split, n, _ in views if v in greedy}
    report(
        results, sft_arms, outcomes, kinds, shapes, [v for v, *_ in views], args.versus,
        args.results / "screen.md",
    )  # fmt: skip


def retrain_sft(run_dir: Path, params: dict, overrides: dict[str, object]) -> dict:
    """An sft stage run from the workspace's ``models/midtrain`` with ``overrides`` (sft.*,
    and synth.splits.sft.*: the sft split synthesised in the arm's data): its seconds and
    metrics; the model is ``run_dir/models/sft``."""
    model = run_dir / "models" / "sft"
    if model.is_symlink():  # an earlier rl arm of this name started from the workspace's
        model.unlink()
    data = data_of(run_dir.parent, params, overrides)
    own = {"base.paths.data": str(data)} if data else {}
    path = run_params(params, run_dir, overrides | own, link=("midtrain", "midtrain"))
    if data:
        prepare_data(data, path, run_dir)
    seconds = run_stage("sft", path, run_dir)
    metrics = json.loads((run_dir / "metrics" / "sft.json").read_text())
    return {"overrides": overrides, "stage_s": round(seconds, 1), "metrics": metrics}


def curve(values: list | None) -> str:
    """A curve's mean over its first and its last two steps."""
    kept = [v for v in values or [] if v is not None]
    if not kept:
        return "–"
    return f"{fmean(kept[:2]):.3f} → {fmean(kept[-2:]):.3f}"


def report(
    results: dict,
    sft_arms: dict,
    outcomes: dict,
    kinds: dict,
    shapes: dict[str, list[str]],
    views: list[str],
    versus: str,
    path: Path,
) -> None:
    lines = [
        "| arm | overrides | steps | loop min | profile min | source | groups kept/drawn "
        "| zero-variance | s per kept group |",
        "|---" * 9 + "|",
    ]
    for arm, r in results.items():
        shown = ", ".join(f"{k}={v}" for k, v in r["overrides"].items()) or "(params.yaml)"
        profile = f"{r['profile_s'] / 60:.1f}" if "profile_s" in r else "–"
        for source in SOURCES:
            if source in r:
                s = r[source]
                lines.append(
                    f"| {arm} | {shown} | {r['steps']} | {r['loop_s'] / 60:.1f} | {profile} | {source} | "
                    f"{s['groups_kept']:.0f}/{s['groups_drawn']:.0f} | "
                    f"{s['zero_variance_share']:.0%} | {s['seconds_per_kept_group']:.1f} |"
                )
    if sft_arms:
        lines += ["", "| sft arm | overrides | stage min | eval loss | first call exact (test) |",
                  "|---" * 5 + "|"]  # fmt: skip
    for arm, r in sft_arms.items():
        shown = ", ".join(f"{k}={v}" for k, v in r["overrides"].items())
        m = r["metrics"]
        exact = m.get("format_check", {}).get("test", {}).get("first_call_exact", "–")
        lines.append(
            f"| {arm} | {shown} | {r['stage_s'] / 60:.1f} | {m.get('eval_loss', '–')} | {exact} |"
        )
    lines += ["", "Train curves (mean of the first two steps → of the last two):", "",
              "| arm | " + " | ".join(CURVES) + " |", "|---" * (len(CURVES) + 1) + "|"]  # fmt: skip
    for arm, r in results.items():
        lines.append(f"| {arm} | " + " | ".join(curve(r["curves"].get(c)) for c in CURVES) + " |")
    lines += ["", "Grounded success [95% CI], paired differences [95% CI]:", "",
              "| checkpoint | " + " | ".join(f"{v} | vs sft | vs {versus}" for v in views) + " |",
              "|---" * (3 * len(views) + 1) + "|"]  # fmt: skip
    for name, cells in outcomes.items():
        row = []
        for v in views:
            if v not in cells:
                row += ["–", "", ""]
                continue
            row.append(str(wilson(sum(cells[v]), len(cells[v]))))
            row.append(
                str(paired_difference(outcomes["sft"][v], cells[v])) if name != "sft" else ""
            )
            paired = name not in ("sft", versus) and v in outcomes.get(versus, {})
            row.append(str(paired_difference(outcomes[versus][v], cells[v])) if paired else "")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += ["", "What went wrong first (`agentrl/eval/failures.py`), greedy episodes:", "",
              "| checkpoint | split | " + " | ".join(FAILURES) + " |",
              "|---" * (len(FAILURES) + 2) + "|"]  # fmt: skip
    for name in outcomes:
        for v in views:
            counts = breakdown(kinds[name][v]) if v in kinds.get(name, {}) else None
            if counts:
                lines.append(f"| {name} | {v} | " + " | ".join(map(str, counts.values())) + " |")
    for v, shape in shapes.items():
        kinds_of_task = sorted(set(shape))
        lines += ["", f"Grounded on {v} by task family × expert calls (greedy):", "",
                  "| checkpoint | " + " | ".join(kinds_of_task) + " |",
                  "|---" * (len(kinds_of_task) + 1) + "|"]  # fmt: skip
        for name, cells in outcomes.items():
            if v in cells:
                won = {
                    k: [g for g, s in zip(cells[v], shape, strict=True) if s == k]
                    for k in kinds_of_task
                }
                row = " | ".join(f"{sum(won[k])}/{len(won[k])}" for k in kinds_of_task)
                lines.append(f"| {name} | {row} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
