"""What the Prefect flow costs over plain `dvc repro`, on a DAG that is up to date.

    python bench/flow_overhead.py            # needs a finished `dvc repro` in this checkout
    python bench/flow_overhead.py --repeat 5

Times `dvc repro` (every stage skipped) against `python -m flows.pipeline run` (a task per
stage, each `dvc repro --single-item`, the MLflow parent run, the artifacts), both against
a real `prefect server` started here, so the flow pays no temporary-server start-up; the
server's own start-up is printed apart. Prints median seconds and the difference.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tempfile.mkdtemp(prefix="prefect-bench-")
    env = os.environ | {"PREFECT_HOME": home, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    started = time.perf_counter()
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    api = f"http://127.0.0.1:{port}/api"
    while True:
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    print(f"prefect server healthy after {time.perf_counter() - started:.1f} s")
    env["PREFECT_API_URL"] = api
    try:
        plain = [timed(["dvc", "repro"], env) for _ in range(args.repeat)]
        flow = [
            timed([sys.executable, "-m", "flows.pipeline", "run"], env) for _ in range(args.repeat)
        ]
    finally:
        os.killpg(server.pid, 15)
    p, f = statistics.median(plain), statistics.median(flow)
    print(
        f"dvc repro (up to date):          {p:.1f} s  (runs: {', '.join(f'{x:.1f}' for x in plain)})"
    )
    print(
        f"flows.pipeline run (up to date): {f:.1f} s  (runs: {', '.join(f'{x:.1f}' for x in flow)})"
    )
    print(f"flow overhead: {f - p:+.1f} s per pipeline run")


if __name__ == "__main__":
    main()
