"""The rl stage, as `dvc repro` runs it, with its rollouts served by a real vLLM (CPU build):
per step, the staleness, the sync time, the rollout-trainer log-prob gap, the groups that
updated and the batch's grounded success.

    make vllm
    python bench/rl_stage_vllm.py --project . --staleness 1

PROJECT holds params.yaml, data/synth and models/sft (``dvc repro sft``). The script builds a
scratch git + DVC repository from this code (bench/float_drift.py's make_repo) with PROJECT's
params and these changes only: ``harness.engine: openai``, ``engine_reload: vllm``,
``engine_url`` the server it starts, ``rl.max_staleness`` from ``--staleness``, ``rl.threads: 1``
(and ``rl.steps`` from ``--steps`` when given). It copies data/synth and models/sft in, starts
vLLM on models/sft through infra/vllm_serve.sh pinned to core 1, and runs ``dvc repro -s rl``
pinned to core 0. Then it reads the run's per-step figures: the DVC plot (plots/rl.tsv) for
the deterministic ones, the stage's MLflow run for the wall-clock ones (time_sync_s,
time_overlap_s, which never enter DVC outputs).

Simplification: ``-s`` runs the rl stage alone; the upstream outputs are copied, not
reproduced, so the scratch repository's dvc.lock holds the rl stage only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from async_rl import start_vllm  # noqa: E402
from float_drift import make_repo, run  # noqa: E402
from lora_vs_full import newest_stage_run  # noqa: E402

from agentrl.profiles import merge  # noqa: E402
from agentrl.report.figures import read_tsv  # noqa: E402

SHOWN = ("staleness", "groups", "zero_variance_share", "grounded_success",
         "rollout_train_logp_gap", "is_weight_mean", "clip_frac_high")  # fmt: skip
TIMED = ("time_rollout_s", "time_update_s", "time_sync_s", "time_overlap_s")


def logged_history(uri: str) -> dict[str, dict[int, float]]:
    """The newest rl run's wall-clock figures: name -> step -> value."""
    import mlflow

    run_id = newest_stage_run(uri, "rl").info.run_id
    client = mlflow.MlflowClient(uri)
    return {key: {m.step: m.value for m in client.get_metric_history(run_id, key)} for key in TIMED}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="default: the params' rl.steps")
    parser.add_argument("--port", type=int, default=8124)
    parser.add_argument("--keep", type=Path, default=None, help="keep the scratch repo here")
    args = parser.parse_args()
    project = args.project.resolve()
    params = yaml.safe_load((project / "params.yaml").read_text())
    paths = params["base"]["paths"]
    rl: dict[str, int] = {"max_staleness": args.staleness, "threads": 1}
    if args.steps is not None:
        rl["steps"] = args.steps
    served = {"engine": "openai", "engine_url": f"http://127.0.0.1:{args.port}",
              "engine_model": "policy", "engine_reload": "vllm"}  # fmt: skip
    params = merge(params, {"harness": served, "rl": rl})
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="rl_stage_vllm_")) / "repo"
    repo = make_repo(scratch, params)
    for part in (Path(paths["data"]) / "synth", Path(paths["models"]) / "sft"):
        shutil.copytree(project / part, repo / part)
    (repo / "checkpoints").mkdir(exist_ok=True)
    started = time.perf_counter()
    log = repo / "checkpoints" / "vllm.log"
    server = start_vllm(repo / paths["models"] / "sft", args.port, log)
    print(f"vLLM healthy after {time.perf_counter() - started:.0f} s", flush=True)
    try:
        started = time.perf_counter()
        out = run(repo, "taskset", "-c", "0", "dvc", "repro", "-s", "rl",
                  env={"OMP_NUM_THREADS": "1"})  # fmt: skip
        print(f"dvc repro -s rl: {time.perf_counter() - started:.0f} s", flush=True)
        print("".join(line for line in out.splitlines(True) if line.startswith("rl:")), end="")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
    rows = read_tsv(repo / paths["plots"] / "rl.tsv")
    timed = logged_history(f"sqlite:///{repo / 'mlflow.db'}")
    for row in rows:
        step = int(row["step"])
        shown = " ".join(f"{k}={row.get(k, float('nan')):.4g}" for k in SHOWN)
        clock = " ".join(f"{k.removeprefix('time_')}={timed[k].get(step, float('nan')):.1f}"
                         for k in TIMED)  # fmt: skip
        print(f"step {step}: {shown} {clock}")
    metrics = json.loads((repo / paths["metrics"] / "rl.json").read_text())
    print("metrics/rl.json mean:", json.dumps(metrics["mean"]))
    if args.keep is None:
        shutil.rmtree(scratch.parent)


if __name__ == "__main__":
    main()
