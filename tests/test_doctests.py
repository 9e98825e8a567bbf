"""The examples in docstrings run: every module of agentrl/, flows/ and bench/ that has one
(bench scripts import their neighbours by name, so bench/ is on the path)."""

from __future__ import annotations

import doctest
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts)
    for folder in ("agentrl", "flows")
    for path in (ROOT / folder).rglob("*.py")
    if ">>> " in path.read_text(encoding="utf-8")
) + sorted(
    path.stem
    for path in (ROOT / "bench").glob("*.py")
    if ">>> " in path.read_text(encoding="utf-8")
)
sys.path.insert(0, str(ROOT / "bench"))


def test_the_reward_functions_have_examples() -> None:
    assert "agentrl.rl.rewards" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
