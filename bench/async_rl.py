"""Synchronous vs one-step-off-policy RL through a real vLLM (CPU build), engine and
trainer each on one core.

    make vllm
    python bench/async_rl.py --project DIR --model base --steps 3

DIR holds a params.yaml, data/synth (the synth stage's output) and models/<model> (a
saved model: the init stage's ``base`` or the sft stage's ``sft``). The script starts vLLM
on that model through infra/vllm_serve.sh pinned to core 1, pins itself (the trainer) to
core 0, and runs ``--steps`` rl steps at ``rl.max_staleness`` 0 and then 1, from the same
weights and seed. It prints, per step: wall seconds, rollout / update / sync / overlap /
idle seconds, staleness and the rollout-trainer log-prob gap; then the ratio of the mean
step times, the first step of each run excluded (both roll it out in turn).

Simplifications: the trainer runs in this process (RLTrainer, as the rl stage builds it)
without MLflow or DVC; rl.threads is forced to 1 (one core); dynamic sampling is off, so
every step updates on the same number of groups even where all rewards are equal.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import fmean

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrl.chat import get_format  # noqa: E402
from agentrl.config import load_params  # noqa: E402
from agentrl.dataset import iter_records  # noqa: E402
from agentrl.envs.registry import load_registry  # noqa: E402
from agentrl.model.build import load_model_dir  # noqa: E402
from agentrl.rl.trainer import RLTrainer  # noqa: E402

SHOWN = ("time_rollout_s", "time_update_s", "time_sync_s", "time_overlap_s",
         "time_trainer_idle_s", "time_engine_idle_s", "staleness", "rollout_train_logp_gap",
         "grounded_success")  # fmt: skip


def start_vllm(model: Path, port: int, log: Path) -> subprocess.Popen:
    env = os.environ | {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "1"}
    command = ["taskset", "-c", "1", str(ROOT / "infra" / "vllm_serve.sh"), str(model), str(port)]
    proc = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    deadline = time.time() + 900
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(2)
    sys.exit(f"vLLM did not start: {log.read_text()[-2000:]}")


def run(project: Path, model: str, steps: int, staleness: int, port: int) -> list[dict]:
    params = load_params(project / "params.yaml")
    fmt = get_format(params.model.format)
    harness = params.harness.model_copy(
        update={
            "engine": "openai",
            "engine_url": f"http://127.0.0.1:{port}",
            "engine_model": "policy",
            "engine_reload": "vllm",
        },
    )
    cfg = params.rl.model_copy(
        update={"steps": steps, "max_staleness": staleness, "threads": 1, "dynamic_sampling": False}
    )
    weights, tokenizer = load_model_dir(project / "models" / model, fmt)
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    records = list(iter_records(project / "data" / "synth", "rl"))
    trainer = RLTrainer(cfg, harness, weights, tokenizer, fmt, registry, params.base.seed, "b")
    walls: list[float] = []
    tick = [time.perf_counter()]

    def log(step: int, metrics: dict) -> None:
        walls.append(time.perf_counter() - tick[0])
        tick[0] = time.perf_counter()
        shown = " ".join(f"{k.removeprefix('time_')}={metrics.get(k, 0):.3f}" for k in SHOWN)
        print(f"staleness {staleness} step {step}: wall={walls[-1]:.1f} {shown}", flush=True)

    ckpt = project / "checkpoints" / f"bench_async_{staleness}"
    subprocess.run(["rm", "-rf", str(ckpt)], check=True)
    _, history, _ = trainer.train(records, ckpt, log)
    trainer.harness.close()
    return [h | {"wall_s": w} for h, w in zip(history, walls, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--model", default="sft")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--port", type=int, default=8123)
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    server = start_vllm(args.project / "models" / args.model, args.port,
                        args.project / "vllm_bench.log")  # fmt: skip
    print(f"vLLM healthy after {time.perf_counter() - started:.0f} s", flush=True)
    try:
        sync = run(args.project, args.model, args.steps, 0, args.port)
        ahead = run(args.project, args.model, args.steps, 1, args.port)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
    s, a = fmean(h["wall_s"] for h in sync[1:]), fmean(h["wall_s"] for h in ahead[1:])
    print(f"mean step wall (after the first): sync {s:.1f} s, async {a:.1f} s, ratio {a / s:.2f}")
    for name, hist in (("sync", sync), ("async", ahead)):
        print(
            f"{name}: grounded_success per step {[round(h['grounded_success'], 3) for h in hist]}"
        )


if __name__ == "__main__":
    main()
