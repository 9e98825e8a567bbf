"""report stage: the run's report as markdown with PNG figures, readable on a git host.

    python stages/report.py           # what `dvc repro report` runs

Reads metrics/*.json and plots/*.tsv; writes reports/report.md and reports/figures/
(learning curves, the eval table with 95% intervals, context strategies, BFCL, lineage:
git commit, params digest and every stage's MLflow run id) and logs them to MLflow.
"""

from __future__ import annotations

import argparse

from agentrl.config import load_params
from agentrl.report.run import report_stage
from agentrl.stage import run_stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    report_stage(load_params(args.params))


if __name__ == "__main__":
    run_stage(main)
