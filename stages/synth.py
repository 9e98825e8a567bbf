"""synth stage: MidTool-style tool-use data for every split, recorded in MLflow.

    python stages/synth.py            # what `dvc repro synth` runs
    python stages/synth.py --params other.yaml

Reads params `base`, `tracking`, `synth`; writes `data/synth/` (tools.json, midtrain/,
sft/, rl/, eval/{test,heldout_tools,heldout_compose,long_horizon}/) and
`metrics/synth.json`. Simplification: one tool call per assistant turn (no parallel calls).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentrl.atomic import atomic_dir, write_json_atomic
from agentrl.config import load_params
from agentrl.stage import run_stage
from agentrl.synth.pipeline import build_registry, synthesize
from agentrl.synth.report import summarize, write_samples
from agentrl.tracking import stage_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()

    params = load_params(args.params)
    registry = build_registry(params.synth, args.params)
    out = Path(params.base.paths.data) / "synth"
    metrics_file = Path(params.base.paths.metrics) / "synth.json"
    sections = {"base": params.section_dict("base"), "synth": params.section_dict("synth")}

    with stage_run("synth", params.tracking, sections) as run, atomic_dir(out) as tmp:
        stats = synthesize(params.synth, params.base.seed, tmp, registry)
        write_json_atomic(
            tmp / "tools.json", {"families": sorted(registry.envs), **registry.catalog()}
        )
        metrics = summarize(stats)
        run.log_metrics(metrics["flat"])
        run.log_dict(metrics["splits"], "synth_stats.json")
        write_samples(run, tmp, params.tracking.log_samples)
        run.record_output(tmp)
        write_json_atomic(metrics_file, metrics["dvc"])


if __name__ == "__main__":
    run_stage(main)
