"""The Prefect flow over the DVC DAG, against a real `prefect server`: DAG order from DVC's
graph, a scheduled run that completes with its artifacts, and a failing stage that ends
the MLflow parent run FAILED."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import BIN, ROOT, free_port, http_server, repo_ok, repo_run, stage_env, write_params

sys.path.insert(0, str(ROOT))
from flows.pipeline import dag_stages, metrics_table


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("prefect")
    port = free_port()
    env = {"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1"}  # fmt: skip
    command = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    url = f"http://127.0.0.1:{port}/api"
    with http_server(command, home / "server.log", url, "prefect server", env=os.environ | env):
        yield env | {"PREFECT_API_URL": url}


def _flow_runs(api: str, **filters: object) -> list[dict]:
    response = httpx.post(f"{api}/flow_runs/filter", json={"flow_runs": filters}, timeout=10)
    response.raise_for_status()
    return response.json()


def test_stages_follow_dvc_graph(dvc_project: Path) -> None:
    order = dag_stages(dvc_project)
    assert set(order) == {
        "synth", "bfcl", "init", "midtrain", "sft", "pivots", "rl", "eval", "report"
    }  # fmt: skip
    for before, after in (("synth", "init"), ("init", "midtrain"), ("midtrain", "sft"),
                          ("sft", "pivots"), ("pivots", "rl"), ("rl", "eval"), ("bfcl", "eval"),
                          ("eval", "report")):  # fmt: skip
        assert order.index(before) < order.index(after)


def test_metrics_table_shows_headline_changes() -> None:
    table = metrics_table({"m.json:sft.test.grounded_success": 0.1},
                          {"m.json:sft.test.grounded_success": 0.25, "m.json:sft.test.turns": 3.0,
                           "m.json:rl.loss": 1.5})  # fmt: skip
    assert "| `m.json:sft.test.grounded_success` | 0.1 | 0.25 | +0.15 |" in table
    assert "| `m.json:rl.loss` | – | 1.5 | new |" in table and "turns" not in table


def test_a_scheduled_run_executes_the_cached_dag(
    dvc_project: Path, prefect_api: dict[str, str]
) -> None:
    import mlflow

    repo_ok(dvc_project, "dvc", "repro")  # the DAG, cached: the flow's stages are no-ops
    api = prefect_api["PREFECT_API_URL"]
    env = stage_env(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(dvc_project),
                    **prefect_api)  # fmt: skip
    log = (dvc_project / "serve.log").open("w")
    started = time.time()
    serve = subprocess.Popen(
        [sys.executable, "-m", "flows.pipeline", "serve", "--interval", "5"],
        cwd=dvc_project, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = started + 300
        done: list[dict] = []
        while not done and time.time() < deadline and serve.poll() is None:
            time.sleep(2)
            bad = _flow_runs(api, state={"type": {"any_": ["FAILED", "CRASHED"]}})
            assert not bad, (bad, (dvc_project / "serve.log").read_text()[-3000:])
            done = _flow_runs(api, state={"type": {"any_": ["COMPLETED"]}})
        assert done, (dvc_project / "serve.log").read_text()[-3000:]
        print(f"first scheduled run completed {time.time() - started:.1f} s after serve started")
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=60)
        log.close()
    run = done[0]
    assert run["deployment_id"] is not None and run["auto_scheduled"]
    artifacts = httpx.post(f"{api}/artifacts/filter",
                           json={"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}, timeout=10)  # fmt: skip
    keys = {a["key"]: a for a in artifacts.json()}
    assert {"pipeline-metrics", "mlflow-pipeline-run"} <= set(keys)
    assert "metrics/eval.json:" in keys["pipeline-metrics"]["data"]
    served = (dvc_project / "serve.log").read_text()
    for stage in ("synth", "eval", "report"):
        assert f"dvc repro --single-item {stage}" in served

    mlflow.set_tracking_uri(f"sqlite:///{dvc_project / 'mlflow.db'}")
    parents = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.stage = 'pipeline'"
    )
    assert (parents["status"] == "FINISHED").any()


def test_a_failing_stage_fails_the_flow_and_its_mlflow_run(
    dvc_project: Path, prefect_api: dict[str, str]
) -> None:
    import mlflow

    good = (dvc_project / "params.yaml").read_text()
    params = yaml.safe_load(good)
    # valid params (a plugin that does not import fails at load, before any run), a failing stage
    params["model"]["source"] = str(dvc_project / "no_such_model")
    write_params(dvc_project / "params.yaml", params)
    try:
        result = repo_run(dvc_project, sys.executable, "-m", "flows.pipeline", "run",
                          "--stages", "synth", "--stages", "init", **prefect_api)  # fmt: skip
    finally:
        (dvc_project / "params.yaml").write_text(good)
    assert result.returncode != 0
    assert f"model.source {dvc_project / 'no_such_model'}" in result.stdout + result.stderr
    mlflow.set_tracking_uri(f"sqlite:///{dvc_project / 'mlflow.db'}")
    # its own run: the scheduled test's served flow may still have started one after it
    ours = mlflow.search_runs(
        search_all_experiments=True,
        filter_string="""tags.stage = 'pipeline' and params.stages = '["synth", "init"]'""",
    )
    assert list(ours["status"]) == ["FAILED"]


def test_prefect_yaml_deploys_with_its_schedules(
    dvc_project: Path, prefect_api: dict[str, str]
) -> None:
    shutil.copy(ROOT / "prefect.yaml", dvc_project)
    prefect = str(BIN / "prefect")
    repo_ok(dvc_project, prefect, "work-pool", "create", "agentrl-process", "--type", "process",
            **prefect_api)  # fmt: skip
    repo_ok(dvc_project, prefect, "--no-prompt", "deploy", "--name", "nightly",
            "--name", "eval-weekly", **prefect_api)  # fmt: skip
    api = prefect_api["PREFECT_API_URL"]
    deployments = httpx.post(f"{api}/deployments/filter", json={}, timeout=10).json()
    by_name = {d["name"]: d for d in deployments}
    assert by_name["nightly"]["work_pool_name"] == "agentrl-process"
    assert by_name["eval-weekly"]["parameters"] == {"stages": ["eval", "report"]}
    crons = {s["schedule"]["cron"] for s in by_name["nightly"]["schedules"]}
    assert crons == {"0 3 * * *"}
    docker = next(d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
                  if d["name"] == "nightly-docker")  # fmt: skip
    assert docker["work_pool"]["job_variables"]["image"] == "agentrl-cpu:latest"


RETRY_SCRIPT = """
import os, sys
sys.path.insert(0, {root!r})
from prefect import flow
from flows.pipeline import repro_stage

@flow
def one_stage(stage: str) -> None:
    repro_stage.with_options(retries=2, retry_delay_seconds=0)(stage, dict(os.environ))

one_stage(sys.argv[1])
"""


@pytest.mark.parametrize(
    ("stage", "attempts", "succeeds"),
    [("bad_params", 1, False), ("killed_once", 2, True), ("tracking_down", 3, False)],
)
def test_a_stage_is_retried_only_when_a_retry_can_fix_it(
    tmp_path: Path, prefect_api: dict[str, str], stage: str, attempts: int, succeeds: bool
) -> None:
    """Exit 2 fails the same way every time (one attempt); a kill by a signal and exit 3
    (tracking unreachable) are retried, the kill here succeeding on its second attempt."""
    count = 'open("attempts", "a").write("x"); n = len(open("attempts").read())'
    commands = {
        "bad_params": f"import sys; {count}; sys.exit(2)",
        "killed_once": f"import os, signal; {count}; n < 2 and os.kill(os.getpid(), signal.SIGKILL)",
        "tracking_down": f"import sys; {count}; sys.exit(3)",
    }
    stages = {stage: {"cmd": f"python -c '{commands[stage]}'"}}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    (tmp_path / "flow.py").write_text(RETRY_SCRIPT.format(root=str(ROOT)))
    repo_ok(tmp_path, "git", "init", "-q")
    repo_ok(tmp_path, "dvc", "init", "-q")
    result = repo_run(tmp_path, sys.executable, "flow.py", stage, **prefect_api)
    assert (result.returncode == 0) == succeeds, result.stdout[-3000:] + result.stderr[-3000:]
    assert len((tmp_path / "attempts").read_text()) == attempts
