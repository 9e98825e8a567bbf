"""Trajectories in the transformers/OpenAI chat form, made by executing the real tools.

The oracle teacher follows an environment's ``solve`` generator; every observation it sees
comes from the real tool. With ``recovery`` it first makes one realistic mistake (a wrong
argument name -- the dominant failure of tiny models: 249 of 400 eval tasks failed on it
in one study -- an unknown tool
name, or a missing argument), receives the real error, and then makes the corrected call,
so later RL has recoveries to reinforce.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.envs.base import Call, Environment, TaskSpec
from agentrl.envs.verify import ANSWER_MARK
from agentrl.harness.context import SUMMARY_REQUEST, restart
from agentrl.tools.executor import ToolSet
from agentrl.tools.vocab import VocabPartition

RECOVERY_KINDS = ("wrong_arg_name", "wrong_arg_name", "unknown_tool", "missing_argument")


@dataclass
class Trajectory:
    messages: list[dict[str, Any]]
    observations: list[str] = field(default_factory=list)
    recovery: dict[str, Any] | None = None
    final_state: Any = None


def assistant_call(content: str, name: str, arguments: dict[str, Any], turn: int) -> dict[str, Any]:
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
    return {"role": "assistant", "content": content, "tool_calls": [call]}


def tool_message(name: str, content: str, turn: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{turn}", "name": name, "content": content}


def spoken_thought(call: Call, thoughts: str) -> str:
    """The text before a call under a split's ``thoughts``: ``brief``, its thought; ``plan``,
    the steps still left after it too, so a model reads where a chain stops instead of
    counting the steps it has taken; ``restate``, the task left from this call on in the
    prompt's words with what is found filled in, so each step reads off the last restated
    task and the next restatement copies it less one step, at any depth (``brief`` where
    the family writes none).

    >>> call = Call("lookup", {}, "I need the capital of Ulm.", ("the mayor of that",),
    ...             "the mayor of the capital of Ulm")
    >>> spoken_thought(call, "plan")
    'I need the capital of Ulm. Left after this: the mayor of that.'
    >>> spoken_thought(Call("lookup", {}, "I need the capital of Ulm."), "plan")
    'I need the capital of Ulm. This is the last step.'
    >>> spoken_thought(call, "restate")
    'Left: the mayor of the capital of Ulm. I need the capital of Ulm.'
    >>> spoken_thought(call, "brief")
    'I need the capital of Ulm.'
    """
    if thoughts == "restate" and call.rest:
        return f"Left: {call.rest}. {call.thought}"
    if thoughts != "plan":
        return call.thought
    if call.remaining:
        return f"{call.thought} Left after this: {'; '.join(call.remaining)}."
    return f"{call.thought} This is the last step."


def final_message(answer: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": f"{ANSWER_MARK} {answer}"}


def _mistake(
    rng: random.Random,
    tools: ToolSet,
    partition: VocabPartition,
    canonical: str,
    name: str,
    args: dict[str, Any],
) -> tuple[str, str, dict[str, Any], str] | None:
    """(kind, wrong name, wrong args, the fix explained) or None when no mistake fits."""
    kinds = list(RECOVERY_KINDS)
    rng.shuffle(kinds)
    offered = {s.name for s in tools.surfaces.values()}
    for kind in kinds:
        if kind == "wrong_arg_name" and args:
            arg = rng.choice(list(args))
            canon_arg = {v: k for k, v in tools.surfaces[canonical].args.items()}[arg]
            pool = [
                *partition.args.get(canonical, {}).get(canon_arg, {}).get("train", []),
                canon_arg,
                f"{arg}_value",
            ]
            wrong = [
                a
                for a in pool
                if a not in args and a not in tools.surfaces[canonical].args.values()
            ]
            if wrong:
                bad = rng.choice(wrong)
                bad_args = {(bad if k == arg else k): v for k, v in args.items()}
                return kind, name, bad_args, f"The argument is called '{arg}', not '{bad}'."
        if kind == "unknown_tool":
            pool = [*partition.names.get(canonical, {}).get("train", []), canonical, f"{name}_tool"]
            wrong = [n for n in pool if n not in offered]
            if wrong:
                bad = rng.choice(wrong)
                return kind, bad, args, f"The tool is called '{name}', not '{bad}'."
        if kind == "missing_argument" and len(args) > 1:
            arg = rng.choice(list(args))
            return (
                kind,
                name,
                {k: v for k, v in args.items() if k != arg},
                f"I forgot the argument '{arg}'.",
            )
    return None


def oracle_trajectory(
    env: Environment,
    task: TaskSpec,
    tools: ToolSet,
    rng: random.Random,
    partition: VocabPartition,
    recovery: bool,
    thoughts: str = "brief",
) -> Trajectory:
    """Run the oracle against the real tools; optionally one mistake and its recovery;
    ``thoughts`` words the text before each call (see :func:`spoken_thought`)."""
    traj = Trajectory(messages=[{"role": "user", "content": task.prompt}])
    solver = env.solve(task)
    mistake_at = rng.randrange(task.depth) if recovery and task.depth > 0 else -1
    turn = 0
    try:
        call: Call = next(solver)
        while True:
            name, args = tools.surface_call(call.tool, call.args)
            if turn == mistake_at and traj.recovery is None:
                wrong = _mistake(rng, tools, partition, call.tool, name, args)
                if wrong is not None:
                    kind, bad_name, bad_args, fix = wrong
                    observed = tools.call(bad_name, bad_args)
                    traj.messages.append(
                        assistant_call(spoken_thought(call, thoughts), bad_name, bad_args, turn)
                    )
                    traj.messages.append(tool_message(bad_name, observed.text, turn))
                    traj.observations.append(observed.text)
                    traj.recovery = {"turn": turn, "kind": kind, "error": observed.error}
                    turn += 1
                    call = replace(call, thought=fix)
                    continue
            observed = tools.call(name, args)
            traj.messages.append(assistant_call(spoken_thought(call, thoughts), name, args, turn))
            traj.messages.append(tool_message(name, observed.text, turn))
            traj.observations.append(observed.text)
            turn += 1
            call = solver.send(observed.text)
    except StopIteration as stop:
        traj.messages.append(final_message(stop.value))
    return traj


def progress_summary(observations: list[str]) -> str:
    """The oracle's progress summary: every result so far, verbatim (a restart keeps
    nothing else, so exact values must survive in it)."""
    return f"Results so far: {'; '.join(o.strip() for o in observations)}. Next: continue the task."


def restart_contexts(
    messages: list[dict[str, Any]], rng: random.Random
) -> list[list[dict[str, Any]]] | None:
    """A trajectory as the ``summary`` harness would see it when it restarts after a
    random turn's tool responses (never the last): the history with the summary request
    answered by a progress summary, then the task with that summary followed by the rest
    of the episode. None when the episode has fewer than two calling turns."""
    cuts = [
        i + 1
        for i, m in enumerate(messages[:-1])
        if m["role"] == "tool" and messages[i + 1]["role"] == "assistant"
    ]
    if len(cuts) < 2:
        return None
    cut = rng.choice(cuts[:-1])
    summary = progress_summary([m["content"] for m in messages[:cut] if m["role"] == "tool"])
    before = [
        *messages[:cut],
        {"role": "user", "content": SUMMARY_REQUEST},
        {"role": "assistant", "content": summary},
    ]
    return [before, restart(messages[0], summary) + messages[cut:]]
