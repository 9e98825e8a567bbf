"""The DVC DAG as a Prefect flow: one task per stage, in the order DVC's own graph gives.

    python -m flows.pipeline run                              # the DAG once, as a flow run
    python -m flows.pipeline run --set rl.advantage=gigpo     # one `dvc exp run -S ...`
    python -m flows.pipeline run --stages eval --stages report
    python -m flows.pipeline serve --cron "0 3 * * *"         # on a schedule (Prefect server)

Each stage task runs `dvc repro --single-item <stage>` (so DVC's cache decides what
actually reruns), streaming the stage's output into the Prefect logs. A failed stage is
retried only when a retry can fix it (:func:`retry_can_fix`): exit 3 (the tracking server
was unreachable) or death by a signal (OOM killer, preemption); bad params (2) and a stage
error (1) fail the same way every time, so they fail the flow at once. With
parameter overrides the whole run is one `dvc exp run` task instead: an experiment is
DVC's unit of a changed-params run. The flow opens a parent MLflow run, passes its id to
the stages as `AGENTRL_PIPELINE_RUN_ID` (their runs nest under it), ends it FAILED if a
stage fails, and leaves two Prefect artifacts: a markdown table of the headline metrics
with their change since the run before, and a link to the parent run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Annotated, Any

import networkx as nx
import typer
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from agentrl.config import load_params
from agentrl.stage import EXIT_UNREACHABLE
from agentrl.tracking import PARENT_ENV, flatten, stage_run

HEADLINE = ("loss", "eval_loss", "reward_mean", "grounded_success", "tool_call_validity",
            "accuracy")  # fmt: skip


def dag_stages(root: Path = Path(".")) -> list[str]:
    """Stage names of ``dvc.yaml`` in dependency order, from DVC's own graph."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        graph = repo.index.graph  # edges point from a stage to what it depends on
        return [stage.name for stage in nx.topological_sort(graph.reverse(copy=True))]


def metrics_now() -> dict[str, float]:
    """Every numeric metric of the workspace, as ``file:dotted.key``."""
    shown = subprocess.run(
        ["dvc", "metrics", "show", "--json"], capture_output=True, text=True, check=True
    ).stdout
    out: dict[str, float] = {}
    for revision in json.loads(shown or "{}").values():
        for file, content in revision.get("data", {}).items():
            for key, value in flatten(content.get("data") or {}).items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    out[f"{file}:{key}"] = float(value)
    return out


# how DVC reports a stage command's own exit status ("-9": killed by SIGKILL)
STAGE_EXIT = re.compile(r"failed to run: .*, exited with (-?\d+)")


class StageFailed(RuntimeError):
    """A DVC command failed; ``code`` is the failing stage's own exit status when DVC
    reported one (negative: killed by that signal), else DVC's."""

    def __init__(self, command: list[str], code: int):
        super().__init__(f"{' '.join(command)} failed: stage exit status {code}")
        self.code = code


def stage_code(output: str, returncode: int) -> int:
    """The failing stage's exit status from DVC's output, else ``returncode``.

    >>> stage_code("ERROR: failed to reproduce 'rl': failed to run: python x.py, exited with -9", 255)
    -9
    >>> stage_code("ERROR: unexpected error", 255)
    255
    """
    found = STAGE_EXIT.findall(output)
    return int(found[-1]) if found else returncode


def retry_can_fix(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry a stage only for exit 3 (tracking unreachable)
    or death by a signal, the failures a second attempt can get past."""
    try:
        state.result()
    except StageFailed as err:
        return err.code == EXIT_UNREACHABLE or err.code < 0 or err.code > 128
    except Exception:
        return False
    return False


def _stream(command: list[str], env: dict[str, str]) -> None:
    logger = get_run_logger()
    logger.info("$ %s", " ".join(command))
    output: list[str] = []
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip():
                output.append(line)
                logger.info(line.rstrip())
    if proc.returncode:
        raise StageFailed(command, stage_code("".join(output), proc.returncode))


@task(task_run_name="dvc repro {stage}", retry_condition_fn=retry_can_fix)
def repro_stage(stage: str, env: dict[str, str]) -> None:
    _stream(["dvc", "repro", "--single-item", stage], env)


@task(task_run_name="dvc exp run", retry_condition_fn=retry_can_fix)
def exp_run(overrides: list[str], name: str | None, env: dict[str, str]) -> None:
    command = ["dvc", "exp", "run", *(["-n", name] if name else [])]
    for override in overrides:
        command += ["-S", override]
    _stream(command, env)


def metrics_table(before: dict[str, float], after: dict[str, float]) -> str:
    rows = ["| metric | previous run | this run | change |", "|---|---|---|---|"]
    for key in sorted(after):
        if key.rsplit(".", 1)[-1] not in HEADLINE:
            continue
        old = before.get(key)
        change = f"{after[key] - old:+.4g}" if old is not None else "new"
        shown = f"{old:.4g}" if old is not None else "–"
        rows.append(f"| `{key}` | {shown} | {after[key]:.4g} | {change} |")
    return "\n".join(rows)


def _run_url(uri: str, experiment_id: str, run_id: str) -> str:
    base = uri if uri.startswith("http") else "http://127.0.0.1:5000"  # `mlflow ui` on the store
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


@flow(name="agentrl-pipeline", log_prints=True)
def pipeline(
    overrides: list[str] | None = None,
    experiment: str | None = None,
    stages: list[str] | None = None,
    retries: int = 1,
) -> dict[str, Any]:
    """Run the DAG (or ``stages`` of it, in DAG order); ``overrides`` (KEY=VALUE) make it
    one ``dvc exp run`` named ``experiment``."""
    import mlflow

    if overrides and stages:
        raise ValueError("overrides run the whole DAG as one `dvc exp run`: give no stages")
    order = dag_stages()
    unknown = sorted(set(stages or []) - set(order))
    if unknown:
        raise ValueError(f"unknown stages {unknown}; dvc.yaml has {order}")
    chosen = [s for s in order if not stages or s in stages]
    params = load_params()
    before = metrics_now()
    description = {"overrides": overrides or [], "experiment": experiment, "stages": chosen}
    with stage_run("pipeline", params.tracking, description) as parent:
        env = os.environ | {PARENT_ENV: parent.run_id}
        if overrides:
            exp_run.with_options(retries=retries)(overrides, experiment, env)
        else:
            for stage in chosen:
                repro_stage.with_options(retries=retries)(stage, env)
        after = metrics_now()
        table = metrics_table(before, after)
        parent.log_dict({"before": before, "after": after}, "pipeline_metrics.json")
        experiment_id = mlflow.get_run(parent.run_id).info.experiment_id
    create_markdown_artifact(table, key="pipeline-metrics", description="headline metrics")
    url = _run_url(parent.uri, experiment_id, parent.run_id)
    create_link_artifact(url, link_text="MLflow pipeline run", key="mlflow-pipeline-run")
    return {"stages": chosen, "mlflow_run_id": parent.run_id, "metrics": after}


cli = typer.Typer(add_completion=False, help=__doc__.split("\n")[0])


@cli.command()
def run(
    set_: Annotated[list[str], typer.Option("--set", help="KEY=VALUE param override")] = [],  # noqa: B006
    name: Annotated[str | None, typer.Option(help="experiment name (with --set)")] = None,
    stages: Annotated[list[str], typer.Option("--stages", help="a stage to run")] = [],  # noqa: B006
) -> None:
    """Run the pipeline once, as a flow run."""
    pipeline(overrides=set_ or None, experiment=name, stages=stages or None)


@cli.command()
def serve(
    cron: Annotated[str | None, typer.Option(help='cron schedule, e.g. "0 3 * * *"')] = None,
    interval: Annotated[float | None, typer.Option(help="seconds between runs")] = None,
    name: Annotated[str, typer.Option(help="deployment name")] = "scheduled",
) -> None:
    """Serve the flow on a schedule against $PREFECT_API_URL, one run at a time."""
    if (cron is None) == (interval is None):
        raise typer.BadParameter("give exactly one of --cron and --interval")
    pipeline.serve(name=name, cron=cron, interval=interval, limit=1, global_limit=1)


if __name__ == "__main__":
    cli()
