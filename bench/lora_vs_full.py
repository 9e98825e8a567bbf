"""LoRA against full fine-tuning on the default model: the sft stage run once per arm from
the same start, with everything else as params.yaml says.

    python bench/lora_vs_full.py                        # full, lora r16 (tokens trained)
    python bench/lora_vs_full.py --arms lora16 --set sft.max_steps=40 --out runs/lora

Each arm is a real ``stages/sft.py`` run in its own directory under --out (models/midtrain
linked to models/<--start>, default base: midtrain is not needed). Prints, per arm: wall
time, training tok/s, final loss and eval loss, and the greedy first-turn check (validity
and exact first call) on eval/test and eval/heldout_tools; writes <out>/lora_vs_full.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from rl_study import run_params  # run directories as the learning study makes them

ARMS = {
    "full": {"sft.lora.r": 0},
    "lora16": {"sft.lora.r": 16, "sft.lora.alpha": 32.0, "sft.lr": 5.0e-4},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--arms", default="full,lora16")
    parser.add_argument("--start", default="base", help="the model under models/ sft starts from")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every arm")
    parser.add_argument("--out", type=Path, default=Path("runs/lora_vs_full"))
    args = parser.parse_args()
    base = yaml.safe_load(Path(args.params).read_text())
    results = {}
    for arm in args.arms.split(","):
        run_dir = (args.out / arm).resolve()
        overrides = ARMS[arm] | {
            k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)
        }
        params = run_params(base, run_dir, overrides, link=("midtrain", args.start))
        env = os.environ | {"MLFLOW_TRACKING_URI": f"sqlite:///{run_dir}/mlflow.db"}
        started = time.perf_counter()
        command = [sys.executable, "stages/sft.py", "--params", str(params)]
        subprocess.run(command, env=env, check=True)
        metrics = json.loads((run_dir / "metrics" / "sft.json").read_text())
        results[arm] = {
            "wall_s": round(time.perf_counter() - started, 1),
            "tokens_per_s": logged_tokens_per_s(env["MLFLOW_TRACKING_URI"]),
            "loss": metrics["loss"],
            "eval_loss": metrics["eval_loss"],
            "format_check": metrics.get("format_check", {}),
        }
        print(arm, json.dumps(results[arm]), flush=True)
    (args.out / "lora_vs_full.json").write_text(json.dumps(results, indent=1))


def newest_stage_run(uri: str, stage: str) -> Any:
    """The newest MLflow run of ``stage`` in the store at ``uri``."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(
        search_all_experiments=True,
        filter_string=f"tags.stage = '{stage}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    return run


def logged_tokens_per_s(uri: str) -> float:
    """The sft run's throughput: a wall-clock figure, so in MLflow, not metrics/sft.json."""
    return newest_stage_run(uri, "sft").data.metrics["tokens_per_s"]


if __name__ == "__main__":
    main()
