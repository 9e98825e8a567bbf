"""Results that span sessions (the screen, the study) pair every run against one sft: they
pin its digest and the CPU that made it, and stop on another."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ROOT, small_params, write_params

sys.path.insert(0, str(ROOT / "bench"))
from rl_study import pin_sft, profile_pivots


def test_results_pin_their_sft_and_stop_on_another(tmp_path: Path) -> None:
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "model.safetensors").write_bytes(b"one")
    pin: dict = {}
    pin_sft(pin, sft, tmp_path / "study.json")
    assert set(pin) == {"digest", "cpu"} and pin["cpu"]
    pin_sft(pin, sft, tmp_path / "study.json")  # the same sft: on it goes
    (sft / "chat_template.jinja").write_text("{{ messages }}")  # read by no rollout
    pin_sft(pin, sft, tmp_path / "study.json")
    (sft / "model.safetensors").write_bytes(b"two")
    with pytest.raises(SystemExit, match=r"study.json: sft.digest: .* made on .*, this is "):
        pin_sft(pin, sft, tmp_path / "study.json")


def test_a_study_with_pivot_rollouts_refuses_another_profile_than_the_dags(
    tmp_path: Path,
) -> None:
    """The runs draw the DAG's data/pivots: a --set that would need another profile stops
    before anything runs; the band, which rl applies to the stored pass rates, does not."""
    params = write_params(tmp_path / "params.yaml", small_params() | {"rl": {"rollouts": "mix"}})
    with pytest.raises(SystemExit, match=r"--set pivots.tasks=64: .* change it there"):
        profile_pivots(params, {"pivots.min_pass_rate": 0.0, "pivots.tasks": 64})
