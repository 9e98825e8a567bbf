"""Eval traces in the MLflow UI, looked at in a real browser: a few greedy episodes of a
checkpoint logged as the eval stage logs them, a real ``mlflow server``, and screenshots
of the experiment's Traces view by headless Chromium (Debian's ``chromium`` package,
driven by playwright).

    apt-get install chromium && pip install -e '.[bench]'
    python bench/trace_view.py --model models/sft --split test --n 4

Prints each trace's latency as the server reports it next to the seconds its generation
and tool spans cover, and writes ``<out>/traces.png`` (the list: the Duration column) and
``<out>/trace.png`` (the first trace opened: the span tree with each turn's, generation's
and tool call's seconds). Look at them: seconds, not the milliseconds of a replay.
Simplification, stated: the episodes of the batch are generated together, so their
generation spans are the batch's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrl.chat import get_format  # noqa: E402
from agentrl.config import load_params  # noqa: E402
from agentrl.dataset import iter_records  # noqa: E402
from agentrl.envs.registry import load_registry  # noqa: E402
from agentrl.eval.traces import log_episode_trace  # noqa: E402
from agentrl.harness.build import build_engine  # noqa: E402
from agentrl.harness.loop import Harness  # noqa: E402
from agentrl.precision import stage_precision  # noqa: E402


def mlflow_server(store: Path, port: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
               str(port), "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
               "--default-artifact-root", str(store / "artifacts")]  # fmt: skip
    proc = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    for _ in range(120):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(1)
    sys.exit(f"mlflow server did not start: {log.read_text()[-2000:]}")


def screenshots(browser: str, url: str, first_task: str, out: Path) -> None:
    """The Traces list, then the trace of ``first_task`` opened, as a person sees them."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=browser, args=["--no-sandbox"])
        page = chromium.new_page(viewport={"width": 1800, "height": 1000})
        page.goto(url)
        page.get_by_text(first_task).first.wait_for(timeout=60_000)
        for button in ("Got it", "Close"):  # first-visit tip, the assistant panel
            found = page.get_by_role("button", name=button)
            if found.count():
                found.first.click()
        page.wait_for_timeout(1000)
        page.screenshot(path=out / "traces.png")
        page.get_by_text(first_task).first.click()
        page.get_by_text("generate").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=out / "trace.png")
        chromium.close()
    print(f"{out}/traces.png, {out}/trace.png: the Traces view of {url}, and one trace")


def main() -> None:
    import mlflow

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/sft"))
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--port", type=int, default=5077)
    parser.add_argument("--out", type=Path, default=Path("runs/trace_view"))
    args = parser.parse_args()
    browser = shutil.which("chromium") or sys.exit("no chromium here: apt-get install chromium")
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    params = load_params(args.params)
    fmt = get_format(params.model.format)
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    precision = stage_precision(params.base.precision, params.file)
    harness_cfg = params.harness.model_copy(update={"temperature": 0.0})
    engine, tokenizer = build_engine(harness_cfg, args.model, fmt, precision)
    records = list(iter_records(Path(params.base.paths.data) / "synth", args.split, args.n))
    harness = Harness(engine, tokenizer, fmt, registry, harness_cfg)
    episodes = harness.run(records, seed=params.base.seed)
    harness.close()
    print(f"harness: generation {harness.seconds['generate']:.1f} s for the batch of "
          f"{len(episodes)}, tools {harness.seconds['tools']:.3f} s")  # fmt: skip

    server = mlflow_server(args.out, args.port, args.out / "mlflow.log")
    try:
        url = f"http://127.0.0.1:{args.port}"
        mlflow.set_tracking_uri(url)
        experiment = mlflow.set_experiment("trace-view")
        with mlflow.start_run(run_name="eval"):
            for episode in episodes:
                log_episode_trace(episode, fmt, {"checkpoint": args.model.name,
                                                 "split": args.split, "variant": "greedy"})  # fmt: skip
        mlflow.flush_trace_async_logging()
        traces = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list")
        for trace in sorted(traces, key=lambda t: t.info.request_time):
            spans = trace.data.spans
            generate = sum((s.end_time_ns - s.start_time_ns) for s in spans if s.span_type == "LLM")
            tools = sum((s.end_time_ns - s.start_time_ns) for s in spans if s.span_type == "TOOL")
            print(f"{trace.info.tags.get('mlflow.traceName', '')}: latency "
                  f"{trace.info.execution_time_ms / 1000:.2f} s (generation spans "
                  f"{generate / 1e9:.2f} s, tool spans {tools / 1e9:.4f} s, "
                  f"{len(spans)} spans)")  # fmt: skip
        page = f"{url}/#/experiments/{experiment.experiment_id}/traces"
        screenshots(browser, page, episodes[0].messages[0]["content"][:40], args.out)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
