"""Same inputs, same bytes: the whole DAG (smoke model, small sizes) run in two fresh git +
DVC repositories gives the same ``dvc.lock``, every stage's outputs included."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, project_params, repo_ok, write_params


def fresh_repo(root: Path) -> Path:
    for name in ("agentrl", "stages"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".gitignore"):
        shutil.copy(ROOT / name, root)
    params = project_params(max_steps=4, checkpoint_every=2, eval_every=2)
    params["rl"] |= {"steps": 1, "checkpoint_every": 1}
    params["eval"] |= {"tasks": 1, "trajectories": 1}
    params["eval"]["bfcl"] |= {"n": 1, "categories": ["simple"]}
    write_params(root / "params.yaml", params)
    repo_ok(root, "git", "init", "-q")
    repo_ok(root, "dvc", "init", "-q")
    repo_ok(root, "git", "add", "-A")
    repo_ok(root, "git", "commit", "-qm", "init")
    return root


def locked_outputs(repo: Path) -> dict[str, dict[str, str]]:
    """Every stage's outputs as locked: path -> md5 (directories: the hash of their listing)."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    return {stage: {o["path"]: o["md5"] for o in entry["outs"]} for stage, entry in lock.items()}


@pytest.mark.timeout(1200)
def test_two_clean_runs_lock_the_same_bytes(tmp_path: Path) -> None:
    # different absolute paths and git commits: neither may reach an output
    first, second = (fresh_repo(tmp_path / name) for name in ("one", "second_clone"))
    for repo in (first, second):
        repo_ok(repo, "dvc", "repro")
    a, b = locked_outputs(first), locked_outputs(second)
    assert set(a) == {"synth", "init", "midtrain", "sft", "rl", "bfcl", "eval", "report"}
    differing = {
        stage: [path for path in a[stage] if a[stage][path] != b[stage].get(path)] for stage in a
    }
    assert not any(differing.values()), differing
    assert not list(first.glob("**/run.json"))
