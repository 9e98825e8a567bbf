"""GPU profiles: partial params files that merge over params.yaml and validate."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from agentrl.config import ConfigError, load_params
from agentrl.profiles import apply_profile, merge

PROFILES = sorted((ROOT / "infra" / "profiles").glob("qwen*.yaml"))  # the GPU profiles


def test_merge_is_key_by_key_for_mappings_and_replaces_the_rest() -> None:
    base = {"rl": {"steps": 16, "lr": 1e-4}, "eval": {"pass_k": [1, 4]}}
    merged = merge(base, {"rl": {"steps": 100}, "eval": {"pass_k": [1]}})
    assert merged == {"rl": {"steps": 100, "lr": 1e-4}, "eval": {"pass_k": [1]}}
    assert base["rl"]["steps"] == 16  # the input is untouched


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_shipped_profiles_validate_over_params_yaml(profile: Path, tmp_path: Path) -> None:
    out = tmp_path / "params.yaml"
    apply_profile(profile, ROOT / "params.yaml", out)
    params = load_params(out)
    assert params.model.source.startswith("Qwen/Qwen2.5-")
    assert params.harness.engine == "openai" and params.harness.engine_reload == "vllm"
    assert params.rl.zero_stage in (2, 3) and params.sft.zero_stage == params.rl.zero_stage
    assert params.synth == load_params(ROOT / "params.yaml").synth  # same data, bigger knobs


def test_a_bad_profile_names_the_key_and_writes_nothing(tmp_path: Path) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text(yaml.safe_dump({"rl": {"zero_stage": 4}}))
    out = tmp_path / "params.yaml"
    with pytest.raises(ConfigError, match=r"bad.yaml over .*params.yaml: rl.zero_stage"):
        apply_profile(profile, ROOT / "params.yaml", out)
    assert not out.exists() and list(tmp_path.iterdir()) == [profile]


def test_the_smoke_profile_turns_the_default_into_the_tiny_model(tmp_path: Path) -> None:
    out = tmp_path / "params.yaml"
    apply_profile(ROOT / "infra" / "profiles" / "smoke.yaml", ROOT / "params.yaml", out)
    smoke, default = load_params(out), load_params(ROOT / "params.yaml")
    assert default.model.source.startswith("pypi:") and smoke.model.source == "tiny"
    assert smoke.sft.lora.r == smoke.rl.lora.r == 0  # the tiny model trains in full
    assert smoke.synth.splits["midtrain"].copy_items > default.synth.splits["midtrain"].copy_items
    assert smoke.synth.splits["test"] == default.synth.splits["test"]  # the same eval worlds
