"""bfcl stage: BFCL's question and possible-answer files for the eval stage's benchmark.

    python stages/bfcl.py             # what `dvc repro bfcl` runs (needs PyPI once per pin)

Downloads the wheel named by `eval.bfcl.package` with `pip download --no-deps` (none of
its dependencies; its code is never imported), checks `eval.bfcl.sha256`, and extracts
the non-live AST categories in `eval.bfcl.categories` into `data/bfcl/`, which DVC caches.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentrl.bfcl.fetch import fetch
from agentrl.config import load_params
from agentrl.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    params = load_params(args.params)
    out = Path(params.base.paths.data) / "bfcl"
    counts = fetch(params.eval.bfcl, out)
    print(f"bfcl: {params.eval.bfcl.package}: {counts} questions -> {out}")


if __name__ == "__main__":
    run_stage(main)
