"""dvc.yaml lists exactly what each stage runs and reads: its code deps are the import
closure of its entry point inside agentrl/ and stages/ (a listed directory covers the
modules under it), no listed code dep goes unimported, and every params section or key
the closure reads is among the stage's params. Also: agentrl/ has no import cycles."""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import project_params

ROOT = Path(__file__).resolve().parents[1]
DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())
CODE = ("agentrl/", "stages/")
SECTIONS = ("base", "synth", "model", "midtrain", "sft", "harness", "pivots", "rl", "eval")
# tracking decides where runs are logged, never what a stage computes; base.paths reach
# dvc.yaml through its ${base.paths.*} templates
NOT_DEPENDENCIES = ("tracking", "base.paths")


def module_file(name: str) -> Path | None:
    """The file a dotted ``agentrl.*`` module name loads, or None outside agentrl."""
    if not name.startswith("agentrl"):
        return None
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def is_code(path: Path) -> bool:
    """An ``__init__.py`` that holds only a docstring runs nothing worth a rerun."""
    if path.name != "__init__.py":
        return True
    body = ast.parse(path.read_text()).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body)


def imports_of(path: Path) -> set[Path]:
    """Every agentrl module ``path`` imports, at module level or inside a function (a lazy
    import runs too), with the packages whose ``__init__`` the import executes."""
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):
                file = module_file(".".join(parts[:depth]))
                if file is not None:
                    found.add(file)
    return found


def closure(entry: Path) -> set[str]:
    """Relative paths of every code file ``entry`` runs inside agentrl/ and stages/."""
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo += imports_of(path) - seen
    return {str(p.relative_to(ROOT)) for p in seen if is_code(p)}


def covered(module: str, deps: list[str]) -> bool:
    return any(module == d or module.startswith(d.rstrip("/") + "/") for d in deps)


def check_stage(name: str, stage: dict[str, Any]) -> list[str]:
    """What is wrong with ``stage``'s code deps: missing modules and stale deps."""
    entry = ROOT / stage["cmd"].split()[1]
    modules = closure(entry)
    deps = [d for d in stage.get("deps", []) if d.startswith(CODE)]
    problems = [
        f"{name}: imports {m}, not in its deps" for m in sorted(modules) if not covered(m, deps)
    ]
    problems += [
        f"{name}: dep {d} is not imported"
        for d in deps
        if not any(covered(m, [d]) for m in modules)
    ]
    return problems


PARAM_READ = re.compile(r"\bparams\.(" + "|".join(SECTIONS) + r")\b(?:\.([a-z_]+))?")
SECTION_DICT = re.compile(r"section_dict\(\"([a-z_]+)\"\)")


def params_read(name: str, modules: set[str]) -> set[str]:
    """Params sections (``rl``) and keys (``model.format``) the stage's code reads off the
    loaded params; ``getattr(params, stage)`` (the training stages) reads its own section."""
    read: set[str] = set()
    for module in modules:
        text = (ROOT / module).read_text()
        for section, key in PARAM_READ.findall(text):
            read.add(f"{section}.{key}" if key and key not in ("section_dict",) else section)
        read |= set(SECTION_DICT.findall(text))
        if "getattr(params, stage)" in text:
            read.add(name)
    return {r for r in read if not r.startswith(NOT_DEPENDENCIES)}


def stage_params(stage: dict[str, Any]) -> list[str]:
    return [p for p in stage.get("params", []) if isinstance(p, str)]


@pytest.mark.parametrize("name", sorted(DVC["stages"]))
def test_code_deps_are_the_import_closure(name: str) -> None:
    assert check_stage(name, DVC["stages"][name]) == []


@pytest.mark.parametrize("name", sorted(DVC["stages"]))
def test_every_params_key_a_stage_reads_is_a_declared_param(name: str) -> None:
    stage = DVC["stages"][name]
    modules = {m for m in closure(ROOT / stage["cmd"].split()[1]) if m.startswith(CODE)}
    declared = stage_params(stage)
    undeclared = [
        read for read in sorted(params_read(name, modules))
        if not any(read == d or read.startswith(f"{d}.") for d in declared)
    ]  # fmt: skip
    assert not undeclared, f"{name} reads {undeclared}; dvc.yaml lists {declared}"


def missing_keys(params: dict[str, Any]) -> list[str]:
    """Keys dvc.yaml names that ``params`` does not hold: `dvc repro` refuses such a file."""
    missing = []
    for stage in DVC["stages"].values():
        for key in stage_params(stage):
            node: Any = params
            for part in key.split("."):
                if not isinstance(node, dict) or part not in node:
                    missing.append(key)
                    break
                node = node[part]
    return sorted(set(missing))


def test_every_declared_param_is_written_out() -> None:
    """params.yaml, and the params the DAG tests write, hold every key dvc.yaml names."""
    assert missing_keys(yaml.safe_load((ROOT / "params.yaml").read_text())) == []
    assert missing_keys(project_params()) == []


def test_removing_a_dep_is_caught() -> None:
    """The check fails the way it should: drop one dep of rl and it names the module."""
    broken = copy.deepcopy(DVC["stages"]["rl"])
    broken["deps"].remove("agentrl/tracking.py")
    assert "rl: imports agentrl/tracking.py, not in its deps" in check_stage("rl", broken)
    broken["deps"].append("agentrl/report")
    assert "rl: dep agentrl/report is not imported" in check_stage("rl", broken)


def test_agentrl_has_no_import_cycles() -> None:
    """Module-level imports between agentrl's packages form no cycle (lower layers never
    import higher ones), nor do modules inside one package."""
    graph: dict[str, set[str]] = {}
    for path in (ROOT / "agentrl").rglob("*.py"):
        name = str(path.relative_to(ROOT))
        # a submodule's import of its own package's __init__ is how packages load, not a cycle
        own = {p / "__init__.py" for p in path.parents}
        graph[name] = {
            str(p.relative_to(ROOT)) for p in imports_of(path) - own if p != path and is_code(p)
        }
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        package = module.split("/")[1].removesuffix(".py")
        packages.setdefault(package, set())
        packages[package] |= {t.split("/")[1].removesuffix(".py") for t in targets} - {package}

    def cycle(edges: dict[str, set[str]]) -> list[str] | None:
        state: dict[str, int] = {}

        def visit(node: str, path: list[str]) -> list[str] | None:
            state[node] = 1
            for nxt in sorted(edges.get(node, ())):
                if state.get(nxt) == 1:
                    return [*path, node, nxt]
                if nxt not in state and (found := visit(nxt, [*path, node])):
                    return found
            state[node] = 2
            return None

        for node in sorted(edges):
            if node not in state and (found := visit(node, [])):
                return found
        return None

    assert cycle(graph) is None, cycle(graph)
    assert cycle(packages) is None, cycle(packages)
