"""Scratch runs of the rl stage, shared by the screen and the study: a run's params.yaml
in its own directory, the stage run as a subprocess logging to the run's own MLflow store,
a checkpoint's grounded outcomes on an eval split, and the pin that keeps results made
over several sessions paired against one sft."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from agentrl.chat import get_format
from agentrl.config import EVAL_SPLITS, EvalVariant, load_params
from agentrl.dataset import iter_records
from agentrl.eval.failures import expert_calls, failure_kind
from agentrl.precision import cpu_model
from agentrl.tracking import content_digest

# pivots.* the rl stage applies to the stored pass rates (the rest shape the profile)
BAND_KEYS = ("pivots.min_pass_rate", "pivots.max_pass_rate")


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


def split_variants(params: Path, splits: tuple[str, ...]) -> dict[str, EvalVariant]:
    """The eval variant each split runs under: the first of ``eval.variants`` that lists
    it (the headline greedy one for most; long_horizon's own, with its context strategy
    and turn budget), so the study scores what the eval stage scores."""
    variants = load_params(params).eval.variants
    chosen = {}
    for split in splits:
        chosen[split] = next((v for v in variants if split in (v.splits or EVAL_SPLITS)), None)
        if chosen[split] is None:
            raise SystemExit(f"--splits: no eval variant of {params} runs {split!r}")
    return chosen


def scored_under(cell: dict, n: int, variant: EvalVariant) -> bool:
    """Whether a checkpoint's cell on a split ran ``n`` tasks under ``variant``'s harness
    changes; one that did not is scored again. Study cells count their tasks in ``n``,
    screen cells list them.

    >>> greedy = EvalVariant(name="greedy", harness={"temperature": 0.0})
    >>> scored_under({"n": 200, "harness": {"temperature": 0.0}}, 200, greedy)
    True
    >>> scored_under({"tasks": ["a", "b"], "harness": {"temperature": 0.0}}, 200, greedy)
    False
    >>> scored_under({"n": 200}, 200, greedy)  # scored before cells named their variant
    False
    """
    return cell.get("harness") == variant.harness and cell.get("n", len(cell.get("tasks", ()))) == n


def rollout_cell(
    model: Path, params: Path, split: str, n: int, variant: EvalVariant, out: Path
) -> dict:
    """Grounded outcomes of ``model`` on the first ``n`` tasks of ``split`` (one episode
    each, ``agentrl rollout`` under the eval variant ``variant``: the eval stage's engine,
    harness, precision and seed), by task, with each failure's kind and the variant's name
    and harness changes (``scored_under`` reads them); the trajectories stay in ``out``."""
    subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "rollout", "--model", str(model), "--split",
         split, "--n", str(n), "--variant", variant.name, "--params", str(params),
         "--out", str(out)],
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
        "variant": variant.name,
        "harness": variant.harness,
    }


def sft_digest(sft_dir: Path) -> str:
    """The content digest of an sft model directory but its chat template: the template is
    read by apply_chat_template and servers' chat endpoints, never by training or rollouts
    (agentrl.chat renders), so a template fix keeps results paired."""
    return content_digest(sft_dir, skip=frozenset({"chat_template.jinja"}))[:32]


def pin_sft(pin: dict, sft_dir: Path, results_path: Path) -> None:
    """Record in ``pin`` (first run) or check (later runs) the sft that results paired
    against it started from: its content digest (but the chat template) and the CPU that
    made it. bf16 stages reproduce their bytes only on one kind of CPU, so results that span
    sessions stop rather than pair a run against another machine's sft."""
    digest, cpu = sft_digest(sft_dir), cpu_model()
    if pin.setdefault("digest", digest) != digest:
        raise SystemExit(
            f"{results_path}: sft.digest: {pin['digest']} is not the workspace's models/sft "
            f"({digest}; made on {pin.get('cpu', 'a CPU not recorded')}, this is {cpu}): "
            "write these results elsewhere (--results)"
        )
    pin.setdefault("cpu", cpu)


def start_key(results: dict, sft_dir: Path) -> str:
    """The key in ``results`` of the sft entry that is the workspace's ``models/sft``: its
    digest (but the chat template) and the CPU that made it. The first is ``sft``; an sft
    made on another kind of CPU (bf16 stages reproduce their bytes only on one kind, and a
    CPU without native bf16 trains in fp32) gets an entry of its own, ``sft@<digest>``, so
    a study can go on on whatever machine a session has: each run is paired against the
    sft it started from.

    >>> import tempfile
    >>> sft = Path(tempfile.mkdtemp())
    >>> _ = (sft / "model.safetensors").write_bytes(b"one")
    >>> results = {}
    >>> start_key(results, sft), start_key(results, sft), sorted(results["sft"])
    ('sft', 'sft', ['cpu', 'digest'])
    >>> _ = (sft / "model.safetensors").write_bytes(b"two")
    >>> start_key(results, sft).startswith("sft@"), len(results)
    (True, 2)
    """
    digest = sft_digest(sft_dir)
    for key, entry in results.items():
        if is_start(entry) and entry["digest"] == digest:
            return key
    key = "sft" if "sft" not in results else f"sft@{digest[:8]}"
    results[key] = {"digest": digest, "cpu": cpu_model()}
    return key


def is_start(entry: dict) -> bool:
    """Is ``entry`` of a study's results an sft entry (``sft`` or ``sft@<digest>``), the
    start runs are paired against? Only those record a digest."""
    return "digest" in entry


def task_shapes(data: Path, split: str, n: int) -> list[str]:
    """Each of the first ``n`` tasks of ``split`` as family and expert call count
    ("store×3"): where a checkpoint gains or loses, by the kind of task."""
    return [f"{r['family']}×{len(expert_calls(r))}" for r in iter_records(data, split, n)]
