"""JSON schemas from type hints, and the randomised surface a sample shows a model."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from transformers.utils import get_json_schema


@functools.cache
def _schema_of(func: Callable[..., Any]) -> dict[str, Any]:
    return get_json_schema(func)["function"]


def canonical_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """The function-calling schema of ``func`` (name, description, parameters), cached."""
    return copy.deepcopy(_schema_of(getattr(func, "__func__", func)))


@dataclass(frozen=True)
class Surface:
    """How one canonical tool is presented: its name, argument names, description, order."""

    name: str
    args: dict[str, str]
    description: str
    order: tuple[str, ...]

    @classmethod
    def canonical(cls, schema: dict[str, Any]) -> Surface:
        props = list(schema["parameters"].get("properties", {}))
        return cls(schema["name"], {a: a for a in props}, schema["description"], tuple(props))

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"order": list(self.order)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Surface:
        return cls(data["name"], dict(data["args"]), data["description"], tuple(data["order"]))

    def apply(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The schema as the model sees it, in the transformers/OpenAI ``tools`` form."""
        params = schema["parameters"]
        props = params.get("properties", {})
        required = set(params.get("required", []))
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {self.args[a]: copy.deepcopy(props[a]) for a in self.order},
                    "required": [self.args[a] for a in self.order if a in required],
                },
            },
        }
