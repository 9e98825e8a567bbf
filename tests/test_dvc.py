"""The synth stage through real `dvc repro` in a temporary git repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, small_params, stage_env, write_params

from agentrl.tracking import content_digest

BIN = Path(sys.executable).parent


def _run(repo: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    env = stage_env(
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(repo),  # the repository's own copy of agentrl, as on a clone
        GIT_AUTHOR_NAME="ci",
        GIT_AUTHOR_EMAIL="ci@localhost",
        GIT_COMMITTER_NAME="ci",
        GIT_COMMITTER_EMAIL="ci@localhost",
    )
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def _ok(repo: Path, *cmd: str) -> str:
    result = _run(repo, *cmd)
    assert result.returncode == 0, f"{cmd}: {result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    for name in ("agentrl", "stages"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "dvc.yaml", repo)
    shutil.copy(ROOT / ".gitignore", repo)
    write_params(repo / "params.yaml", small_params())
    _ok(repo, "git", "init", "-q")
    _ok(repo, "dvc", "init", "-q")
    _ok(repo, "dvc", "config", "core.analytics", "false")
    _ok(repo, "git", "add", "-A")
    _ok(repo, "git", "commit", "-qm", "init")
    return repo


def test_repro_runs_then_is_a_noop_then_reruns_on_a_param_change(repo: Path) -> None:
    out = _ok(repo, "dvc", "repro")
    assert "Running stage 'synth'" in out
    run_file = repo / "data" / "synth" / "run.json"
    first = json.loads(run_file.read_text())["run_id"]
    assert (repo / "mlflow.db").is_file()  # default store: sqlite at the repository root
    metrics = json.loads((repo / "metrics" / "synth.json").read_text())
    assert metrics["splits"]["test"]["samples"] == 30
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert lock["stages"]["synth"]["params"]["params.yaml"]["synth"]["splits"]["test"]["n"] == 30

    again = _ok(repo, "dvc", "repro")
    assert "Running stage" not in again and "didn't change" in again
    assert json.loads(run_file.read_text())["run_id"] == first
    assert "up to date" in _ok(repo, "dvc", "status")

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["tracking"]["experiment"] = "renamed"  # tracking is not a dependency: no rerun
    write_params(repo / "params.yaml", params)
    assert "up to date" in _ok(repo, "dvc", "status")

    params["synth"]["splits"]["test"]["n"] = 12
    write_params(repo / "params.yaml", params)
    assert "Running stage 'synth'" in _ok(repo, "dvc", "repro")
    assert json.loads(run_file.read_text())["run_id"] != first
    assert (
        json.loads((repo / "metrics" / "synth.json").read_text())["splits"]["test"]["samples"] == 12
    )
    shown = _ok(repo, "dvc", "metrics", "show", "--json")
    assert '"samples": 12' in shown.replace(" ", "").replace('"samples":12', '"samples": 12')


def test_bad_params_fail_repro_and_the_cache_restores_outputs(repo: Path) -> None:
    good = (repo / "params.yaml").read_text()
    digest_before = content_digest(repo / "data" / "synth")
    params = yaml.safe_load(good)
    params["synth"]["splits"]["sft"]["n"] = "many"
    write_params(repo / "params.yaml", params)
    result = _run(repo, "dvc", "repro")
    assert result.returncode != 0
    assert (
        "params.yaml: synth.splits.sft.n: Input should be a valid integer"
        in result.stdout + result.stderr
    )
    assert not list((repo / "data").glob(".synth.*"))  # no half-written output left behind
    assert (
        not (repo / "data" / "synth").exists()
        or content_digest(repo / "data" / "synth") == digest_before
    )
    (repo / "params.yaml").write_text(good)
    out = _ok(repo, "dvc", "repro")
    assert "Running stage" not in out  # same params as a cached run: restored, not recomputed
    assert content_digest(repo / "data" / "synth") == digest_before
