"""rl stage: agentic RL from verifiable rewards on DeepSpeed, from models/sft, on the tasks
of data/synth/rl, with rollouts through the agent harness (params: rl, harness).

    python stages/rl.py                                      # what `dvc repro rl` runs
    torchrun --nproc_per_node 2 stages/rl.py                 # two ranks, each its share of tasks
    dvc exp run -S rl.advantage=gigpo -S rl.reward=verifier  # an experiment, side by side
    dvc exp run -S rl.advantage=grpo -S rl.reward=random     # the falsification control

Writes models/rl/, checkpoints/rl/ (resumable; kept by DVC), metrics/rl.json and
plots/rl.tsv (rank 0). Simplification, stated: with the hf engine each rank generates
with the module DeepSpeed trains on it, so rollouts and updates take turns on a rank;
rollouts overlap updates only through a server (the openai engine and vLLM).
"""

from __future__ import annotations

import argparse

from agentrl.config import load_params
from agentrl.rl.run import rl_stage
from agentrl.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    rl_stage(load_params(args.params))


if __name__ == "__main__":
    run_stage(main)
