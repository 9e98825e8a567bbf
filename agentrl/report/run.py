"""The report stage: reports/report.md and reports/figures/, also logged to MLflow."""

from __future__ import annotations

from pathlib import Path

from agentrl.atomic import atomic_dir, write_text_atomic
from agentrl.config import Params
from agentrl.errors import StageError
from agentrl.report.build import build_report, lineage
from agentrl.tracking import producer_run, stage_run


def report_stage(params: Params) -> Path:
    paths = params.base.paths
    eval_metrics = Path(paths.metrics) / "eval.json"
    if not eval_metrics.is_file():
        raise StageError(f"{eval_metrics}: missing; run the eval stage first")
    reports = Path(paths.reports)
    inputs = {"eval": Path(paths.reports) / "trajectories"}
    sections = {"eval": params.section_dict("eval"), "base": params.section_dict("base")}
    with stage_run("report", params.tracking, sections, inputs) as run:
        stages = lineage(params)
        with atomic_dir(reports / "figures") as figures:
            text = build_report(params, stages, figures)
        for entry in stages.values():
            entry["run_id"] = (entry["digest"] and producer_run(entry["digest"])) or ""
        run.log_dict(stages, "lineage.json")
        write_text_atomic(reports / "report.md", text)
        run.log_artifact(reports / "report.md", "report")
        run.log_artifact(reports / "figures", "report/figures")
    print(f"report: {reports / 'report.md'}")
    return reports / "report.md"
