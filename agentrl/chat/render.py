"""Render a conversation with tools to text and assistant spans, then to ids and a mask.

The Python renderer produces exactly the text of the format's Jinja template (a test
proves token-for-token agreement with ``tokenizer.apply_chat_template``) and also knows
which characters the assistant wrote. Ids come from tokenizing the whole text once; a
token is an assistant token when it starts inside an assistant span. Format markers are
added tokens, so no BPE merge crosses a span boundary.
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.chat.formats import IM_END, IM_START, TOOL_RESPONSE, TOOL_RESPONSE_END, ChatFormat


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_call(fmt: ChatFormat, name: str, arguments: Any) -> str:
    if fmt.name == "hermes":
        args = arguments if isinstance(arguments, str) else _json(arguments)
        return f'<tool_call>\n{{"name": {_json(name)}, "arguments": {args}}}\n</tool_call>'
    params = "".join(
        f"<parameter={key}>\n{value if isinstance(value, str) else _json(value)}\n</parameter>\n"
        for key, value in (arguments or {}).items()
    )
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def render_assistant(fmt: ChatFormat, message: dict[str, Any]) -> str:
    """What the model writes for one assistant turn, ``<|im_end|>`` included."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        # one newline before a call: servers' tool parsers (vLLM's hermes) return the text
        # before a call with the model's newline kept, and a client sends that message back
        if text and not text.endswith("\n"):
            text += "\n"
        text += render_call(fmt, call["function"]["name"], call["function"]["arguments"])
    return text + IM_END


def render_text(
    fmt: ChatFormat,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> tuple[str, list[tuple[int, int]]]:
    """(text, assistant character spans) for a conversation, as the template renders it."""
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    size = 0

    def emit(text: str, assistant: bool = False) -> None:
        nonlocal size
        if assistant:
            spans.append((size, size + len(text)))
        parts.append(text)
        size += len(text)

    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    if tools or system:
        block = f"{IM_START}system\n{system}"
        if tools:
            block += (
                ("\n\n" if system else "")
                + "# Tools\n<tools>"
                + "".join("\n" + _json(t) for t in tools)
                + "\n</tools>"
            )
        emit(block + f"{IM_END}\n")
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "user":
            emit(f"{IM_START}user\n{message['content']}{IM_END}\n")
        elif role == "assistant":
            emit(f"{IM_START}assistant\n")
            emit(render_assistant(fmt, message), assistant=True)
            emit("\n")
        elif role == "tool":
            first = i == 0 or messages[i - 1]["role"] != "tool"
            last = i == len(messages) - 1 or messages[i + 1]["role"] != "tool"
            emit(
                (f"{IM_START}user\n" if first else "\n")
                + f"{TOOL_RESPONSE}\n{message['content']}\n{TOOL_RESPONSE_END}"
            )
            if last:
                emit(f"{IM_END}\n")
    if add_generation_prompt:
        emit(f"{IM_START}assistant\n")
    return "".join(parts), spans


def _mask(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    mask, j = [], 0
    for start, _ in offsets:
        while j < len(spans) and spans[j][1] <= start:
            j += 1
        mask.append(int(j < len(spans) and spans[j][0] <= start < spans[j][1]))
    return mask


def render_ids(
    tokenizer: Any,
    fmt: ChatFormat,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> tuple[list[int], list[int]]:
    """(token ids, assistant mask) — mask 1 for tokens the assistant wrote."""
    return render_ids_batch(tokenizer, fmt, [(messages, tools)], add_generation_prompt)[0]


def render_ids_batch(
    tokenizer: Any,
    fmt: ChatFormat,
    conversations: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]],
    add_generation_prompt: bool = False,
) -> list[tuple[list[int], list[int]]]:
    """``render_ids`` for many conversations, tokenized in one (parallel) call."""
    rendered = [
        render_text(fmt, messages, tools, add_generation_prompt)
        for messages, tools in conversations
    ]
    encoded = tokenizer(
        [text for text, _ in rendered], add_special_tokens=False, return_offsets_mapping=True
    )
    return [
        (list(ids), _mask(offsets, spans))
        for ids, offsets, (_, spans) in zip(
            encoded["input_ids"], encoded["offset_mapping"], rendered, strict=True
        )
    ]
