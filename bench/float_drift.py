"""How far the DAG's figures move when the float kernels change, as they do across machines.

    python bench/float_drift.py                  # smoke model, small sizes (~15 min on 2 cores)
    python bench/float_drift.py --keep /tmp/fd   # keep the two repositories to inspect
    python bench/float_drift.py --against REV    # this code vs REV's, same kernels

On one machine, with the same thread count, every stage is bitwise reproducible
(tests/test_bitwise.py). Another machine runs other float kernels: a CPU without AVX-512
dispatches torch's AVX2 kernels and MKL's AVX2 code path, another thread count splits the
reductions differently, a GPU runs other kernels altogether. Sums come out in another order,
the last bits differ, and sampled rollouts that branch on them diverge from there.

This script runs the same DAG (params.yaml + the smoke profile, shrunk so it ends in minutes)
in two fresh git + DVC repositories: once natively (1 thread), once as an AVX2-only machine
with 2 threads would (``ATEN_CPU_CAPABILITY=avx2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``,
``ONEDNN_MAX_CPU_ISA=AVX2``, ``threads: 2``). It prints which stages' outputs still match
bitwise and, for every metric both runs wrote, the two values and their difference.
Simplification: the emulated machine is still this CPU, so it shows the x86 kernel and
thread-count differences, not a GPU's.

With ``--against REV`` the second run is the code of git revision REV (its agentrl, stages,
dvc.yaml and params) on this machine's kernels: whether a change moved any output or figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrl.profiles import merge  # noqa: E402
from agentrl.tracking import flatten  # noqa: E402

# the smoke profile's model, on sizes that finish in minutes
SHRINK: dict[str, Any] = {
    "synth": {
        "workers": 1,
        "splits": {
            "midtrain": {"n": 1500, "copy_items": 1500},
            "sft": {"n": 600, "copy_items": 300},
            "rl": {"n": 100},
            "test": {"n": 40},
            "heldout_tools": {"n": 40},
            "heldout_compose": {"n": 20},
            "long_horizon": {"n": 16},  # eval.tasks of it are scored
        },
    },
    "midtrain": {"max_steps": 300, "eval_every": 100, "checkpoint_every": 100, "threads": 1},
    "sft": {
        "max_steps": 300,
        "eval_every": 100,
        "checkpoint_every": 100,
        "threads": 1,
        "format_check": {"samples": 20, "batch_size": 20},
    },
    "rl": {"steps": 3, "tasks_per_step": 4, "group_size": 4, "mini_batch": 16, "threads": 1},
    "eval": {"tasks": 16, "samples": 2, "bfcl": {"n": 5}},
}
NATIVE: dict[str, str] = {}
AVX2_TWO_THREADS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}


GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "agentrl", "GIT_AUTHOR_EMAIL": "agentrl@localhost",
    "GIT_COMMITTER_NAME": "agentrl", "GIT_COMMITTER_EMAIL": "agentrl@localhost",
}  # fmt: skip


def run(repo: Path, *command: str, env: dict[str, str]) -> str:
    """``command``'s stdout; the script exits with its output if it fails."""
    tools = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # dvc beside python
    env = os.environ | GIT_IDENTITY | {"PATH": tools, "PYTHONPATH": str(repo)} | env
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(
            f"{repo}: {' '.join(command)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return result.stdout


def make_repo(root: Path, params: dict[str, Any], tree: Path = ROOT) -> Path:
    """A git + DVC repository at ``root`` holding a copy of the project in ``tree`` with
    ``params`` (tests/test_bitwise.py builds its two clean clones with it too)."""
    root.mkdir(parents=True)
    for name in ("agentrl", "stages"):
        shutil.copytree(tree / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".gitignore"):
        shutil.copy(tree / name, root)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for command in (("git", "init", "-q"), ("dvc", "init", "-q"), ("git", "add", "-A"),
                    ("git", "commit", "-qm", "init")):  # fmt: skip
        run(root, *command, env={})
    return root


def small_params(tree: Path) -> dict[str, Any]:
    """``tree``'s params.yaml with its smoke profile and :data:`SHRINK` laid over it."""
    base = yaml.safe_load((tree / "params.yaml").read_text())
    smoke = yaml.safe_load((tree / "infra" / "profiles" / "smoke.yaml").read_text())
    return merge(merge(base, smoke), SHRINK)


def metrics(repo: Path) -> dict[str, float]:
    """Every number in ``repo``'s metrics files, by dotted key."""
    found: dict[str, float] = {}
    for path in sorted((repo / "metrics").glob("*.json")):
        found |= flatten(json.loads(path.read_text()), f"{path.stem}.")
    return {
        k: float(v)
        for k, v in found.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def locked(repo: Path) -> dict[str, dict[str, str]]:
    """Every stage's outputs as locked: path -> md5 (directories: the hash of their listing)."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    return {stage: {o["path"]: o["md5"] for o in entry["outs"]} for stage, entry in lock.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="build the repositories here and keep them")
    parser.add_argument("--against", help="a git revision: compare this code with its code")
    args = parser.parse_args()
    where = args.keep or Path(tempfile.mkdtemp(prefix="float_drift-"))
    params = small_params(ROOT)
    if args.against:
        other = where / "against_tree"
        run(ROOT, "git", "worktree", "add", "--detach", str(other), args.against, env={})
        runs = (("this", params, NATIVE, ROOT), (args.against, small_params(other), NATIVE, other))
    else:
        two_threads = merge(params, {s: {"threads": 2} for s in ("midtrain", "sft", "rl")})
        runs = (("native", params, NATIVE, ROOT),
                ("avx2/2thr", two_threads, AVX2_TWO_THREADS, ROOT))  # fmt: skip
    repos = {}
    for name, run_params, env, tree in runs:
        repo = make_repo(where / f"repo{len(repos)}", run_params, tree)
        started = time.perf_counter()
        run(repo, "dvc", "repro", env=env)
        print(f"{name}: dvc repro {time.perf_counter() - started:.0f} s", flush=True)
        repos[name] = repo
    a, b = (locked(r) for r in repos.values())
    for stage in a:
        same = all(a[stage][p] == b[stage].get(p) for p in a[stage])
        print(f"{stage:10s} outputs {'bitwise equal' if same else 'differ'}")
    ma, mb = (metrics(r) for r in repos.values())
    first, second = (name[:10] for name in repos)
    print(f"\n{'metric':60s} {first:>10s} {second:>10s} {'|diff|':>10s}")
    for key in sorted(set(ma) & set(mb)):
        print(f"{key:60s} {ma[key]:10.4f} {mb[key]:10.4f} {abs(ma[key] - mb[key]):10.4f}")
    if args.against:
        run(ROOT, "git", "worktree", "remove", "--force", str(where / "against_tree"), env={})
    if not args.keep:
        shutil.rmtree(where)


if __name__ == "__main__":
    main()
