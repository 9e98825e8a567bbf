"""The LLM teacher over a real HTTP OpenAI-compatible endpoint, driven by a scripted policy.

The policy is scripted (it reads the arithmetic from the prompt); the HTTP server, the
client, tool execution and rejection sampling are the real ones.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import read_split

from agentrl.config import SynthSection
from agentrl.synth.pipeline import SynthError, build_registry, synthesize


class ScriptedChat(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    def _send(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions" and body["model"] == "scripted"
        messages, tool = body["messages"], body["tools"][0]["function"]
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        a, op, b = re.match(r"What is (\d+) ([-+*]) (\d+)\?", prompt).groups()
        if messages[-1]["role"] == "tool":
            # a teacher that is wrong whenever the first operand is odd: rejection must catch it
            answer = messages[-1]["content"] if int(a) % 2 == 0 else "1"
            message = {"role": "assistant", "content": f"Answer: {answer}"}
        else:
            arg = next(iter(tool["parameters"]["properties"]))
            call = {
                "id": "c0",
                "type": "function",
                "function": {"name": tool["name"], "arguments": json.dumps({arg: f"{a} {op} {b}"})},
            }
            message = {"role": "assistant", "content": "Let me compute.", "tool_calls": [call]}
        self._send({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


@pytest.fixture(scope="module")
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_teacher_trajectories_are_executed_and_rejection_sampled(
    endpoint: str, tmp_path: Path
) -> None:
    cfg = SynthSection.model_validate_json(
        json.dumps(
            {
                "teacher": {"kind": "openai", "base_url": endpoint, "model": "scripted"},
                "splits": {
                    "sft": {
                        "n": 12,
                        "families": ["calculator"],
                        "difficulty": {"num_tools": [1, 1]},
                    }
                },
            }
        )
    )
    stats = synthesize(cfg, 0, tmp_path, build_registry(cfg), progress=False)
    assert stats["sft"]["rejections"]["answer"] > 0  # the odd-operand answers
    records = read_split(tmp_path, "sft")
    assert len(records) == 12
    for record in records:
        assert record["meta"]["teacher"] == "openai"
        assert record["messages"][1]["content"] == "Let me compute."
        assert record["messages"][-1]["content"] == f"Answer: {record['verifier']['answer']}"


def test_unreachable_teacher_fails_before_any_sample(tmp_path: Path) -> None:
    from conftest import free_port

    cfg = SynthSection.model_validate_json(
        json.dumps(
            {
                "teacher": {
                    "kind": "openai",
                    "base_url": f"http://127.0.0.1:{free_port()}/v1",
                    "model": "m",
                    "timeout_s": 2,
                },
                "max_attempts_factor": 1,
                "splits": {"sft": {"n": 2, "families": ["calculator"]}},
            }
        )
    )
    with pytest.raises(
        SynthError, match=r"teacher endpoint http://127\.0\.0\.1:\d+/v1 is not reachable"
    ):
        synthesize(cfg, 0, tmp_path, build_registry(cfg), progress=False)
