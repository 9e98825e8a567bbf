"""eval stage: every checkpoint on every eval split and harness variant, and BFCL.

    python stages/eval.py                         # what `dvc repro eval` runs
    dvc exp run -S eval.tasks=200 -S eval.samples=8   # tighter intervals, more time

Runs models/{midtrain,sft,rl} (eval.checkpoints) through the agent harness on the unseen
worlds of data/synth/eval (test, heldout_tools, heldout_compose, long_horizon) under each
harness variant of eval.variants, and on BFCL's simple/multiple/parallel questions.
Writes metrics/eval.json, plots/eval_success.tsv, plots/eval_horizon.tsv and
reports/trajectories/; logs one MLflow run with the metrics, a table and episode traces.
Simplification, stated: BFCL is scored on the first answer turn only (its AST
categories are single-turn), greedily.
"""

from __future__ import annotations

import argparse

from agentrl.config import load_params
from agentrl.eval.run import eval_stage
from agentrl.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    eval_stage(load_params(args.params))


if __name__ == "__main__":
    run_stage(main)
