"""Context strategies: what the model sees when the full history no longer fits.

``none`` keeps everything (the episode ends when the next turn would not fit).
``window`` is sliding-window observation filtering, applied on demand: when the next turn
would not fit, every tool response but the last ``keep`` becomes a one-line omission marker;
the task and all assistant turns stay. The rewritten view starts a new segment.
``summary`` is a context restart: past a threshold the harness asks for a progress summary
(the request is inserted, the summary is a generated turn trained like any other), then
the episode continues from the task plus that summary in a new segment.
``adaptive`` is the same restart, asked for only when the remaining turns at the largest
growth per turn seen so far would not fit (``loop.Harness._wants_summary``).
"""

from __future__ import annotations

from typing import Any

OMITTED = "[older tool response omitted]"
SUMMARY_REQUEST = (
    "Context is running out. Write a short progress summary: what you found (exact values) "
    "and what remains to do. Do not call tools in this turn."
)

CHECK_REQUEST = (
    "Before you finish: check your answer against the tool results above. If it is right, "
    "give the same final answer again; if not, correct it (you may call tools)."
)


def restart(task: dict[str, Any], summary: str) -> list[dict[str, Any]]:
    """The view a ``summary`` restart begins from: the task, with the model's summary."""
    return [{**task, "content": f"{task['content']}\n\nProgress so far:\n{summary}"}]


def window(messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """``messages`` with all but the last ``keep`` tool responses replaced by an omission marker."""
    tool_positions = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    dropped = set(tool_positions[:-keep]) if keep else set(tool_positions)
    return [
        {**m, "content": OMITTED} if i in dropped and m["content"] != OMITTED else m
        for i, m in enumerate(messages)
    ]


def compact(strategy: str, messages: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The view after compaction; equal to ``messages`` when the strategy cannot shrink it."""
    if strategy == "window":
        return window(messages, keep)
    return messages
