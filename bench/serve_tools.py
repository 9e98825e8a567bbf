"""A trained checkpoint served by vLLM with its hermes tool parser, driven by the openai
SDK as any client would drive it: how often the first ``tool_calls`` entry is the expert's
call, and how often whole episodes end in the right, grounded answer.

    make vllm
    python bench/serve_tools.py --model models/sft --splits test,heldout_tools --n 50

For each task of the first ``--n`` of each split: the task's ``tools`` and question go in
through ``chat.completions.create(..., tools=...)`` (temperature 0); every ``tool_calls``
entry runs on the task's real tools and goes back as a ``tool`` message; an answer (a reply
without calls) or ``harness.max_turns`` replies end the episode, which the task's verifier
scores as the eval does (grounded success). Prints per split: first call right (the
expert's tool with the same normalised arguments, or the same result on the task's
state), episodes answered, grounded success.

Simplifications, stated: the client keeps the whole conversation (no context strategy:
vLLM refuses a conversation past ``--max-model-len``, which ends the episode); a reply the
parser cannot read comes back as plain content and ends the episode as an answer, as in the
harness; vLLM serves in infra/vllm_serve.sh's dtype (bf16 on this CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentrl.config import load_params  # noqa: E402
from agentrl.dataset import iter_records  # noqa: E402
from agentrl.envs.registry import load_registry  # noqa: E402
from agentrl.envs.verify import verify  # noqa: E402
from agentrl.rl.turn_reward import same_call, same_observation  # noqa: E402
from agentrl.stats import wilson  # noqa: E402


def start(model: Path, port: int, log: Path) -> subprocess.Popen:
    command = [str(ROOT / "infra" / "vllm_serve.sh"), str(model), str(port)]  # hermes parser
    proc = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(2)
    sys.exit(f"vLLM did not start: {log.read_text()[-2000:]}")


def episode(client: openai.OpenAI, record: dict, registry, max_turns: int) -> dict:
    """One task through the client: first call right, answered, grounded success."""
    expert = next(m for m in record["messages"] if m.get("tool_calls"))["tool_calls"][0]
    expected = next(m for m in record["messages"] if m["role"] == "tool")["content"]
    tools, box = registry.bind(record["env"])
    messages: list = [record["messages"][0]]
    observations: list[str] = []
    first_right, answer = None, None
    try:
        for _ in range(max_turns):
            try:
                reply = client.chat.completions.create(
                    model="policy", messages=messages, tools=record["tools"], temperature=0,
                    max_tokens=192,
                ).choices[0].message  # fmt: skip
            except openai.BadRequestError:  # the conversation outgrew the served context
                break
            calls = reply.tool_calls or []
            if first_right is None:
                first_right = False
                if calls:
                    name, arguments = calls[0].function.name, calls[0].function.arguments
                    arguments = json.loads(arguments) if arguments else {}
                    fn = expert["function"]
                    first_right = same_call(name, arguments, fn["name"], fn["arguments"])
                    if not first_right:
                        fresh, fresh_box = registry.bind(record["env"])
                        seen = fresh.call(name, arguments)
                        fresh_box.close()
                        first_right = same_observation(seen.text, seen.ok, expected)
            messages.append(reply.model_dump(exclude_none=True))
            if not calls:
                answer = reply.content or ""
                break
            for call in calls:
                try:
                    arguments = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError as err:
                    arguments = f"bad JSON: {err}"
                seen = tools.call(call.function.name, arguments)
                observations.append(seen.text)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": seen.text})
        verdict = verify(record["verifier"], answer, observations, box.snapshot())
    finally:
        box.close()
    return {"first_right": bool(first_right), "answered": answer is not None,
            "grounded": verdict.grounded}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/sft"))
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--splits", default="test,heldout_tools")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--out", type=Path, default=Path("runs/serve_tools"))
    args = parser.parse_args()
    params = load_params(args.params)
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    args.out.mkdir(parents=True, exist_ok=True)
    proc = start(args.model, args.port, args.out / "vllm.log")
    results = {}
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key="unused")
        for split in args.splits.split(","):
            records = list(iter_records(Path(params.base.paths.data) / "synth", split, args.n))
            began = time.perf_counter()
            rows = [episode(client, r, registry, params.harness.max_turns) for r in records]
            seconds = time.perf_counter() - began
            results[split] = {key: sum(r[key] for r in rows) for key in rows[0]}
            results[split] |= {"tasks": len(rows), "seconds": round(seconds, 1)}
            print(f"{split} ({len(rows)} tasks, {seconds:.0f} s): first call right "
                  f"{wilson(results[split]['first_right'], len(rows))}, answered "
                  f"{results[split]['answered']}, grounded success "
                  f"{wilson(results[split]['grounded'], len(rows))}", flush=True)  # fmt: skip
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    (args.out / "serve_tools.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
