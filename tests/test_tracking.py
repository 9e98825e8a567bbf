"""MLflow tracking and lineage against a real `mlflow server`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import free_port, producer, run_stage, small_params, stage_env, write_params
from mlflow.tracking import MlflowClient

from agentrl.config import TrackingSection
from agentrl.tracking import content_digest, stage_run


@pytest.fixture(scope="module")
def synth_run(
    mlflow_server: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str, str]:
    """The synth stage run once against the server, nested under a pipeline parent run."""
    work = tmp_path_factory.mktemp("tracked")
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("agentrl-tests")
    experiment_id = (
        experiment.experiment_id if experiment else client.create_experiment("agentrl-tests")
    )
    parent = client.create_run(experiment_id, run_name="pipeline").info.run_id
    params = write_params(work / "params.yaml", small_params())
    env = stage_env(
        MLFLOW_TRACKING_URI=mlflow_server, DVC_EXP_NAME="exp-brisk", AGENTRL_PIPELINE_RUN_ID=parent
    )
    result = run_stage(work, "--params", str(params), env=env)
    assert result.returncode == 0, result.stderr
    run_id = producer(mlflow_server, work / "data" / "synth")
    assert run_id is not None and not (work / "data" / "synth" / "run.json").exists()
    return work, run_id, parent


def test_stage_run_has_tags_params_metrics_and_artifacts(mlflow_server: str, synth_run) -> None:
    work, run_id, parent = synth_run
    run = MlflowClient(mlflow_server).get_run(run_id)
    assert run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["stage"] == "synth"
    assert tags["dvc_exp_name"] == "exp-brisk"
    assert tags["mlflow.parentRunId"] == parent
    assert (
        len(tags["params_digest"]) == 16
        and "git_commit" in tags
        and tags["git_dirty"] in {"true", "false"}
    )
    assert run.data.params["synth.splits.sft.n"] == "40"
    assert run.data.params["base.seed"] == "7"
    assert run.data.metrics["sft.samples"] == 40
    assert run.data.metrics["total.samples"] > 0
    artifacts = {a.path for a in MlflowClient(mlflow_server).list_artifacts(run_id)}
    assert {"synth_stats.json", "samples"} <= artifacts
    local = MlflowClient(mlflow_server).download_artifacts(run_id, "samples/sft.json", str(work))
    samples = json.loads(Path(local).read_text())
    assert len(samples) == 2 and samples[0]["split"] == "sft"
    metrics_file = json.loads((work / "metrics" / "synth.json").read_text())
    assert metrics_file["splits"]["sft"]["samples"] == 40


def test_consumer_tags_upstream_run_and_logs_dataset_digest(mlflow_server: str, synth_run) -> None:
    work, synth_id, _ = synth_run
    data = work / "data" / "synth"
    cfg = TrackingSection(experiment="agentrl-tests", uri=mlflow_server)
    out = work / "consumer"
    out.mkdir()
    (out / "result.txt").write_text(f"made from {content_digest(data)}")
    with stage_run("consumer", cfg, {"x": 1}, inputs={"synth": data}) as run:
        recorded = run.record_output(out)
    logged = MlflowClient(mlflow_server).get_run(run.run_id)
    assert logged.data.tags["upstream.synth"] == synth_id
    assert logged.data.tags[f"lineage.{recorded}"] == "consumer"
    datasets = {d.dataset.name: d.dataset for d in logged.inputs.dataset_inputs}
    assert datasets["synth"].digest == content_digest(data)[:32]
    assert producer(mlflow_server, out) == run.run_id
    with stage_run("downstream", cfg, {}, inputs={"consumer": out}) as down:
        pass
    assert (
        MlflowClient(mlflow_server).get_run(down.run_id).data.tags["upstream.consumer"]
        == run.run_id
    )


def test_failed_stage_body_marks_the_run_failed(mlflow_server: str) -> None:
    cfg = TrackingSection(experiment="agentrl-tests", uri=mlflow_server)
    with pytest.raises(RuntimeError), stage_run("broken", cfg, {}) as run:
        raise RuntimeError("stage crashed")
    assert MlflowClient(mlflow_server).get_run(run.run_id).info.status == "FAILED"


def test_unreachable_server_stops_before_any_work(tmp_path: Path) -> None:
    params = write_params(tmp_path / "params.yaml", small_params())
    dead = f"http://127.0.0.1:{free_port()}"
    result = run_stage(tmp_path, "--params", str(params), env=stage_env(MLFLOW_TRACKING_URI=dead))
    assert result.returncode == 3
    assert f"MLflow tracking server {dead} is not reachable" in result.stderr
    assert "mlflow server" in result.stderr and "unset MLFLOW_TRACKING_URI" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_default_store_is_sqlite_at_the_repo_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrl.tracking import repo_root, tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri(TrackingSection()) == f"sqlite:///{repo_root() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert tracking_uri(TrackingSection()) == "http://127.0.0.1:5999"
