"""Synthesis throughput: verified trajectories per second at 1 and 2 workers.

    python bench/synth_throughput.py                 # sft-like split, 4000 samples
    python bench/synth_throughput.py --n 20000 --split midtrain

Prints one line per worker count; figures, not pass/fail. Uses the split's settings from
params.yaml, writes to a temporary directory, and checks both runs wrote the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

from agentrl.config import load_params
from agentrl.synth.pipeline import build_registry, synthesize


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--split", default="sft")
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    params = load_params(args.params)
    split = params.synth.splits[args.split].model_copy(update={"n": args.n, "copy_items": 0})
    for workers in args.workers:
        cfg = params.synth.model_copy(update={"workers": workers, "splits": {args.split: split}})
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            stats = synthesize(
                cfg, params.base.seed, Path(tmp), build_registry(cfg), progress=False
            )[args.split]
            seconds = time.perf_counter() - started
            print(
                f"split={args.split} workers={workers} samples={stats['n']} attempts={stats['attempts']} "
                f"seconds={seconds:.2f} trajectories_per_s={stats['n'] / seconds:.0f} "
                f"tokens_est={stats['tokens']} digest={tree_digest(Path(tmp))}"
            )


if __name__ == "__main__":
    main()
