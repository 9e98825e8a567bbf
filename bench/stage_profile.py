"""Wall time and peak resident memory of each DAG stage, as `dvc repro` would run them.

    python bench/stage_profile.py                       # every stage, in DAG order
    python bench/stage_profile.py --stages sft,rl       # some of them

Each stage runs as ``dvc repro --single-item <stage> --force`` (so it really runs); the
resident set size of its whole process tree is sampled every 0.5 s. Prints one row per
stage (seconds, peak RSS in GB) and the total; nothing is written besides what the stages
themselves write.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time

import psutil

ORDER = ("synth", "init", "bfcl", "midtrain", "sft", "pivots", "rl", "eval", "report")


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def profile(stage: str) -> tuple[float, float, int]:
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "dvc", "repro", "--single-item", "--force", stage]
    )
    proc, peak = psutil.Process(child.pid), 0
    while child.poll() is None:
        peak = max(peak, tree_rss(proc))
        time.sleep(0.5)
    return time.perf_counter() - started, peak / 2**30, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stages", default=",".join(ORDER))
    args = parser.parse_args()
    rows, total = [], 0.0
    for stage in args.stages.split(","):
        seconds, peak, code = profile(stage)
        total += seconds
        rows.append(f"| {stage} | {seconds / 60:.1f} | {peak:.2f} | {code} |")
        if code:
            break
    print("| stage | minutes | peak RSS (GB) | exit |\n|---|---|---|---|")
    print("\n".join(rows))
    print(f"| total | {total / 60:.1f} | | |")


if __name__ == "__main__":
    main()
