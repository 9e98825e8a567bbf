"""Why an episode failed: the first thing that went wrong, read against the task's expert
trajectory, so a checkpoint's failures can be counted by kind before and after training.

Kinds (``FAILURES``), checked in this order:

- ``grounded``: not a failure (a verified answer read off a tool observation).
- ``wrong_answer``: every observation the expert's calls got was in front of the model,
  and its answer was still rejected (a wrong answer from the right observation).
- ``ran_out``: it had those observations, or never made a wrong call, yet hit the turn or
  context limit without answering.
- ``malformed_call``: the first faulty turn wrote a call the parser rejects.
- ``wrong_tool``: the first faulty call names a tool the expert never called.
- ``wrong_argument_name``: the expert's tool, with argument names no expert call of it had.
- ``wrong_value``: the expert's tool and argument names, other values (compared as the
  pivot verifier compares them: order, case, spacing and 2 vs 2.0 do not matter).
- ``answered_early``: every call it made was right, but it answered before it had every
  observation the expert needed.

A faulty call the model never recovered from is what every kind from ``malformed_call`` on
means: an episode that recovered saw every expert observation and is ``wrong_answer`` or
``ran_out`` (or grounded). Simplification, stated: an expert trajectory is one right way;
a model that reached the answer by other calls that were also right and then failed to
answer is counted by its first call the expert did not make.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentrl.chat import ChatFormat, parse
from agentrl.rl.turn_reward import same_call

FAILURES = (
    "grounded", "wrong_answer", "ran_out", "malformed_call", "wrong_tool",
    "wrong_argument_name", "wrong_value", "answered_early",
)  # fmt: skip


def expert_calls(record: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (tool, arguments) of every call in ``record``'s expert trajectory, in order."""
    return [
        (call["function"]["name"], call["function"]["arguments"])
        for message in record["messages"]
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or []
    ]


def call_fault(
    name: str, arguments: dict[str, Any], expert: list[tuple[str, dict[str, Any]]]
) -> str | None:
    """What is wrong with one call against the expert's calls (None: it is one of them).

    >>> expert = [("lookup", {"entity": "Posase", "relation": "age"})]
    >>> call_fault("lookup", {"relation": "Age", "entity": "posase"}, expert) is None
    True
    >>> call_fault("search", {"query": "Posase"}, expert)
    'wrong_tool'
    >>> call_fault("lookup", {"name": "Posase", "relation": "age"}, expert)
    'wrong_argument_name'
    >>> call_fault("lookup", {"entity": "Posale", "relation": "age"}, expert)
    'wrong_value'
    """
    same_tool = [args for tool, args in expert if tool == name]
    if not same_tool:
        return "wrong_tool"
    if not any(set(args) == set(arguments) for args in same_tool):
        return "wrong_argument_name"
    if not any(same_call(name, arguments, name, args) for args in same_tool):
        return "wrong_value"
    return None


def failure_kind(episode: dict[str, Any], record: dict[str, Any], fmt: ChatFormat) -> str:
    """The kind (one of ``FAILURES``) of a saved episode (``Episode.to_json()``) of
    ``record``'s task."""
    if episode["grounded"]:
        return "grounded"
    needed = {m["content"].strip() for m in record["messages"] if m["role"] == "tool"}
    seen = {text.strip() for text in episode["observations"]}
    if needed <= seen:
        return "wrong_answer" if episode["end_reason"] == "answer" else "ran_out"
    expert = expert_calls(record)
    for message in episode["messages"]:
        if message["role"] != "assistant":
            continue
        parsed = parse(message["content"], fmt, record["tools"])
        if parsed.errors:
            return "malformed_call"
        for call in parsed.calls:
            if fault := call_fault(call.name, call.arguments, expert):
                return fault
    return "answered_early" if episode["end_reason"] == "answer" else "ran_out"


def breakdown(kinds: list[str]) -> dict[str, int]:
    """How many episodes of each kind, every kind listed.

    >>> breakdown(["grounded", "wrong_value", "grounded"])["grounded"]
    2
    """
    counts = Counter(kinds)
    return {kind: counts.get(kind, 0) for kind in FAILURES}
