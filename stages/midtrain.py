"""midtrain stage: continued pre-training (next-token loss on every token) of models/base
on the rendered midtrain corpus, through DeepSpeed.

    python stages/midtrain.py                                 # what `dvc repro midtrain` runs
    torchrun --nproc_per_node 2 stages/midtrain.py            # two processes (ZeRO per params)

Writes models/midtrain/, checkpoints/midtrain/ (resumable; kept by DVC), metrics/midtrain.json
and plots/midtrain.tsv.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentrl.config import load_params
from agentrl.stage import run_stage
from agentrl.train.run import train_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    params = load_params(args.params)
    train_stage(
        "midtrain",
        params,
        Path(params.base.paths.models) / "base",
        "midtrain",
        params_file=args.params,
    )


if __name__ == "__main__":
    run_stage(main)
