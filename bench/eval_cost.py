"""What the eval stage costs: seconds per episode of every cell, and where they go.

    python bench/eval_cost.py                               # eval.checkpoints, params.yaml
    python bench/eval_cost.py --checkpoints sft --tasks 50  # a quicker look at one
    python bench/eval_cost.py --set eval.variants='[{name: greedy, harness: {temperature: 0}}]'

Runs the eval stage's own cells (``agentrl.eval.suite.run_cells``: each split's tasks through
the harness as one batch, same tasks and seeds as the stage) for each checkpoint, on the
engine ``harness.engine`` names, in ``base.precision``, and prints per cell: episodes,
seconds per episode, and the split of its time into prefill, decode (the engine), tool
execution, scoring (the verifier) and the harness's own work (rendering, tokenizing,
parsing); then the total per checkpoint. BFCL is timed as one more row per checkpoint.
``--tasks`` caps every cell (a cheaper estimate; per-episode cost grows a little with batch
size, so the stage's own figure is the one to quote). Writes nothing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from agentrl.bfcl.bench import load_questions, run_bfcl
from agentrl.chat import get_format
from agentrl.config import Params, load_params
from agentrl.envs.registry import load_registry
from agentrl.eval.suite import run_cells
from agentrl.harness.build import build_engine
from agentrl.precision import stage_precision

PARTS = ("prefill", "decode", "tools", "verify", "harness")


def overridden(path: str, sets: list[str], tasks: int | None) -> Params:
    """params.yaml with ``KEY=VALUE`` overrides (and every cell capped at ``tasks``)."""
    raw = yaml.safe_load(Path(path).read_text())
    for item in sets:
        key, value = item.split("=", 1)
        *parents, leaf = key.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    if tasks:
        raw["eval"]["tasks"] = tasks
        for variant in raw["eval"].get("variants", []):
            variant["tasks"] = min(tasks, variant.get("tasks") or tasks)
    target = Path("/tmp/eval_cost.params.yaml")
    target.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_params(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--checkpoints", default=None, help="comma list; eval.checkpoints")
    parser.add_argument("--tasks", type=int, default=None, help="cap every cell's tasks")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE (YAML value)")
    parser.add_argument("--no-bfcl", action="store_true")
    args = parser.parse_args()
    params = overridden(args.params, args.set, args.tasks)
    cfg, paths = params.eval, params.base.paths
    names = args.checkpoints.split(",") if args.checkpoints else cfg.checkpoints
    precision = stage_precision(params.base.precision, params.file)
    fmt = get_format(params.model.format)
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    dirs = {name: Path(paths.models) / name for name in names}
    engine, tokenizer = build_engine(params.harness, dirs[names[0]], fmt, precision)
    print(f"precision {precision}, engine {params.harness.engine}, bucket "
          f"{getattr(engine, 'bucket', '-')}")  # fmt: skip
    header = f"{'checkpoint':10s} {'variant':8s} {'split':16s} {'episodes':>8s} {'s/episode':>9s}"
    print(header + "".join(f" {p:>8s}" for p in PARTS) + f" {'total s':>8s}")
    for index, name in enumerate(names):
        if index:
            engine.load_weights(dirs[name])
        began = time.perf_counter()
        cells = run_cells(engine, tokenizer, fmt, registry, params.harness, cfg,
                          Path(paths.data) / "synth", name, params.base.seed + cfg.seed,
                          progress=lambda _: None)  # fmt: skip
        for c in cells:
            n, t = c.metrics["episodes"], c.timing
            print(f"{name:10s} {c.variant:8s} {c.split:16s} {n:8d} {t['total'] / n:9.2f}"
                  + "".join(f" {t[p] / t['total']:8.0%}" for p in PARTS)
                  + f" {t['total']:8.0f}", flush=True)  # fmt: skip
        if cfg.bfcl.categories and not args.no_bfcl:
            tick = time.perf_counter()
            questions = load_questions(Path(paths.data) / "bfcl", cfg.bfcl)
            run_bfcl(engine, tokenizer, fmt, questions, cfg.bfcl, params.harness.context_limit, 0)
            spent, asked = time.perf_counter() - tick, sum(map(len, questions.values()))
            print(f"{name:10s} {'bfcl':8s} {','.join(questions):16s} {asked:8d} "
                  f"{spent / asked:9.2f}" + " " * 9 * len(PARTS) + f" {spent:8.0f}")  # fmt: skip
        print(f"{name:10s} total {time.perf_counter() - began:.0f} s", flush=True)


if __name__ == "__main__":
    main()
