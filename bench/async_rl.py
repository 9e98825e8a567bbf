"""Synchronous vs one-step-off-policy RL through a real vLLM (CPU build), engine and
trainer each on one core.

    make vllm
    python bench/async_rl.py --project . --model sft --steps 4 --seeds 0 1 --baseline

PROJECT holds a params.yaml, data/synth (the synth stage's output) and models/<model> (a
saved model: the init stage's ``base`` or the sft stage's ``sft``). The script starts vLLM
on that model through infra/vllm_serve.sh pinned to core 1, pins itself (the trainer) to
core 0, and runs ``--steps`` rl steps at ``rl.max_staleness`` 0 and then 1, from the same
weights and seed. It prints, per step: wall seconds, rollout / update / sync / overlap /
idle seconds, staleness and the rollout-trainer log-prob gap; after each run, how far the
server's log-probs are from the trainer's final weights and from the start weights; then
the ratio of the mean step times, the first step of each run excluded (both roll it out in
turn); ``--lr`` runs both at another rl.lr. After each run the server holds its final
weights: the script scores them on the held-out splits (``--eval-splits``: tasks and tools
the rl stage never trains on; ``eval.tasks`` tasks x ``eval.samples`` episodes each, the
eval stage's sampled variant) and prints grounded success with a 95 % Wilson interval per
run and per staleness pooled over ``--seeds``.

Simplifications: the trainer runs in this process (RLTrainer, as the rl stage builds it)
without MLflow or DVC; rl.threads is forced to 1 (one core); dynamic sampling is off, so
every step updates on the same number of groups even where all rewards are equal. The
held-out score is the eval stage's cell code (run_cells) on one variant, not the stage.
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
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrl.chat import get_format  # noqa: E402
from agentrl.config import HarnessSection, load_params  # noqa: E402
from agentrl.dataset import iter_records  # noqa: E402
from agentrl.envs.registry import load_registry  # noqa: E402
from agentrl.eval.suite import run_cells  # noqa: E402
from agentrl.harness.build import openai_engine  # noqa: E402
from agentrl.harness.engine import Engine  # noqa: E402
from agentrl.model.build import load_model_dir  # noqa: E402
from agentrl.rl.trainer import RLTrainer  # noqa: E402
from agentrl.rl.weight_sync import served_gap  # noqa: E402
from agentrl.stats import wilson  # noqa: E402

SHOWN = ("time_rollout_s", "time_update_s", "time_sync_s", "time_overlap_s",
         "time_trainer_idle_s", "time_engine_idle_s", "staleness", "rollout_train_logp_gap",
         "grounded_success")  # fmt: skip


def start_vllm(model: Path, port: int, log: Path) -> subprocess.Popen:
    # float32 unless VLLM_DTYPE says otherwise: the trainer of run() is float32
    env = os.environ | {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "1",
                        "VLLM_DTYPE": os.environ.get("VLLM_DTYPE", "float32")}  # fmt: skip
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


def served(harness: HarnessSection, port: int) -> HarnessSection:
    """``harness`` with rollouts through the vLLM server on ``port``."""
    update = {"engine": "openai", "engine_url": f"http://127.0.0.1:{port}",
              "engine_model": "policy", "engine_reload": "vllm"}  # fmt: skip
    return harness.model_copy(update=update)


def run(
    project: Path, model: str, rl: dict[str, Any], seed: int, port: int, splits: list[str]
) -> tuple[list[dict], tuple[int, int]]:
    """One rl run from ``model`` with ``rl`` laid over the params' rl section: its per-step
    history and held-out (grounded wins, episodes)."""
    params = load_params(project / "params.yaml")
    fmt = get_format(params.model.format)
    harness = served(params.harness, port)
    cfg = params.rl.model_copy(update=rl | {"threads": 1, "dynamic_sampling": False})
    staleness = cfg.max_staleness
    weights, tokenizer = load_model_dir(project / "models" / model, fmt)
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    records = list(iter_records(project / "data" / "synth", "rl"))
    # the server runs float32 (infra/vllm_serve.sh's default): so does the trainer
    trainer = RLTrainer(cfg, harness, weights, tokenizer, fmt, registry, seed, "b", "fp32")
    walls: list[float] = []
    tick = [time.perf_counter()]

    def log(step: int, metrics: dict) -> None:
        walls.append(time.perf_counter() - tick[0])
        tick[0] = time.perf_counter()
        shown = " ".join(
            f"{k.removeprefix('time_')}={metrics.get(k, 0):{'.2e' if 'gap' in k else '.3f'}}"
            for k in SHOWN
        )
        print(
            f"seed {seed} staleness {staleness} step {step}: wall={walls[-1]:.1f} {shown}",
            flush=True,
        )

    ckpt = project / "checkpoints" / f"bench_async_{staleness}"
    subprocess.run(["rm", "-rf", str(ckpt)], check=True)
    _, history, _ = trainer.train(records, ckpt, log)
    # the server's final weights against the trainer's, and against where the run began
    chunk = cfg.logprob_chunk
    final = served_gap(trainer.rollout_engine, trainer.engine.module, tokenizer, fmt, records[0],
                       chunk, "fp32")  # fmt: skip
    start, _ = load_model_dir(project / "models" / model, fmt)
    moved = served_gap(trainer.rollout_engine, start, tokenizer, fmt, records[0], chunk, "fp32")
    print(f"seed {seed} staleness {staleness}: served vs the trainer's final weights "
          f"{final:.2e}, vs the start weights {moved:.2e}", flush=True)  # fmt: skip
    trainer.harness.close()
    return [h | {"wall_s": w} for h, w in zip(history, walls, strict=True)], heldout_score(
        trainer.rollout_engine, tokenizer, project, splits
    )


def heldout_score(
    engine: Engine, tokenizer: Any, project: Path, splits: list[str]
) -> tuple[int, int]:
    """Grounded (wins, episodes) of the weights ``engine`` serves on ``splits``."""
    params = load_params(project / "params.yaml")
    fmt = get_format(params.model.format)
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    sampled = params.eval.variants[0].model_copy(update={"splits": splits})
    cfg = params.eval.model_copy(update={"variants": [sampled]})
    seed = params.base.seed + params.eval.seed
    cells = run_cells(engine, tokenizer, fmt, registry, params.harness, cfg,
                      project / "data" / "synth", "heldout", seed)  # fmt: skip
    wins = sum(round(c.metrics["grounded_success"] * c.metrics["episodes"]) for c in cells)
    return wins, sum(c.metrics["episodes"] for c in cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--model", default="sft")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--lr", type=float, default=None, help="rl.lr of both (default: params')")
    parser.add_argument("--baseline", action="store_true", help="score --model before rl too")
    parser.add_argument("--eval-splits", nargs="+", default=["heldout_tools", "heldout_compose"])
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    (args.project / "checkpoints").mkdir(exist_ok=True)
    started = time.perf_counter()
    server = start_vllm(args.project / "models" / args.model, args.port,
                        args.project / "checkpoints" / "vllm_bench.log")  # fmt: skip
    print(f"vLLM healthy after {time.perf_counter() - started:.0f} s", flush=True)
    runs: dict[int, list[tuple[list[dict], tuple[int, int]]]] = {0: [], 1: []}
    try:
        if args.baseline:
            params = load_params(args.project / "params.yaml")
            _, tokenizer = load_model_dir(args.project / "models" / args.model,
                                          get_format(params.model.format))  # fmt: skip
            engine = openai_engine(served(params.harness, args.port), tokenizer)
            wins, n = heldout_score(engine, tokenizer, args.project, args.eval_splits)
            rate = wilson(wins, n)
            print(f"{args.model} before rl: held-out grounded {rate.value:.3f} "
                  f"[{rate.low:.3f}, {rate.high:.3f}] ({wins}/{n})", flush=True)  # fmt: skip
        for seed in args.seeds:
            for staleness in (0, 1):
                rl = {"steps": args.steps, "max_staleness": staleness}
                rl |= {"lr": args.lr} if args.lr is not None else {}
                runs[staleness].append(
                    run(args.project, args.model, rl, seed, args.port, args.eval_splits)
                )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
    walls = {k: fmean(h["wall_s"] for hist, _ in v for h in hist[1:]) for k, v in runs.items()}
    print(f"mean step wall (after the first): sync {walls[0]:.1f} s, async {walls[1]:.1f} s, "
          f"ratio {walls[1] / walls[0]:.2f}")  # fmt: skip
    for staleness, name in ((0, "sync"), (1, "async")):
        for seed, (hist, (wins, n)) in zip(args.seeds, runs[staleness], strict=True):
            train = [round(h["grounded_success"], 3) for h in hist]
            rate = wilson(wins, n)
            print(f"{name} seed {seed}: train grounded per step {train}; held-out grounded "
                  f"{rate.value:.3f} [{rate.low:.3f}, {rate.high:.3f}] ({wins}/{n})")  # fmt: skip
        wins = sum(w for _, (w, _) in runs[staleness])
        total = sum(n for _, (_, n) in runs[staleness])
        rate = wilson(wins, total)
        print(
            f"{name} pooled over seeds {args.seeds}: held-out grounded {rate.value:.3f} "
            f"[{rate.low:.3f}, {rate.high:.3f}] ({wins}/{total})"
        )


if __name__ == "__main__":
    main()
