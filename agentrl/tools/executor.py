"""Validate and execute tool calls against the schemas a model was shown.

Nothing a model writes can crash a batch: unknown tools, malformed or unknown arguments,
wrong types and exceptions inside tools all become error observations with a kind that
metrics count.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.tools.schema import Surface, canonical_schema

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


class ToolError(Exception):
    """A tool's own refusal (entity not found, bad unit): the model sees the message."""


@dataclass(frozen=True)
class Observation:
    text: str
    ok: bool
    error: str | None = None  # unknown_tool, bad_arguments, unknown_argument, missing_argument,
    # wrong_type, tool_error, exception
    # when the call ran (epoch ns: start, end), stamped by the harness's executor; wall clock,
    # so it never enters a compared or saved record
    clock: tuple[int, int] | None = field(default=None, compare=False)


def _type_ok(value: Any, spec: dict[str, Any]) -> bool:
    kinds = spec.get("type")
    if kinds is None:
        return True
    kinds = kinds if isinstance(kinds, list) else [kinds]
    for kind in kinds:
        allowed = _JSON_TYPES.get(kind, (object,))
        if kind in ("integer", "number") and isinstance(value, bool):
            continue
        if isinstance(value, allowed):
            return "enum" not in spec or value in spec["enum"]
    return False


def render_result(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


class ToolSet:
    """The tools of one episode: bound functions under their surfaces, in offered order."""

    def __init__(self, functions: dict[str, Callable[..., Any]], surfaces: dict[str, Surface]):
        missing = sorted(set(surfaces) - set(functions))
        if missing:
            raise KeyError(f"surfaces name tools that do not exist: {missing}")
        self.functions = functions
        self.surfaces = surfaces
        self._by_surface = {s.name: canonical for canonical, s in surfaces.items()}
        # the schemas as shown, computed once: validation reads them on every call
        self._shown = {c: s.apply(canonical_schema(functions[c])) for c, s in surfaces.items()}

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self._shown.values()))

    def canonical_call(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Surface call -> (canonical tool, canonical args); assumes the call validated."""
        canonical = self._by_surface[name]
        inverse = {v: k for k, v in self.surfaces[canonical].args.items()}
        return canonical, {inverse[k]: v for k, v in arguments.items()}

    def surface_call(self, canonical: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Canonical call -> the call as the model must write it, in schema order."""
        surface = self.surfaces[canonical]
        ordered = [a for a in surface.order if a in arguments]
        return surface.name, {surface.args[a]: arguments[a] for a in ordered}

    def validate(self, name: Any, arguments: Any) -> Observation | None:
        """An error observation if the call does not match its schema, else None."""
        if not isinstance(name, str) or name not in self._by_surface:
            offered = ", ".join(s.name for s in self.surfaces.values())
            return Observation(
                f"Error: unknown tool '{name}'. Available tools: {offered}.", False, "unknown_tool"
            )
        if not isinstance(arguments, dict):
            return Observation(
                f"Error: arguments of '{name}' must be a JSON object.", False, "bad_arguments"
            )
        params = self._shown[self._by_surface[name]]["function"]["parameters"]
        props = params["properties"]
        expected = ", ".join(props)
        for key in arguments:
            if key not in props:
                return Observation(
                    f"Error: unknown argument '{key}' for '{name}'. Expected arguments: {expected}.",
                    False,
                    "unknown_argument",
                )
        for key in params["required"]:
            if key not in arguments:
                return Observation(
                    f"Error: missing required argument '{key}' for '{name}'. Expected arguments: {expected}.",
                    False,
                    "missing_argument",
                )
        for key, value in arguments.items():
            if not _type_ok(value, props[key]):
                want = props[key].get("enum") or props[key].get("type")
                return Observation(
                    f"Error: argument '{key}' of '{name}' must be {want}, got {json.dumps(value)[:60]}.",
                    False,
                    "wrong_type",
                )
        return None

    def call(self, name: Any, arguments: Any) -> Observation:
        invalid = self.validate(name, arguments)
        if invalid is not None:
            return invalid
        canonical, args = self.canonical_call(name, arguments)
        try:
            result = self.functions[canonical](**args)
        except ToolError as err:
            return Observation(f"Error: {err}", False, "tool_error")
        except Exception as err:  # a tool bug must not end the episode
            return Observation(f"Error: {type(err).__name__}: {err}", False, "exception")
        return Observation(render_result(result), True)
