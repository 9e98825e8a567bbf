"""Tool latency hidden by concurrency: a batch of episodes whose tools each take
--latency seconds, run through the harness executor concurrently and one at a time.

    python bench/slow_tools.py                       # 64 episodes x 2 calls, 0.2 s per call
    python bench/slow_tools.py --episodes 128 --calls 3 --latency 0.5

Calls within an episode stay in order (tools may be stateful), so the concurrent batch
ideally takes calls x latency, whatever the number of episodes.
"""

from __future__ import annotations

import argparse
import time

from agentrl.harness.executor import InProcessExecutor
from agentrl.tools.executor import ToolSet
from agentrl.tools.schema import Surface, canonical_schema


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=64)
    args = parser.parse_args()

    def slow_lookup(key: str) -> str:
        """A remote lookup that takes a while.

        Args:
            key: What to look up.
        """
        time.sleep(args.latency)
        return key.upper()

    surface = Surface.canonical(canonical_schema(slow_lookup))
    tools = ToolSet({"slow_lookup": slow_lookup}, {"slow_lookup": surface})
    work = [(tools, [("slow_lookup", {"key": f"k{i}"})] * args.calls) for i in range(args.episodes)]
    executor = InProcessExecutor(args.workers, timeout_s=10 * args.latency + 1)
    started = time.perf_counter()
    executor.run(work)
    concurrent = time.perf_counter() - started
    started = time.perf_counter()
    for item in work:
        executor.run([item])
    serial = time.perf_counter() - started
    executor.close()
    ideal = args.calls * args.latency
    print(
        f"episodes={args.episodes} calls={args.calls} latency={args.latency}s workers={args.workers}"
    )
    print(
        f"concurrent={concurrent:.2f}s (ideal {ideal:.2f}s) serial={serial:.2f}s speed-up={serial / concurrent:.1f}x"
    )


if __name__ == "__main__":
    main()
