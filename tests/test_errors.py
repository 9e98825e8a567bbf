"""One error path for every entry point: each stage and each ``agentrl`` command turns bad
params and a bad plugin into one line naming the file, key and value, and exit 2; the
traceback only with AGENTRL_DEBUG=1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, small_params, stage_env, write_params

STAGES = ("synth", "init", "midtrain", "sft", "pivots", "rl", "bfcl", "eval", "report")
COMMANDS = {
    "params": [],
    "families": [],
    "sample": ["calculator"],
    "rollout": ["--model", "models/sft", "--out", "runs.jsonl"],
    "serve": ["--model", "models/sft"],
    "profile": [str(ROOT / "infra" / "profiles" / "smoke.yaml"), "--out", "merged.yaml"],
}
BREAKAGES = {  # what is broken -> what the one line must say
    "plugin": ("synth.envs", "cannot import 'nope_mod:Missing'"),
    "value": ("base.seed", 'Input should be a valid integer (got "seven")'),
}


def broken_params(tmp_path: Path, breakage: str) -> Path:
    params = small_params()
    if breakage == "plugin":
        params["synth"]["envs"] = ["nope_mod:Missing"]
    else:
        params["base"]["seed"] = "seven"
    return write_params(tmp_path / "params.yaml", params)


def entry_point(kind: str, name: str, params: Path) -> list[str]:
    if kind == "stage":
        return [sys.executable, str(ROOT / "stages" / f"{name}.py"), "--params", str(params)]
    command = [sys.executable, "-m", "agentrl.cli", name, *COMMANDS[name]]
    return [*command, "--params", str(params)]


CASES = [("stage", s) for s in STAGES] + [("command", c) for c in COMMANDS]


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
@pytest.mark.parametrize(("kind", "name"), CASES)
def test_every_entry_point_reports_bad_params_as_one_line(
    tmp_path: Path, kind: str, name: str, breakage: str
) -> None:
    params = broken_params(tmp_path, breakage)
    done = subprocess.run(
        entry_point(kind, name, params), cwd=tmp_path, env=stage_env(),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    key, problem = BREAKAGES[breakage]
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr[-2000:]
    assert str(params) in lines[0] and key in lines[0] and problem in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written


@pytest.mark.parametrize(("kind", "name"), [("stage", "synth"), ("command", "sample")])
def test_agentrl_debug_adds_the_traceback(tmp_path: Path, kind: str, name: str) -> None:
    params = broken_params(tmp_path, "plugin")
    done = subprocess.run(
        entry_point(kind, name, params), cwd=tmp_path, env=stage_env(AGENTRL_DEBUG="1"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" in done.stderr and "cannot import 'nope_mod:Missing'" in done.stderr
