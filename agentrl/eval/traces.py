"""Sample episodes as MLflow traces: one trace per episode, a span per assistant turn and
a child span per tool call, so a person can read an episode turn by turn in the UI.

The turn span holds the model's text; each tool span the call (name, arguments) and what
the tool answered. Calls are read back from the text with the episode's chat format, in
the order the harness executed them (parse errors first, as the harness reports them).
"""

from __future__ import annotations

from typing import Any

from agentrl.chat import ChatFormat, parse
from agentrl.harness.records import Episode


def _turns(episode: Episode) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(assistant message, the tool messages that answered it) in order."""
    turns: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for message in episode.messages:
        if message["role"] == "assistant":
            turns.append((message, []))
        elif message["role"] == "tool" and turns:
            turns[-1][1].append(message)
    return turns


def log_episode_trace(episode: Episode, fmt: ChatFormat, tags: dict[str, str]) -> str:
    """Log ``episode`` as a trace under the active MLflow run; returns the trace id."""
    import mlflow
    from mlflow.entities import SpanType

    task = next((m["content"] for m in episode.messages if m["role"] == "user"), "")
    name = f"{tags.get('checkpoint', 'model')}/{tags.get('split', '')}/{episode.task_id}"
    with mlflow.start_span(name=name, span_type=SpanType.AGENT) as root:
        root.set_inputs({"task": task, "tools": [t["function"]["name"] for t in episode.tools]})
        for index, (assistant, responses) in enumerate(_turns(episode)):
            stats = episode.turns[index] if index < len(episode.turns) else None
            with mlflow.start_span(name=f"turn {index + 1}", span_type=SpanType.LLM) as span:
                span.set_inputs({"context_tokens": stats.prompt_tokens if stats else None})
                span.set_outputs({"text": assistant["content"]})
                if stats is not None:
                    span.set_attributes(
                        {"generated_tokens": stats.generated_tokens, "cut_off": stats.cut_off,
                         "call_errors": dict(stats.call_errors)}
                    )  # fmt: skip
                parsed = parse(assistant["content"], fmt, episode.tools)
                calls: list[tuple[str, Any]] = [("(unparseable call)", e) for e in parsed.errors]
                calls += [(c.name, c.arguments) for c in parsed.calls]
                for (tool, arguments), response in zip(calls, responses, strict=False):
                    with mlflow.start_span(name=str(tool), span_type=SpanType.TOOL) as call:
                        call.set_inputs({"arguments": arguments})
                        call.set_outputs({"response": response["content"]})
        root.set_outputs({"end": episode.end_reason, "verdict": episode.verdict})
        root.set_attributes(
            {"success": episode.success, "grounded": episode.grounded, "reward": episode.reward}
            | tags
        )
        mlflow.update_current_trace(tags=tags)
        trace_id = root.trace_id
    return trace_id
