"""rl stage: agentic RL from verifiable rewards on DeepSpeed, from models/sft, on the tasks
of data/synth/rl, with rollouts through the agent harness (params: rl, harness).

    python stages/rl.py                                      # what `dvc repro rl` runs
    dvc exp run -S rl.advantage=gigpo -S rl.reward=verifier  # an experiment, side by side
    dvc exp run -S rl.advantage=grpo -S rl.reward=random     # the falsification control

Writes models/rl/, checkpoints/rl/ (resumable; kept by DVC), metrics/rl.json and
plots/rl.tsv. Simplification, stated: one process (the rollout engine shares the module
DeepSpeed trains); multi-GPU rollouts go through the openai engine and vLLM.
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
