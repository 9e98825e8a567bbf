"""Same inputs, same bytes: the whole DAG (smoke model, small sizes) run in a fresh git +
DVC repository gives the same ``dvc.lock``, every stage's outputs included, as the shared
DVC project's first run (another path, another git commit)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ROOT, dvc_project_params, repo_ok

sys.path.insert(0, str(ROOT / "bench"))
from float_drift import locked, make_repo  # the bench builds its clean clones the same way


@pytest.mark.timeout(1200)
def test_two_clean_runs_lock_the_same_bytes(tmp_path: Path, first_repro: tuple[str, Path]) -> None:
    # different absolute paths and git commits: neither may reach an output
    clone = make_repo(tmp_path / "second_clone", dvc_project_params())
    repo_ok(clone, "dvc", "repro")
    a, b = locked(first_repro[1]), locked(clone)
    assert set(a) == {"synth", "init", "midtrain", "sft", "pivots", "rl", "bfcl", "eval", "report"}
    differing = {
        stage: [path for path in a[stage] if a[stage][path] != b[stage].get(path)] for stage in a
    }
    assert not any(differing.values()), differing
    assert not list(clone.glob("**/run.json"))
