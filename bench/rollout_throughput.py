"""Rollout speed: generated tokens and episodes per second with N concurrent episodes
against a one-episode-at-a-time loop over the same hf engine and tasks.

    python bench/rollout_throughput.py                       # models/sft, eval/test, 64 episodes
    python bench/rollout_throughput.py --model models/sft --episodes 64 --sequential 16
    python bench/rollout_throughput.py --serve   # the same through `agentrl serve` + openai engine

The sequential loop runs only the first --sequential episodes (it is slow); rates are per
second either way, so the ratio compares like with like.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import torch

from agentrl.chat import get_format
from agentrl.chat.formats import IM_END
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.envs.registry import Registry
from agentrl.harness.engine import HFEngine
from agentrl.harness.loop import Harness
from agentrl.harness.openai_engine import OpenAIEngine
from agentrl.model.build import load_model_dir


def rate(harness: Harness, records: list[dict], batch: int) -> tuple[float, float]:
    started, tokens = time.perf_counter(), 0
    for start in range(0, len(records), batch):
        episodes = harness.run(records[start : start + batch], seed=start)
        tokens += sum(t.generated_tokens for e in episodes for t in e.turns)
    seconds = time.perf_counter() - started
    return tokens / seconds, len(records) / seconds


def start_server(model: str, params: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "agentrl.cli", "serve", "--model", model]
    command += ["--port", str(port), "--params", params]
    server = subprocess.Popen(command, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return server, url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit("agentrl serve did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", default="models/sft")
    parser.add_argument("--split", default="test")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--sequential", type=int, default=16)
    parser.add_argument("--serve", action="store_true", help="through agentrl serve over HTTP")
    parser.add_argument("--bucket", type=int, default=32, help="hf engine rows per generate call")
    args = parser.parse_args()
    params = load_params(args.params)
    fmt = get_format(params.model.format)
    model, tokenizer = load_model_dir(Path(args.model), fmt)
    records = list(iter_records(Path(params.base.paths.data) / "synth", args.split, args.episodes))
    server = None
    if args.serve:
        server, url = start_server(args.model, args.params)
        engine = OpenAIEngine(
            url, params.harness.engine_model, tokenizer.convert_tokens_to_ids(IM_END)
        )
    else:
        engine = HFEngine(model, tokenizer, bucket=args.bucket)
    harness = Harness(
        engine,
        tokenizer,
        fmt,
        Registry(params.synth.envs, params.synth.heldout_tool_share),
        params.harness,
    )
    where = "agentrl serve + openai engine" if args.serve else "hf engine in process"
    print(f"threads={torch.get_num_threads()} episodes={len(records)} model={args.model} ({where})")
    try:
        batch_tok, batch_eps = rate(harness, records, len(records))
        print(f"concurrent: {batch_tok:.0f} generated tok/s, {batch_eps:.2f} episodes/s")
        seq_tok, seq_eps = rate(harness, records[: args.sequential], 1)
        print(f"sequential: {seq_tok:.0f} generated tok/s, {seq_eps:.2f} episodes/s")
        print(f"speed-up: {batch_tok / seq_tok:.1f}x tokens, {batch_eps / seq_eps:.1f}x episodes")
    finally:
        harness.close()
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
