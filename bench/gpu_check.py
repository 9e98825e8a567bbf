"""GPU check of a profile: a few real RL steps of Qwen2.5-0.5B on one CUDA GPU, with the
rollout and training throughput they reached.

    python bench/gpu_check.py                                   # 0.5B profile, hf engine, 3 steps
    python bench/gpu_check.py --model /models/Qwen2.5-0.5B-Instruct --steps 5
    python bench/gpu_check.py --engine openai --url http://127.0.0.1:8000   # a running vllm serve

In a scratch directory it synthesises a small task set, runs the init stage (the HF model
from the profile, or --model when the machine cannot reach the hub), takes that model as
the sft checkpoint, and runs the rl stage for --steps steps with the profile's knobs
(bf16, ZeRO from the profile, its batch sizes). It prints per-step and mean rollout
tokens/s, update tokens/s and the time split. The default hf engine keeps the check inside
our venv (vLLM pins another torch); --engine openai measures rollouts through vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from agentrl.profiles import merge  # noqa: E402

SMALL = {"midtrain": 40, "sft": 40, "rl": 256, "test": 20, "heldout_tools": 20,
         "heldout_compose": 20, "long_horizon": 4}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", type=Path, default=ROOT / "infra/profiles/qwen2.5-0.5b.yaml")
    parser.add_argument("--model", help="HF id or local path (default: the profile's)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--engine", choices=["hf", "openai"], default="hf")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=Path("/tmp/agentrl-gpu-check"))
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        sys.exit(2)
    print(f"gpu: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    params = merge(yaml.safe_load((ROOT / "params.yaml").read_text()),
                   yaml.safe_load(args.profile.read_text()))  # fmt: skip
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    for name in ("data", "models", "metrics", "plots", "reports", "checkpoints"):
        params["base"]["paths"][name] = str(args.out / name)
    for split, n in SMALL.items():
        params["synth"]["splits"][split]["n"] = n
    params["synth"]["splits"]["midtrain"]["copy_items"] = 0
    params["synth"]["splits"]["sft"]["copy_items"] = 0
    if args.model:
        params["model"]["source"] = args.model
    params["rl"] |= {"steps": args.steps, "checkpoint_every": args.steps + 1}
    params["harness"]["engine"] = args.engine
    params["harness"]["engine_url"] = args.url
    path = args.out / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    env = os.environ | {"MLFLOW_TRACKING_URI": f"sqlite:///{args.out / 'mlflow.db'}"}
    for stage in ("synth", "init"):
        started = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "stages" / f"{stage}.py"), "--params", str(path)],
                       env=env, check=True)  # fmt: skip
        print(f"{stage}: {time.perf_counter() - started:.0f} s", flush=True)
    shutil.copytree(args.out / "models" / "base", args.out / "models" / "sft")
    started = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "stages" / "rl.py"), "--params", str(path)],
                   env=env, check=True)  # fmt: skip
    print(f"rl: {args.steps} steps in {time.perf_counter() - started:.0f} s", flush=True)
    rows = (args.out / "plots" / "rl.tsv").read_text().splitlines()
    header = rows[0].split("\t")
    keys = ("rollout_tokens_per_s", "update_tokens_per_s", "time_rollout_s", "time_update_s",
            "response_tokens", "reward_mean")  # fmt: skip
    print("step  " + "  ".join(keys))
    for row in rows[1:]:
        values = dict(zip(header, row.split("\t"), strict=True))
        print(f"{values['step']:>4}  " + "  ".join(f"{float(values[k] or 0):.1f}" for k in keys))
    print(json.dumps(json.loads((args.out / "metrics" / "rl.json").read_text())["mean"], indent=1))


if __name__ == "__main__":
    main()
