"""Results that span sessions (the screen, the study) pair every run against one sft: they
pin its digest and the CPU that made it, and stop on another."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from rl_study import pin_sft


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
