"""The local verifier of one sampled turn against the expert's action at the same state
(PivotRL's functional reward): is what the policy wrote *worth the same* as what the
expert did there, not does it read the same.

- The expert called a tool: the turn counts when it is exactly one valid call and either
  names the expert's tool with the same arguments after normalisation (``same_call``:
  key order, case, whitespace and 2 vs 2.0 do not matter), or, executed on the state the
  expert's call met (the task's tools with the expert's earlier calls replayed), returns
  the expert's observation (``same_observation``: another spelling of the same query,
  ``"7*6"`` for ``"6 * 7"``).
- The expert answered: the turn counts when it makes no call and the task's verifier
  accepts its answer against the trajectory's observations (grounded in them, under
  ``rl.grounded_only``, through the reward as for episodes).
- Anything else scores 0: a call where the expert answered, an answer where it called,
  text the parser rejects, several calls, a call the tools refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrl.chat import ChatFormat, parse
from agentrl.dataset import expert_trajectory
from agentrl.envs.registry import Registry
from agentrl.envs.verify import verify
from agentrl.tools.sandboxes import SandboxSpec


@dataclass(frozen=True)
class TurnVerdict:
    success: bool
    grounded: bool
    reason: str  # same_call | same_observation | answer | what went wrong


def normalized(value: Any) -> Any:
    """An argument value as calls compare it: text case- and space-folded, numbers as floats.

    >>> normalized({"city": "  New   York ", "days": 2, "tags": ["A", 1.0]})
    {'city': 'new york', 'days': 2.0, 'tags': ['a', 1.0]}
    """
    if isinstance(value, dict):
        return {str(k): normalized(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    return " ".join(str(value).casefold().split())


def same_call(
    name: str, arguments: dict[str, Any], expert_name: str, expert_arguments: dict[str, Any]
) -> bool:
    """The same tool with the same arguments, up to order, case, spacing and number type.

    >>> same_call("lookup", {"b": 2, "a": "Paris"}, "lookup", {"a": "paris", "b": 2.0})
    True
    >>> same_call("lookup", {"a": "Paris"}, "search", {"a": "Paris"})
    False
    >>> same_call("lookup", {"a": "Paris"}, "lookup", {"a": "Paris", "b": 1})
    False
    """
    return name == expert_name and normalized(arguments) == normalized(expert_arguments)


def same_observation(observed: str, ok: bool, expert_observed: str) -> bool:
    """Executing the call gave what the expert's call gave (an error never counts).

    >>> same_observation("42", True, " 42\\n")
    True
    >>> same_observation("Error: unknown tool", False, "Error: unknown tool")
    False
    """
    return ok and observed.strip() == expert_observed.strip()


def judge_turn(
    text: str,
    record: dict[str, Any],
    history: list[dict[str, Any]],
    action: dict[str, Any],
    registry: Registry,
    fmt: ChatFormat,
    sandbox: SandboxSpec,
) -> TurnVerdict:
    """Score the sampled assistant ``text`` at the state ``history`` (the expert trajectory
    before its ``action``) of task ``record``; see the module docstring for the rule."""
    parsed = parse(text, fmt, record["tools"])
    calls, errors = parsed.calls, parsed.errors
    if not action.get("tool_calls"):
        if calls or errors:
            return TurnVerdict(False, False, "call_for_answer")
        return _judge_answer(text, record, history, registry, sandbox)
    if errors:
        return TurnVerdict(False, False, "invalid_call")
    if len(calls) != 1:
        return TurnVerdict(False, False, "answer_for_call" if not calls else "several_calls")
    call, expert = calls[0], action["tool_calls"][0]["function"]
    if same_call(call.name, call.arguments, expert["name"], expert["arguments"]):
        return TurnVerdict(True, True, "same_call")
    tools, box = registry.bind(record["env"], sandbox)
    try:
        _replay(tools, history)
        observed = tools.call(call.name, call.arguments)
    finally:
        box.close()
    expected = _observation_after(record, history)
    if same_observation(observed.text, observed.ok, expected):
        return TurnVerdict(True, True, "same_observation")
    return TurnVerdict(False, False, observed.error or "other_observation")


def _replay(tools: Any, history: list[dict[str, Any]]) -> None:
    """Run the expert's earlier calls, so stateful tools hold what they held at the turn."""
    for message in history:
        for call in message.get("tool_calls") or []:
            tools.call(call["function"]["name"], call["function"]["arguments"])


def _observation_after(record: dict[str, Any], history: list[dict[str, Any]]) -> str:
    """The tool message that followed the expert's action in its trajectory."""
    return expert_trajectory(record)[len(history) + 1]["content"]  # type: ignore[index]


def _judge_answer(
    text: str,
    record: dict[str, Any],
    history: list[dict[str, Any]],
    registry: Registry,
    sandbox: SandboxSpec,
) -> TurnVerdict:
    observations = [m["content"] for m in history if m["role"] == "tool"]
    snapshot = None
    if record["verifier"]["kind"] == "state":
        tools, box = registry.bind(record["env"], sandbox)
        try:
            _replay(tools, history)
            snapshot = box.snapshot()
        finally:
            box.close()
    verdict = verify(record["verifier"], text, observations, snapshot)
    return TurnVerdict(
        verdict.success, verdict.grounded, "answer" if verdict.success else verdict.reason
    )
