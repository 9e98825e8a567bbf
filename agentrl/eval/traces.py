"""Sample episodes as MLflow traces: one trace per episode, a span per assistant turn with a
child for its generation and one per tool call, at the times they really ran, so the
Traces and Overview views show where an episode spent its seconds.

The harness stamps every turn's generation and every tool call with the wall clock
(``TurnStats.generated``, ``TurnStats.tool_clocks``); the spans get those times. A turn
span runs from its generation's start to its last call's end; the episode's span from the
first turn to the last. The generation span holds the model's text; each tool span the
call (name, arguments) and what the tool answered. Calls are read back from the text with
the episode's chat format, in the order the harness executed them (parse errors first, as
the harness reports them). A turn without clocks (an episode read back from a file) is
logged at the time of logging, its duration not measured.

Simplification, stated: the episodes of a batch are generated together, so every turn of
one batch step has the same generation span (the batch's); the tool spans are per call.
"""

from __future__ import annotations

import time
from typing import Any

from agentrl.chat import ChatFormat, parse
from agentrl.harness.records import Episode, TurnStats


def _turns(episode: Episode) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(assistant message, the tool messages that answered it) in order."""
    turns: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for message in episode.messages:
        if message["role"] == "assistant":
            turns.append((message, []))
        elif message["role"] == "tool" and turns:
            turns[-1][1].append(message)
    return turns


def _clocks(stats: TurnStats | None, calls: int) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """The turn's generation clock and one clock per call; now for what was not stamped."""
    now = time.time_ns()
    generated = (stats.generated if stats else None) or (now, now)
    tools = list(stats.tool_clocks) if stats else []
    end = tools[-1][1] if tools else generated[1]
    return generated, tools + [(end, end)] * (calls - len(tools))


def log_episode_trace(episode: Episode, fmt: ChatFormat, tags: dict[str, str]) -> str:
    """Log ``episode`` as a trace under the active MLflow run; returns the trace id."""
    import mlflow
    from mlflow.entities import SpanType

    task = next((m["content"] for m in episode.messages if m["role"] == "user"), "")
    name = f"{tags.get('checkpoint', 'model')}/{tags.get('split', '')}/{episode.task_id}"
    turns = []
    for index, (assistant, responses) in enumerate(_turns(episode)):
        stats = episode.turns[index] if index < len(episode.turns) else None
        parsed = parse(assistant["content"], fmt, episode.tools)
        calls: list[tuple[str, Any]] = [("(unparseable call)", e) for e in parsed.errors]
        calls += [(c.name, c.arguments) for c in parsed.calls]
        calls = calls[: len(responses)]
        turns.append((assistant, responses, stats, calls, *_clocks(stats, len(calls))))
    start = turns[0][4][0] if turns else time.time_ns()
    end = max([start, *(t[5][-1][1] if t[5] else t[4][1] for t in turns)])
    root = mlflow.start_span_no_context(
        name, SpanType.AGENT, inputs={"task": task, "tools": [t["function"]["name"]
                                                             for t in episode.tools]},
        tags=tags, start_time_ns=start,
    )  # fmt: skip
    for index, (assistant, responses, stats, calls, generated, tools) in enumerate(turns):
        turn_end = tools[-1][1] if tools else generated[1]
        turn = mlflow.start_span_no_context(
            f"turn {index + 1}", SpanType.CHAIN, parent_span=root,
            inputs={"context_tokens": stats.prompt_tokens if stats else None},
            start_time_ns=generated[0],
        )  # fmt: skip
        llm = mlflow.start_span_no_context(
            "generate", SpanType.LLM, parent_span=turn, start_time_ns=generated[0]
        )
        figures = {"generated_tokens": stats.generated_tokens, "cut_off": stats.cut_off,
                   "call_errors": dict(stats.call_errors)} if stats else {}  # fmt: skip
        llm.end(
            outputs={"text": assistant["content"]}, attributes=figures, end_time_ns=generated[1]
        )
        for (tool, arguments), response, clock in zip(calls, responses, tools, strict=False):
            call = mlflow.start_span_no_context(
                str(tool), SpanType.TOOL, parent_span=turn, inputs={"arguments": arguments},
                start_time_ns=clock[0],
            )  # fmt: skip
            call.end(outputs={"response": response["content"]}, end_time_ns=clock[1])
        turn.end(outputs={"calls": len(calls)}, end_time_ns=turn_end)
    root.end(
        outputs={"end": episode.end_reason, "verdict": episode.verdict},
        attributes={"success": episode.success, "grounded": episode.grounded,
                    "reward": episode.reward} | tags,
        end_time_ns=end,
    )  # fmt: skip
    return root.trace_id
