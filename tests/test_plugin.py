"""A user environment, defined in the tests, joins synthesis by dotted path only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import read_split, small_params, write_params

from agentrl.config import ConfigError, SynthSection, load_params
from agentrl.synth import verification
from agentrl.synth.pipeline import build_registry, synthesize

PLUGIN = "weather_plugin:WeatherEnv"


def _cfg(**splits) -> SynthSection:
    return SynthSection.model_validate_json(json.dumps({"envs": [PLUGIN], "splits": splits}))


def test_plugin_family_is_synthesized_verified_and_held_out(tmp_path: Path) -> None:
    cfg = _cfg(
        sft={"n": 20, "families": ["weather"], "recovery_prob": 0.5},
        test={"n": 10, "families": ["weather", "calculator"]},
        heldout_tools={"n": 10, "families": ["weather"]},
    )
    registry = build_registry(cfg)
    assert "weather" in registry.envs
    stats = synthesize(cfg, 0, tmp_path, registry, progress=False)
    assert stats["sft"]["families"]["weather"] == 20
    records = read_split(tmp_path, "sft")
    assert all(verification.check(registry, r) is None for r in records)
    assert any(r["meta"]["recovery"] for r in records)
    schema = records[0]["tools"]
    assert any(set(t["function"]["parameters"]["properties"]) for t in schema)
    held_names = {
        t["function"]["name"] for r in read_split(tmp_path, "heldout_tools") for t in r["tools"]
    }
    assert held_names <= registry.partition.heldout_tool_names


@pytest.mark.parametrize(
    ("path", "message"),
    [  # a path that imports nothing is refused when params load, for every entry point
        ("weather_plugin", "synth.envs: Value error, 'weather_plugin' is not a 'module:Class'"),
        ("weather_plugin:Missing", "synth.envs: Value error, cannot import 'weather_plugin:Mis"),
    ],
)
def test_unimportable_plugin_paths_are_params_errors(
    tmp_path: Path, path: str, message: str
) -> None:
    params = write_params(tmp_path / "params.yaml", small_params(envs=[path]))
    with pytest.raises(ConfigError, match=re.escape(f"params.yaml: {message}")):
        load_params(params)


def test_a_plugin_that_is_not_an_environment_is_a_config_error() -> None:
    cfg = SynthSection.model_validate_json(
        json.dumps({"envs": ["weather_plugin:NotAnEnv"], "splits": {}})
    )
    with pytest.raises(ConfigError, match=r"synth.envs: .*is not a subclass of agentrl.envs"):
        build_registry(cfg)
