"""One source of defaults: params.yaml writes out every knob, the code's defaults are its
values, and docs/params.md is generated from the field descriptions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from agentrl.config import Params, SplitSection, load_params
from agentrl.params_doc import params_reference

ROOT = Path(__file__).resolve().parents[1]


def fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo, bool]]:
    """(dotted key, field, is a section) for every field, sections recursed into."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        section = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        yield f"{prefix}{name}", info, section
        if section:
            yield from fields(annotation, f"{prefix}{name}.")


def lookup(data: Any, dotted: str) -> tuple[bool, Any]:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def dumped(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [dumped(v) for v in value]
    return value


def test_params_yaml_writes_out_every_knob() -> None:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    missing = [key for key, _, _ in fields(Params) if not lookup(raw, key)[0]]
    for split, settings in raw["synth"]["splits"].items():
        missing += [
            f"synth.splits.{split}.{key}"
            for key, _, _ in fields(SplitSection)
            if not lookup(settings, key)[0]
        ]
    assert not missing, missing


def test_code_defaults_are_the_values_of_params_yaml() -> None:
    loaded = load_params(ROOT / "params.yaml").model_dump(mode="json")
    differ = {}
    for key, info, section in fields(Params):
        if section or info.is_required():
            continue
        default = dumped(info.get_default(call_default_factory=True))
        value = lookup(loaded, key)[1]
        if default != value:
            differ[key] = (default, value)
    assert not differ, differ


def test_every_field_says_what_it_does() -> None:
    undocumented = [
        key
        for model, prefix in ((Params, ""), (SplitSection, "synth.splits.<split>."))
        for key, info, section in fields(model, prefix)
        if not section and not info.description
    ]
    assert not undocumented, undocumented


def test_docs_params_md_is_generated_from_the_code() -> None:
    committed = (ROOT / "docs" / "params.md").read_text()
    assert committed == params_reference(), "run: agentrl params --doc > docs/params.md"
    for key, _, section in fields(Params):
        if not section:
            assert f"`{key}`" in committed, key
