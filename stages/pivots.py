"""pivots stage: the informative intermediate states of expert trajectories, for one-turn
RL (params: pivots, harness, rl.grounded_only).

    python stages/pivots.py          # what `dvc repro pivots` runs
    dvc exp run -S pivots.min_pass_rate=0 -S pivots.max_pass_rate=1 -S rl.rollouts=pivots

Samples `pivots.samples` turns from models/sft at every assistant turn of the first
`pivots.tasks` trajectories of `pivots.split` and writes each candidate's pass rate,
and whether it is kept, to data/pivots/pivots.jsonl; figures to metrics/pivots.json.
With rl.rollouts episodes rl draws no pivot: it profiles nothing and says so.
"""

from __future__ import annotations

import argparse

from agentrl.config import load_params
from agentrl.rl.profiling import pivots_stage
from agentrl.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    pivots_stage(load_params(args.params))


if __name__ == "__main__":
    run_stage(main)
