"""Results that span sessions (the screen, the study) pair every run against one sft: they
pin its digest and the CPU that made it, and stop on another."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, small_params, write_params

sys.path.insert(0, str(ROOT / "bench"))
from rl_study import pin_sft, profile_pivots, split_variants, stale_splits


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


def test_a_study_scores_each_split_under_its_eval_variant_and_reruns_what_changed(
    tmp_path: Path,
) -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    variants = split_variants(path, ("test", "long_horizon"))
    assert {s: v.name for s, v in variants.items()} == {"test": "greedy", "long_horizon": "summary"}
    assert variants["long_horizon"].harness["context"] == "summary"
    fresh = {s: {"n": 200, "harness": v.harness} for s, v in variants.items()}
    assert stale_splits(fresh, variants, 200) == []
    assert stale_splits(fresh, variants, 100) == ["test", "long_horizon"]
    older = {"test": fresh["test"], "long_horizon": {"n": 200, "harness": {"context": "summary"}}}
    assert stale_splits(older, variants, 200) == ["long_horizon"]
    assert stale_splits({"test": {"n": 200}}, variants, 200) == ["test", "long_horizon"]
    params["eval"]["variants"] = params["eval"]["variants"][:1]  # greedy: no long_horizon
    path.write_text(yaml.safe_dump(params))
    with pytest.raises(SystemExit, match=r"no eval variant of .* runs 'long_horizon'"):
        split_variants(path, ("test", "long_horizon"))
