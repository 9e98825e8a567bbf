"""Layered verification (APIGen: format -> execution -> semantics), plus grounding.

1. format: every call names an offered tool with arguments valid against its schema,
   except the one deliberate mistake of a recovery trajectory, which must fail;
   the episode ends in an answer.
2. execution: replaying every call on tools rebuilt from the sample's JSON reproduces
   every observation byte for byte (catches non-determinism and unserialisable state).
3. answer: the verifier accepts the final answer (and the final state, for stateful tools).
4. grounded: the answer was read off an observation of this episode.
"""

from __future__ import annotations

from typing import Any

from agentrl.envs.registry import Registry
from agentrl.envs.verify import extract_answer, verify


def check(registry: Registry, record: dict[str, Any]) -> str | None:
    """The first failing layer's name, or None when the sample passes every layer."""
    messages = record["messages"]
    recovery = record["meta"].get("recovery")
    tools, box = registry.bind(record["env"])
    calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    results = [m for m in messages if m["role"] == "tool"]
    for turn, message in enumerate(calls):
        call = message["tool_calls"][0]["function"]
        invalid = tools.validate(call["name"], call["arguments"])
        deliberate = recovery is not None and recovery["turn"] == turn
        if (invalid is None) == deliberate:
            return "format"
    final = messages[-1]
    if (
        final["role"] != "assistant"
        or final.get("tool_calls")
        or extract_answer(final["content"]) is None
    ):
        return "format"
    if len(results) != len(calls):
        return "format"
    for message, result in zip(calls, results, strict=True):
        call = message["tool_calls"][0]["function"]
        if tools.call(call["name"], call["arguments"]).text != result["content"]:
            return "execution"
    verdict = verify(
        record["verifier"], final["content"], [r["content"] for r in results], box.snapshot()
    )
    if not verdict.success:
        return "answer"
    if not verdict.grounded:
        return "ungrounded"
    return None
