"""eval stage: every checkpoint on every eval split and harness variant, and BFCL.

    python stages/eval.py                              # what `dvc repro eval` runs
    dvc exp run -S eval.tasks=300 -S eval.samples=4    # tighter intervals, more time

Runs models/{sft,rl} (eval.checkpoints) through the agent harness on the unseen worlds of
data/synth/eval (test, heldout_tools, heldout_compose, long_horizon) under each harness
variant of eval.variants, on the same tasks and seeds for every checkpoint, and on BFCL's
simple/multiple questions. Writes metrics/eval.json (with each checkpoint minus the one
before it, paired task by task), plots/eval_success.tsv, plots/eval_horizon.tsv and
reports/trajectories/; logs one MLflow run with the metrics, each cell's seconds by part,
a table and episode traces. Simplification, stated: BFCL is scored on the first answer
turn only (its AST categories are single-turn), greedily.
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
