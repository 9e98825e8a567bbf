"""Eval traces tell time: the spans of an episode's trace sit at the times its turns were
generated and its tools ran (the harness's clock), not at the time of logging."""

from __future__ import annotations

import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import mlflow
from conftest import ScriptedEngine, oracle_script, read_split

from agentrl.chat import get_format, render_text
from agentrl.config import HarnessSection
from agentrl.envs.registry import Registry
from agentrl.eval.traces import log_episode_trace
from agentrl.harness.loop import Harness
from agentrl.model.tokenizer import train_tokenizer

GENERATION_S = 0.2


class SlowEngine(ScriptedEngine):
    """A scripted policy that takes GENERATION_S per batch, as a real model takes time."""

    def generate(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        time.sleep(GENERATION_S)
        return super().generate(prompts, sampling)


def test_spans_take_the_times_the_turns_and_calls_really_took(
    dataset: Path, tmp_path: Path
) -> None:
    fmt = get_format("hermes")
    records = [r for r in read_split(dataset, "sft") if r["env"]]
    record = next(r for r in records if sum(m["role"] == "assistant" for m in r["messages"]) >= 2)
    texts = [render_text(fmt, r["messages"], r["tools"])[0] for r in records]
    tokenizer = train_tokenizer(texts, fmt, vocab_size=1024)
    engine = SlowEngine(tokenizer, [oracle_script(fmt, record)])
    harness = Harness(engine, tokenizer, fmt, Registry(), HarnessSection(context_limit=4096))
    began = time.time_ns()
    (episode,) = harness.run([record])
    ended = time.time_ns()
    harness.close()
    assert episode.success and len(episode.turns) >= 2
    assert "generated" not in episode.to_json()["turns"][0]  # wall clock stays out of files

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    with mlflow.start_run() as run:
        time.sleep(0.3)  # logged well after the episode: spans must not take this time
        tags = {"checkpoint": "sft", "split": "test", "variant": "greedy"}
        log_episode_trace(episode, fmt, tags)
    mlflow.flush_trace_async_logging()
    (trace,) = mlflow.search_traces(run_id=run.info.run_id, return_type="list")
    assert {k: trace.info.tags[k] for k in tags} == tags
    spans = {s.span_id: s for s in trace.data.spans}
    root = next(s for s in spans.values() if s.parent_id is None)
    assert began <= root.start_time_ns and root.end_time_ns <= ended
    turns = sorted(
        (s for s in spans.values() if s.parent_id == root.span_id), key=lambda s: s.start_time_ns
    )
    assert [s.name for s in turns] == [f"turn {i + 1}" for i in range(len(episode.turns))]
    for turn, stats in zip(turns, episode.turns, strict=True):
        children = [s for s in spans.values() if s.parent_id == turn.span_id]
        (generate,) = [s for s in children if s.span_type == "LLM"]
        tools = sorted(
            (s for s in children if s.span_type == "TOOL"), key=lambda s: s.start_time_ns
        )
        assert (generate.start_time_ns, generate.end_time_ns) == stats.generated
        assert generate.end_time_ns - generate.start_time_ns >= GENERATION_S * 1e9
        assert len(tools) == stats.calls == len(stats.tool_clocks)
        for tool, clock in zip(tools, stats.tool_clocks, strict=True):
            assert (tool.start_time_ns, tool.end_time_ns) == clock
            assert generate.end_time_ns <= tool.start_time_ns <= tool.end_time_ns
        assert turn.start_time_ns == generate.start_time_ns
        assert turn.end_time_ns == (tools[-1].end_time_ns if tools else generate.end_time_ns)
    assert all(a.end_time_ns <= b.start_time_ns for a, b in pairwise(turns))
    # the Overview's latency is the episode's: its generations at least, not the logging
    took_ms = trace.info.execution_time_ms
    assert took_ms >= len(episode.turns) * GENERATION_S * 1000 - 1
    assert took_ms <= (ended - began) / 1e6 + 1
