"""LLM teacher through any OpenAI-compatible chat endpoint (vLLM, SGLang, a hosted API).

The teacher sees the task and the sample's tool schemas; its calls run on the real tools
and its trajectory goes through the same layered verification as the oracle's, so a
wrong or ungrounded answer is rejected (rejection sampling, as in APIGen).
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from agentrl.config import TeacherSection
from agentrl.envs.base import TaskSpec
from agentrl.envs.verify import ANSWER_MARK
from agentrl.synth.trajectory import Trajectory, assistant_call, tool_message
from agentrl.tools.executor import ToolSet

SYSTEM = (
    "You are a careful assistant that solves tasks with the given tools. Call tools to get "
    f"every fact you need; never guess. When done, reply with '{ANSWER_MARK} <answer>'."
)


class TeacherError(RuntimeError):
    """The endpoint failed or answered with something that is not a chat completion."""


def _wire(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our messages (arguments as objects) to the OpenAI wire form (arguments as JSON text)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.dumps(c["function"]["arguments"]),
                    },
                }
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


class OpenAITeacher:
    def __init__(self, cfg: TeacherSection):
        self.cfg = cfg
        key = os.environ.get(cfg.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(
            base_url=str(cfg.base_url).rstrip("/"), headers=headers, timeout=cfg.timeout_s
        )

    def check(self) -> None:
        """Fail before synthesis when the endpoint is down, instead of once per sample."""
        try:
            self.client.get("/models").raise_for_status()
        except httpx.HTTPError as err:
            raise TeacherError(
                f"teacher endpoint {self.cfg.base_url} is not reachable: {err}"
            ) from err

    @retry(
        retry=retry_if_exception_type(httpx.TransportError),
        stop=stop_after_attempt(3),
        wait=wait_exponential(min=0.5, max=8),
        reraise=True,
    )
    def _complete(
        self, messages: list[dict[str, Any]], schemas: list[dict[str, Any]], seed: int
    ) -> dict[str, Any]:
        body = {
            "model": self.cfg.model,
            "messages": [{"role": "system", "content": SYSTEM}, *_wire(messages)],
            "tools": schemas,
            "temperature": self.cfg.temperature,
            "seed": seed,
        }
        try:
            response = self.client.post("/chat/completions", json=body)
        except httpx.TransportError:
            raise
        except httpx.HTTPError as err:
            raise TeacherError(f"{self.cfg.base_url}: {err}") from err
        if response.status_code != 200:
            raise TeacherError(
                f"{self.cfg.base_url}: HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            return response.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError) as err:
            raise TeacherError(
                f"{self.cfg.base_url}: not a chat completion: {response.text[:200]}"
            ) from err

    def trajectory(self, task: TaskSpec, tools: ToolSet, seed: int) -> Trajectory:
        try:
            return self._trajectory(task, tools, seed)
        except httpx.HTTPError as err:  # still failing after retries
            raise TeacherError(f"{self.cfg.base_url}: {err}") from err

    def _trajectory(self, task: TaskSpec, tools: ToolSet, seed: int) -> Trajectory:
        traj = Trajectory(messages=[{"role": "user", "content": task.prompt}])
        for turn in range(self.cfg.max_turns):
            message = self._complete(traj.messages, tools.schemas, seed + turn)
            calls = message.get("tool_calls") or []
            if not calls:
                traj.messages.append({"role": "assistant", "content": message.get("content") or ""})
                return traj
            call = calls[0]["function"]  # one call per turn, like the oracle
            raw = call.get("arguments", "{}")
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except json.JSONDecodeError:
                args = raw
            observed = tools.call(call.get("name"), args)
            traj.messages.append(
                assistant_call(message.get("content") or "", call.get("name"), args, turn)
            )
            traj.messages.append(tool_message(str(call.get("name")), observed.text, turn))
            traj.observations.append(observed.text)
        return traj
