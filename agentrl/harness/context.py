"""Context strategies: what the model sees when the full history no longer fits.

``none`` keeps everything (the episode ends when the next turn would not fit).
``window`` is sliding-window observation filtering, applied on demand: when the next turn
would not fit, every tool response but the last ``keep`` becomes a one-line placeholder;
the task and all assistant turns stay. The rewritten view starts a new segment.
"""

from __future__ import annotations

from typing import Any

PLACEHOLDER = "[older tool response omitted]"


def window(messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """``messages`` with all but the last ``keep`` tool responses replaced by a placeholder."""
    tool_positions = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    dropped = set(tool_positions[:-keep]) if keep else set(tool_positions)
    return [
        {**m, "content": PLACEHOLDER} if i in dropped and m["content"] != PLACEHOLDER else m
        for i, m in enumerate(messages)
    ]


def compact(strategy: str, messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The view after compaction; equal to ``messages`` when the strategy cannot shrink it."""
    if strategy == "window":
        return window(messages, keep)
    return messages
