"""The figures of one checkpoint on one split under one harness setting.

Success counts the verifier's verdict; grounded success also needs the answer to have been
read off a tool observation of that episode (a tiny model trained on one fixed world
answered from memorised facts after failed calls). Rates are pass@1 over every episode with a Wilson 95% interval; pass@k is the
unbiased estimator of grounded success averaged over tasks (``pass_at_k``: MLflow
allows no "@" in a metric name). A call is *valid* when it parses and matches its
schema (name, argument names, types); the tool error rate is the share of valid calls the
tool itself refused or failed (a bad value, an exception, a timeout).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any

from agentrl.harness.metrics import summarize
from agentrl.harness.records import Episode
from agentrl.stats import pass_at_k, wilson

INVALID_CALL = frozenset(
    {"parse_error", "unknown_tool", "bad_arguments", "unknown_argument", "missing_argument", "wrong_type"}
)  # fmt: skip


def _rate(prefix: str, successes: int, n: int) -> dict[str, float]:
    rate = wilson(successes, n)
    return {prefix: rate.value, f"{prefix}_low": rate.low, f"{prefix}_high": rate.high}


def score(episodes: list[Episode], pass_k: list[int]) -> dict[str, Any]:
    """Metrics of ``episodes`` (every task sampled equally often); pass@k for each k that
    does not exceed the samples per task. Floats are rounded to 4 places for diffs."""
    if not episodes:
        raise ValueError("no episodes to score")
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for episode in episodes:
        by_task[episode.task_id].append(episode)
    samples = min(len(group) for group in by_task.values())
    figures = summarize(episodes)
    calls = figures["tool_calls"]
    invalid = sum(n for kind, n in figures["errors"].items() if kind in INVALID_CALL)
    failed = sum(figures["errors"].values()) - invalid
    valid = calls - invalid
    out: dict[str, Any] = {
        "episodes": len(episodes),
        "tasks": len(by_task),
        **_rate("success", sum(e.success for e in episodes), len(episodes)),
        **_rate("grounded_success", sum(e.grounded for e in episodes), len(episodes)),
    }
    for k in pass_k:
        if k <= samples:
            out[f"pass_at_{k}"] = fmean(
                pass_at_k(len(group), sum(e.grounded for e in group), k)
                for group in by_task.values()
            )
    out |= {
        "reward": figures["reward"],
        "tool_calls": calls,
        "tool_call_validity": valid / calls if calls else 0.0,
        "tool_error_rate": failed / valid if valid else 0.0,
        "turns": figures["turns"],
        "tokens_per_episode": figures["generated_tokens"],
        "peak_context": figures["peak_context"],
        "compactions": figures["compactions"] / len(episodes),
    }
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}
