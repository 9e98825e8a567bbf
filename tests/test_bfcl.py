"""BFCL: the data files come from the pinned bfcl-eval wheel, and our AST checker accepts
every possible answer BFCL ships while rejecting perturbed ones."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from agentrl.bfcl.bench import as_tools, json_schema
from agentrl.bfcl.checker import check, check_call, standardise
from agentrl.bfcl.fetch import fetch, load
from agentrl.config import BFCLSection, ConfigError
from agentrl.pinned import check_wheel

CATEGORIES = ("simple", "multiple", "parallel")


@pytest.fixture(scope="module")
def bfcl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bfcl") / "bfcl"
    counts = fetch(BFCLSection(categories=list(CATEGORIES)), out)
    assert counts == {"simple": 400, "multiple": 200, "parallel": 200}
    assert json.loads((out / "source.json").read_text())["sha256"] == BFCLSection().sha256
    return out


# Accepted values in BFCL's answer files that contradict the function's declared type
# (BFCL's own type check rejects them too): (question, parameter) -> the value.
ERRATA: dict[tuple[str, str], Any] = {
    ("simple_python_149", "company_names"): [["Apple"], ["Microsoft"]],  # array of string
    ("simple_python_307", "venue"): True,  # string
    ("parallel_152", "mod"): None,  # float
}


def concrete(accepted: Any) -> Any:
    """A value a model would write for an accepted value (dict options -> their first)."""
    if isinstance(accepted, dict):
        return {k: concrete(_first(o)) for k, o in accepted.items() if _first(o) != ""}
    if isinstance(accepted, list):
        return [concrete(v) for v in accepted]
    return accepted


def _first(options: list[Any]) -> Any:
    return next((o for o in options if o != ""), "")


def answers(
    truth: list[dict], functions: list[dict], qid: str = ""
) -> list[list[tuple[str, dict]]]:
    """Every possible answer, one accepted option varied at a time. BFCL's rules never let
    a required parameter be left out, so its ``""`` (a few files list one) is skipped."""
    required = {f["name"]: set(f["parameters"].get("required", [])) for f in functions}
    truth = [
        {n: {p: [o for o in opts if (qid, p) not in ERRATA or o != ERRATA[qid, p]]
             for p, opts in a.items()} for n, a in e.items()}
        for e in truth
    ]  # fmt: skip
    base = [(n, {p: concrete(_first(o)) for p, o in a.items() if _first(o) != ""})
            for e in truth for n, a in e.items()]  # fmt: skip
    out = [base]
    for i, expected in enumerate(truth):
        (name, answer), = expected.items()  # fmt: skip
        for param, options in answer.items():
            for option in options[1:]:
                if option == "" and param in required[name]:
                    continue
                calls = copy.deepcopy(base)
                if option == "":
                    calls[i][1].pop(param, None)
                else:
                    calls[i][1][param] = concrete(option)
                out.append(calls)
    return out


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_possible_answer_is_accepted(bfcl: Path, category: str) -> None:
    checked = 0
    for question, answer in load(bfcl, category):
        truth = answer["ground_truth"]
        for calls in answers(truth, question["function"], question["id"]):
            if category == "parallel":
                calls = calls[::-1]  # order does not matter
            verdict = check(category, question["function"], calls, truth)
            assert verdict, (question["id"], calls, verdict.error)
            checked += 1
    for (qid, param), value in ERRATA.items():
        for question, answer in load(bfcl, category):
            if question["id"] == qid:
                calls = answers(answer["ground_truth"], question["function"], qid)[0]
                calls[0][1][param] = value
                assert not check(category, question["function"], calls, answer["ground_truth"])
    assert checked > {"simple": 400, "multiple": 200, "parallel": 200}[category]


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7919
    if isinstance(value, str):
        return value + " qx"
    if isinstance(value, list):
        return [*value, value[0] if value else "qx"]
    if isinstance(value, dict):
        return {**value, "qx_key": 1}
    raise TypeError(value)


def perturbations(
    calls: list[tuple[str, dict]], functions: list[dict], truth: list[dict]
) -> list[tuple[str, list]]:
    by_name = {f["name"]: f for f in functions}
    out = [("wrong name", [(calls[0][0] + "_v2", calls[0][1]), *calls[1:]])]
    out.append(("unexpected parameter", [(calls[0][0], calls[0][1] | {"qx_extra": 1}), *calls[1:]]))
    required = by_name[calls[0][0]]["parameters"].get("required", [])
    if required:
        args = {k: v for k, v in calls[0][1].items() if k != required[0]}
        out.append(("missing required", [(calls[0][0], args), *calls[1:]]))
    (accepted,) = truth[0].values()
    for param, value in calls[0][1].items():
        if any(_changed(value) == option for option in accepted[param]):
            continue  # e.g. both booleans are right
        out.append(
            (
                f"changed {param}",
                [(calls[0][0], calls[0][1] | {param: _changed(value)}), *calls[1:]],
            )
        )
    out.append(("extra call", [*calls, calls[0]]))
    if len(calls) > 1:
        out.append(("missing call", calls[1:]))
    return out


@pytest.mark.parametrize("category", CATEGORIES)
def test_perturbed_answers_are_rejected(bfcl: Path, category: str) -> None:
    rejected = 0
    for question, answer in load(bfcl, category):
        truth = answer["ground_truth"]
        for what, calls in perturbations(
            answers(truth, question["function"], question["id"])[0], question["function"], truth
        ):
            verdict = check(category, question["function"], calls, truth)
            assert not verdict, (question["id"], what, calls)
            rejected += 1
    assert rejected >= 4 * {"simple": 400, "multiple": 200, "parallel": 200}[category]


def test_the_documented_rules_one_by_one() -> None:
    function = {
        "name": "book",
        "parameters": {
            "type": "dict",
            "properties": {
                "city": {"type": "string"},
                "nights": {"type": "integer"},
                "budget": {"type": "float"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "late": {"type": "boolean"},
            },
            "required": ["city", "nights"],
        },
    }
    answer = {"city": ["New York, NY", "NYC"], "nights": [3], "budget": [120.0, ""],
              "tags": [["quiet", "view"], ""], "late": [False, ""]}  # fmt: skip
    assert check_call(function, ("book", {"city": "new york ny", "nights": 3}), answer)
    assert check_call(function, ("book", {"city": "NYC", "nights": 3, "budget": 120}), answer)
    assert check_call(
        function, ("book", {"city": "NYC", "nights": 3, "tags": ["Quiet", "view"]}), answer
    )
    assert not check_call(
        function, ("book", {"city": "NYC", "nights": 3.0}), answer
    )  # float for int
    assert not check_call(function, ("book", {"city": "NYC", "nights": True}), answer)
    assert not check_call(function, ("book", {"city": "NYC", "nights": 3, "late": 0}), answer)
    assert not check_call(
        function, ("book", {"city": "NYC", "nights": 3, "tags": ["view", "quiet"]}), answer
    )
    assert not check_call(function, ("book", {"city": "Boston", "nights": 3}), answer)
    assert not check_call(function, ("book", {"nights": 3}), answer)
    assert standardise("April 1, 2024") == standardise("april 1 2024") == "april12024"


def test_schemas_become_json_schema_tools() -> None:
    schema = {"type": "dict", "properties": {"x": {"type": "float"}, "p": {"type": "tuple",
              "items": {"type": "dict", "properties": {"a": {"type": "any"}}}}}}  # fmt: skip
    converted = json_schema(schema)
    assert converted["type"] == "object" and converted["properties"]["x"]["type"] == "number"
    assert converted["properties"]["p"]["items"]["properties"]["a"]["type"] == "string"
    tool = as_tools([{"name": "f", "description": "d", "parameters": schema}])[0]
    assert tool["type"] == "function" and tool["function"]["parameters"] == converted


def test_a_wheel_with_another_digest_is_refused(bfcl: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "bfcl_eval-0-py3-none-any.whl"
    wheel.write_bytes(b"not the pinned wheel")
    with pytest.raises(ConfigError, match=r"eval.bfcl.sha256: 3bb6.* is not the digest of"):
        check_wheel(wheel, BFCLSection().sha256, "eval.bfcl.sha256")
