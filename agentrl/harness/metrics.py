"""Batch figures of a set of episodes: outcome, tool use, length and context."""

from __future__ import annotations

from collections import Counter
from statistics import mean
from typing import Any

from agentrl.harness.records import Episode


def summarize(episodes: list[Episode]) -> dict[str, Any]:
    calls = sum(t.calls for e in episodes for t in e.turns)
    errors: Counter[str] = Counter()
    for e in episodes:
        for t in e.turns:
            errors.update(t.call_errors)
    return {
        "episodes": len(episodes),
        "success": float(mean(e.success for e in episodes)),
        "grounded_success": float(mean(e.grounded for e in episodes)),
        "reward": mean(e.reward for e in episodes),
        "turns": float(mean(len(e.turns) for e in episodes)),
        "generated_tokens": mean(sum(t.generated_tokens for t in e.turns) for e in episodes),
        # what a cache-less engine attends over: every turn's prompt plus its generation
        "processed_tokens": mean(
            sum(t.prompt_tokens + t.generated_tokens for t in e.turns) for e in episodes
        ),
        "peak_context": max(e.peak_context for e in episodes),
        "tool_calls": calls,
        "tool_error_rate": sum(errors.values()) / calls if calls else 0.0,
        "errors": dict(errors.most_common()),
        "end_reasons": dict(Counter(e.end_reason for e in episodes).most_common()),
        "compactions": sum(e.compactions for e in episodes),
        "retokenize_mismatches": sum(e.retokenize_mismatches for e in episodes),
    }
