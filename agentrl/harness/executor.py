"""Run the tool calls of a batch concurrently, one task per episode (calls within an
episode stay in order: tools may be stateful), each call bounded by a wall timeout.

``inprocess`` executor: pure Python tools in threads. A call that overruns its timeout
becomes an error observation and the batch moves on; the thread is abandoned, which is
only safe for tools without side effects outside their episode (sandboxed executors for
code-running tools are separate). Every observation carries the wall-clock span its call
ran in (``Observation.clock``), for traces that tell where an episode spent its time.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any

from agentrl.tools.executor import Observation, ToolSet

Call = tuple[Any, Any]  # (name, arguments) as the model wrote them


class InProcessExecutor:
    def __init__(self, workers: int, timeout_s: float):
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tool")
        self.timeout_s = timeout_s

    def _one(self, tools: ToolSet, name: Any, arguments: Any) -> Observation:
        started = time.time_ns()
        future: Future[Observation] = self.pool.submit(tools.call, name, arguments)
        try:
            observation = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            observation = Observation(
                f"Error: tool '{name}' timed out after {self.timeout_s:g} s.", False, "timeout"
            )
        return replace(observation, clock=(started, time.time_ns()))

    def _episode(self, tools: ToolSet, calls: list[Call]) -> list[Observation]:
        return [self._one(tools, name, arguments) for name, arguments in calls]

    def run(self, work: list[tuple[ToolSet, list[Call]]]) -> list[list[Observation]]:
        """Observations per episode, in call order; episodes run side by side."""
        with ThreadPoolExecutor(max_workers=max(1, len(work))) as episodes:
            futures = [episodes.submit(self._episode, tools, calls) for tools, calls in work]
            return [f.result() for f in futures]

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
