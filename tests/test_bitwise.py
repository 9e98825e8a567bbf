"""Same inputs, same bytes: the whole DAG (smoke model, small sizes) run in two fresh git +
DVC repositories gives the same ``dvc.lock``, every stage's outputs included."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ROOT, project_params, repo_ok

sys.path.insert(0, str(ROOT / "bench"))
from float_drift import locked, make_repo  # the bench builds its clean clones the same way


def fresh_repo(root: Path) -> Path:
    params = project_params(max_steps=4, checkpoint_every=2, eval_every=2)
    params["rl"] |= {"steps": 1, "checkpoint_every": 1}
    params["eval"] |= {"tasks": 1, "trajectories": 1}
    params["eval"]["bfcl"] |= {"n": 1, "categories": ["simple"]}
    return make_repo(root, params)


@pytest.mark.timeout(1200)
def test_two_clean_runs_lock_the_same_bytes(tmp_path: Path) -> None:
    # different absolute paths and git commits: neither may reach an output
    first, second = (fresh_repo(tmp_path / name) for name in ("one", "second_clone"))
    for repo in (first, second):
        repo_ok(repo, "dvc", "repro")
    a, b = locked(first), locked(second)
    assert set(a) == {"synth", "init", "midtrain", "sft", "pivots", "rl", "bfcl", "eval", "report"}
    differing = {
        stage: [path for path in a[stage] if a[stage][path] != b[stage].get(path)] for stage in a
    }
    assert not any(differing.values()), differing
    assert not list(first.glob("**/run.json"))
