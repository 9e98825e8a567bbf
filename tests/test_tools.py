"""Tool schemas, surfaces, the held-out vocabulary partition and the executor's errors."""

from __future__ import annotations

import random

import pytest

from agentrl.envs.families.calculator import CalculatorTools, evaluate
from agentrl.envs.registry import Registry
from agentrl.tools import Surface, ToolError, ToolSet, canonical_schema


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry()


def test_schema_from_type_hints_and_docstring() -> None:
    schema = canonical_schema(CalculatorTools({}).calculate)
    assert schema["name"] == "calculate"
    assert schema["parameters"]["properties"]["expression"]["type"] == "string"
    assert schema["parameters"]["required"] == ["expression"]


def test_surface_renames_and_reorders(registry: Registry) -> None:
    rng = random.Random(0)
    schema = registry.schema("convert_units")
    surface = registry.partition.sample(rng, "convert_units", schema, heldout=False, rename=True)
    shown = surface.apply(schema)["function"]
    assert shown["name"] == surface.name
    assert list(shown["parameters"]["properties"]) == [surface.args[a] for a in surface.order]
    assert sorted(shown["parameters"]["required"]) == sorted(surface.args.values())
    assert Surface.from_json(surface.to_json()) == surface


def test_vocabulary_partition_is_disjoint_and_keeps_canonical_names(registry: Registry) -> None:
    part = registry.partition
    for tool, names in part.names.items():
        assert names["train"] and names["heldout"]
        assert not set(names["train"]) & part.heldout_tool_names
        assert tool not in part.heldout_tool_names
        for arg, options in part.args[tool].items():
            assert options["train"] and options["heldout"]
            assert not set(options["train"]) & part.heldout_arg_names
            assert arg not in part.heldout_arg_names


def _toolset(registry: Registry) -> ToolSet:
    functions = registry.envs["store"].bind({"items": {"lamp": 2}}).functions()
    surfaces = {t: Surface.canonical(registry.schema(t)) for t in functions}
    return ToolSet(functions, surfaces)


@pytest.mark.parametrize(
    ("name", "arguments", "error", "text"),
    [
        ("sell_item", {}, "unknown_tool", "unknown tool 'sell_item'"),
        (None, {}, "unknown_tool", "unknown tool"),
        ("add_item", "lamp", "bad_arguments", "must be a JSON object"),
        ("add_item", {"item": "lamp", "qty": 1}, "unknown_argument", "unknown argument 'qty'"),
        ("add_item", {"item": "lamp"}, "missing_argument", "missing required argument 'quantity'"),
        ("add_item", {"item": "lamp", "quantity": "2"}, "wrong_type", "must be integer"),
        ("add_item", {"item": "lamp", "quantity": True}, "wrong_type", "must be integer"),
        ("remove_item", {"item": "lamp", "quantity": 5}, "tool_error", "only 2 in stock"),
    ],
)
def test_bad_calls_become_error_observations(
    registry: Registry, name, arguments, error: str, text: str
) -> None:
    observed = _toolset(registry).call(name, arguments)
    assert not observed.ok
    assert observed.error == error
    assert observed.text.startswith("Error:") and text in observed.text


def test_good_call_and_state(registry: Registry) -> None:
    tools = _toolset(registry)
    assert (
        tools.call("add_item", {"item": "lamp", "quantity": 3}).text
        == '{"item": "lamp", "quantity": 5}'
    )
    assert tools.call("count_items", {"item": "lamp"}).text == "5"


def test_tool_exception_does_not_escape() -> None:
    def broken(x: int) -> int:
        """Always fails.

        Args:
            x: Anything.
        """
        raise RuntimeError("boom")

    tools = ToolSet({"broken": broken}, {"broken": Surface.canonical(canonical_schema(broken))})
    observed = tools.call("broken", {"x": 1})
    assert observed.error == "exception" and "boom" in observed.text


def test_calculator_is_not_eval() -> None:
    assert evaluate("(12 + 3) * 4 - 6 / 2") == 57
    for bad in ("__import__('os')", "2 ** 999999", "x + 1", "1 / 0", "1 +"):
        with pytest.raises(ToolError):
            evaluate(bad)
