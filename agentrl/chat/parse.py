"""Model text -> content, tool calls and parse errors. Never raises, whatever the input.

A call counts only where the format puts one: a ``<tool_call>`` marker at the start of a
line, outside ``<think>…</think>`` reasoning. A marker written mid-sentence or inside
reasoning is text. Malformed or truncated calls become errors the harness shows the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.formats import (
    END_OF_TEXT,
    IM_END,
    THINK,
    THINK_END,
    TOOL_CALL,
    TOOL_CALL_END,
    ChatFormat,
)

_XML_FUNCTION = re.compile(r"\A\s*<function=([^>\n]*)>\n?(.*?)</function>\s*\Z", re.DOTALL)
_XML_PARAM = re.compile(r"<parameter=([^>\n]*)>\n?(.*?)\n?</parameter>", re.DOTALL)


@dataclass
class ParsedCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class Parsed:
    content: str
    calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _think_regions(text: str) -> list[tuple[int, int]]:
    regions, start = [], text.find(THINK)
    while start != -1:
        end = text.find(THINK_END, start)
        stop = len(text) if end == -1 else end + len(THINK_END)
        regions.append((start, stop))
        start = text.find(THINK, stop)
    return regions


def _convert(value: str, kind: Any) -> Any:
    kinds = kind if isinstance(kind, list) else [kind]
    for k in kinds:
        try:
            if k == "integer":
                return int(value.strip())
            if k == "number":
                number = float(value.strip())
                return (
                    int(number)
                    if number.is_integer() and "." not in value and "e" not in value.lower()
                    else number
                )
            if k == "boolean" and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            if k in ("array", "object", "null"):
                return json.loads(value)
            if k == "string":
                return value
        except (ValueError, RecursionError):
            continue
    return value


def _hermes(body: str) -> ParsedCall:
    data = json.loads(body)
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise ValueError('a hermes call is a JSON object with a string "name"')
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    if not isinstance(arguments, dict):
        raise ValueError('"arguments" must be a JSON object')
    return ParsedCall(data["name"], arguments)


def _xml(body: str, schemas: dict[str, dict[str, Any]]) -> ParsedCall:
    match = _XML_FUNCTION.match(body)
    if match is None:
        raise ValueError("expected <function=NAME> ... </function>")
    name, inner = match.group(1).strip(), match.group(2)
    props = schemas.get(name, {}).get("parameters", {}).get("properties", {})
    arguments = {}
    for key, value in _XML_PARAM.findall(inner):
        arguments[key.strip()] = (
            _convert(value, props[key.strip()].get("type")) if key.strip() in props else value
        )
    leftover = _XML_PARAM.sub("", inner).strip()
    if leftover:
        raise ValueError(f"unexpected text inside <function>: {leftover[:40]!r}")
    return ParsedCall(name, arguments)


def parse(text: Any, fmt: ChatFormat, tools: list[dict[str, Any]] | None = None) -> Parsed:
    """Split model output into content and calls; problems go to ``errors``, never raised."""
    try:
        return _parse(str(text), fmt, tools or [])
    except Exception as err:  # a parser bug must not take a batch down
        return Parsed(
            content=str(text)[:10_000], errors=[f"unparseable output: {type(err).__name__}"]
        )


def _parse(text: str, fmt: ChatFormat, tools: list[dict[str, Any]]) -> Parsed:
    for stop in (IM_END, END_OF_TEXT):
        cut = text.find(stop)
        if cut != -1:
            text = text[:cut]
    schemas = {}
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            schemas[fn["name"]] = fn
    thinking = _think_regions(text)
    parsed = Parsed(content="")
    first_call = None
    pos = 0
    while (start := text.find(TOOL_CALL, pos)) != -1:
        pos = start + len(TOOL_CALL)
        if any(a <= start < b for a, b in thinking) or (start > 0 and text[start - 1] != "\n"):
            continue  # reasoning or prose that mentions a call
        end = text.find(TOOL_CALL_END, pos)
        if end == -1:
            parsed.errors.append("unterminated <tool_call> (no </tool_call>)")
            first_call = start if first_call is None else first_call
            break
        first_call = start if first_call is None else first_call
        body = text[pos:end].strip("\n")
        try:
            parsed.calls.append(_hermes(body) if fmt.name == "hermes" else _xml(body, schemas))
        except (ValueError, RecursionError) as err:
            parsed.errors.append(f"malformed tool call: {str(err)[:120]}")
        pos = end + len(TOOL_CALL_END)
    parsed.content = (text if first_call is None else text[:first_call]).strip()
    return parsed
