"""Every bench script its docstring launches (``python bench/NAME.py``) runs when launched:
it ends in the ``__main__`` guard that calls its entry point (a script without one imports,
prints nothing and exits 0, which reads like a measurement that found nothing)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    path
    for path in (ROOT / "bench").glob("*.py")
    if f"python bench/{path.name}" in (ast.get_docstring(ast.parse(path.read_text())) or "")
)


def main_guard_calls(tree: ast.Module) -> list[str]:
    """The functions the module-level ``if __name__ == "__main__":`` block calls."""
    calls = []
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
        ):
            calls += [
                n.func.id
                for n in ast.walk(node)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            ]
    return calls


def test_the_launched_scripts_are_found() -> None:
    assert {"rl_signal.py", "rl_screen.py", "rl_study.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_launched_bench_script_calls_its_entry_point(script: Path) -> None:
    tree = ast.parse(script.read_text())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert defined & set(main_guard_calls(tree)), f"{script.name}: no __main__ guard calling main"
