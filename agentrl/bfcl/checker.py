"""BFCL's AST check, written from its documented rules (Berkeley Function Calling
Leaderboard, "AST evaluation"), for the Python categories simple, multiple and parallel.

A possible answer maps each function name to ``{param: [accepted values]}``; ``""`` among
the accepted values marks an optional parameter that may be left out. A call is correct when:

- its function name is the expected one;
- every required parameter is present, and no parameter is outside both the schema and
  the possible answer;
- each value has the schema's type (an int where a float is expected is allowed; list items
  are checked against ``items.type``; a string where another type is expected passes only
  as a variable name the answer lists);
- each value is among the accepted ones: strings compare after standardisation (spaces and
  ``,./-_*^`` removed, lower case, ``'`` as ``"``), lists element-wise, dicts key by key,
  lists of dicts item by item;
- every parameter it leaves out is optional.

*multiple* is one expected call among several offered functions; *parallel* is several
expected calls in one turn, matched in any order, each model call used once. We match them
as an assignment; BFCL's first-fit can reject a right answer whose calls come in another
order when an optional parameter makes one call fit two expectations (parallel_96).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PY_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
_STANDARDISE = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class Verdict:
    valid: bool
    error: str = ""

    def __bool__(self) -> bool:
        return self.valid


OK = Verdict(True)


def standardise(text: str) -> str:
    return _STANDARDISE.sub("", text).lower().replace("'", '"')


def _norm(value: Any) -> Any:
    if isinstance(value, str):
        return standardise(value)
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def _same(value: Any, accepted: Any) -> bool:
    """One accepted value against a model value, BFCL style: standardised strings,
    element-wise lists, key-wise dicts (a dict's optional keys may be missing)."""
    if isinstance(accepted, dict) and isinstance(value, dict):
        for key, options in accepted.items():
            if key not in value:
                if "" not in options:
                    return False
                continue
            if not any(_same(value[key], option) for option in options):
                return False
        return all(key in accepted for key in value)
    if isinstance(accepted, list) and isinstance(value, list):
        return len(accepted) == len(value) and all(
            _same(v, a) for v, a in zip(value, accepted, strict=True)
        )
    if isinstance(accepted, bool) or isinstance(value, bool):
        return type(accepted) is type(value) and accepted == value
    if isinstance(accepted, int | float) and isinstance(value, int | float):
        return accepted == value
    return _norm(value) == _norm(accepted)


def _type_ok(value: Any, schema: dict[str, Any], accepted: list[Any]) -> Verdict:
    kind = schema.get("type", "any")
    expected = PY_TYPES.get(kind)
    if expected is None:
        return Verdict(False, f"unknown schema type {kind!r}")
    if isinstance(value, str) and expected is not str and value in accepted:
        return OK  # a variable name standing for the value
    if kind == "float" and type(value) is int:
        return OK
    if expected in (int, float) and isinstance(value, bool):
        return Verdict(False, f"expected {kind}, got boolean")
    if not isinstance(value, expected):
        return Verdict(False, f"expected {kind}, got {type(value).__name__}")
    if kind in ("array", "tuple") and "items" in schema:
        item_kind = schema["items"].get("type", "any")
        for item in value:
            if not _type_ok(item, schema["items"], []):
                return Verdict(False, f"list item {item!r} is not {item_kind}")
    return OK


def check_call(
    function: dict[str, Any], call: tuple[str, dict[str, Any]], answer: dict[str, list[Any]]
) -> Verdict:
    """One model call against one function's description and its possible answer."""
    name, arguments = call
    if name != function["name"]:
        return Verdict(False, f"wrong function {name!r}, expected {function['name']!r}")
    if not isinstance(arguments, dict):
        return Verdict(False, "arguments are not an object")
    schema = function["parameters"]
    props = schema.get("properties", {})
    for required in schema.get("required", []):
        if required not in arguments:
            return Verdict(False, f"missing required parameter {required!r}")
    for param, value in arguments.items():
        if param not in props or param not in answer:
            return Verdict(False, f"unexpected parameter {param!r}")
        typed = _type_ok(value, props[param], answer[param])
        if not typed:
            return Verdict(False, f"{param!r}: {typed.error}")
        if not any(_same(value, option) for option in answer[param]):
            return Verdict(False, f"{param!r}: {value!r} not among {answer[param]!r}")
    for param, options in answer.items():
        if param not in arguments and "" not in options:
            return Verdict(False, f"missing parameter {param!r}")
    return OK


def check(
    category: str,
    functions: list[dict[str, Any]],
    calls: list[tuple[str, dict[str, Any]]],
    ground_truth: list[dict[str, dict[str, list[Any]]]],
) -> Verdict:
    """A turn's calls against the question's ground truth under ``category``'s rules."""
    by_name = {f["name"]: f for f in functions}
    if category in ("simple", "multiple"):
        if len(calls) != 1:
            return Verdict(False, f"expected one call, got {len(calls)}")
        (expected_name, answer), = ground_truth[0].items()  # fmt: skip
        if expected_name not in by_name:
            return Verdict(False, f"ground truth names {expected_name!r}, not offered")
        return check_call(by_name[expected_name], calls[0], answer)
    if category == "parallel":
        if len(calls) != len(ground_truth):
            return Verdict(False, f"expected {len(ground_truth)} calls, got {len(calls)}")
        fits = [
            [i for i, call in enumerate(calls)
             if check_call(by_name[name], call, answer)]
            for expected in ground_truth for name, answer in expected.items()
        ]  # fmt: skip
        if not _assign(fits):
            return Verdict(False, "no one-to-one match of the calls to the expected calls")
        return OK
    raise ValueError(f"unknown BFCL category {category!r}")


def _assign(fits: list[list[int]]) -> bool:
    """Whether every expected call gets its own model call (augmenting paths, Kuhn)."""
    owner: dict[int, int] = {}

    def claim(expected: int, seen: set[int]) -> bool:
        for call in fits[expected]:
            if call not in seen:
                seen.add(call)
                if call not in owner or claim(owner[call], seen):
                    owner[call] = expected
                    return True
        return False

    return all(claim(expected, set()) for expected in range(len(fits)))
