"""sft stage: cold start on tool-call traces, loss on assistant tokens only, from
models/midtrain; ends with a greedy first-turn format check on eval/test and
eval/heldout_tools.

    python stages/sft.py                                      # what `dvc repro sft` runs

Writes models/sft/, checkpoints/sft/, metrics/sft.json (training figures plus
tool_call_validity and first_call_exact per split) and plots/sft.tsv.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentrl.chat import get_format
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import load_registry
from agentrl.eval.first_turn import first_turn_check
from agentrl.precision import generation_model, stage_precision
from agentrl.stage import run_stage
from agentrl.train.run import train_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    params = load_params(args.params)
    check = params.sft.format_check
    precision = stage_precision(params.base.precision, params.file)
    synth = Path(params.base.paths.data) / "synth"
    registry = load_registry(
        params.synth.envs, params.synth.heldout_tool_share, params.file
    )  # a bad plugin fails before training

    def format_check(model: Any, tokenizer: Any, run: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        generator = generation_model(model, precision)
        for split in ("test", "heldout_tools"):
            records = list(iter_records(synth, split, check.samples))
            scores = first_turn_check(
                generator,
                tokenizer,
                get_format(params.model.format),
                registry,
                records,
                check.max_new_tokens,
                check.batch_size,
            )
            out[split] = scores
            run.log_metrics({f"{split}.{k}": v for k, v in scores.items()})
        return {"format_check": out}

    train_stage(
        "sft",
        params,
        Path(params.base.paths.models) / "midtrain",
        "sft",
        after=format_check if check.samples else None,
        params_file=args.params,
    )


if __name__ == "__main__":
    run_stage(main)
