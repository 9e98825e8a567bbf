"""``agentrl chat``: a terminal session with a checkpoint and the real tools of a task family.

    agentrl chat --model models/rl --family convert
    agentrl chat --model models/sft --family store --context summary

The session binds one world of the family (a task the sampler draws for ``--split``,
``--index``: its facts, its tools under their names there) and runs the agent harness on
each question typed: the same loop, engine, sandbox and context strategy as rollouts and
eval. Each tool call and its result print as they happen, then the answer and where the
seconds went (generation, tools). An empty line or end of input ends the session.

Simplifications, stated: every question is an episode of its own on a fresh copy of the
world (the model does not see earlier questions, and a stateful tool starts over), as the
model was trained; nothing is verified (the verifier kind ``none``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from agentrl.chat import ChatFormat, parse
from agentrl.config import SPLITS, ConfigError, SplitSection, TeacherSection
from agentrl.envs.registry import Registry
from agentrl.harness.loop import Harness
from agentrl.harness.records import Episode

TRIES = 50  # samples drawn until the sampler accepts one (it rejects few)


def chat_world(
    registry: Registry, family: str, split: str, index: int, seed: int, params_file: str
) -> dict[str, Any]:
    """A verified task of ``family`` (the first the sampler accepts from ``index`` on): its
    world and tools serve the session, its question is the example shown."""
    from agentrl.synth.sampler import Sampler

    if split not in SPLITS:
        raise ConfigError(f"--split: unknown split '{split}' (known: {', '.join(SPLITS)})")
    if family not in registry.envs:
        known = ", ".join(registry.envs)
        raise ConfigError(f"--family: unknown family '{family}' (known: {known})")
    sampler = Sampler(registry, seed, TeacherSection())
    for k in range(index, index + TRIES):
        outcome = sampler.sample(split, SplitSection(n=1), [family], k)
        if outcome.record is not None:
            return outcome.record
    raise ConfigError(f"{params_file}: no {family} task accepted at --index {index}..{k}")


def chat_task(world: dict[str, Any], question: str, number: int) -> dict[str, Any]:
    """The record the harness runs for one typed question on the session's world."""
    return {
        "id": f"chat-{number}",
        "messages": [{"role": "user", "content": question}],
        "tools": world["tools"],
        "env": world["env"],
        "verifier": {"kind": "none"},
    }


class ChatPrinter:
    """Prints a running episode's turns as the harness reports them (``Harness.on_event``)."""

    def __init__(self, console: Console, fmt: ChatFormat):
        self.console, self.fmt = console, fmt

    def __call__(self, event: str, episode: Episode) -> None:
        if event == "turn":
            text = episode.messages[-1]["content"]
            parsed = parse(text, self.fmt, episode.tools)
            turn = episode.turns[-1]
            seconds = (turn.generated[1] - turn.generated[0]) / 1e9 if turn.generated else 0.0
            if not parsed.calls and not parsed.errors:
                self.console.print(f"[bold]agent[/bold] ({seconds:.1f} s): {escape(text.strip())}")
                return
            if parsed.content.strip():
                self.console.print(f"[bold]agent[/bold]: {escape(parsed.content.strip())}")
            for call in parsed.calls:
                arguments = json.dumps(call.arguments, ensure_ascii=False)
                self.console.print(
                    f"  call {escape(call.name)} {escape(arguments)} ({seconds:.1f} s)"
                )
            for error in parsed.errors:
                self.console.print(f"  call (unparseable): {escape(str(error))}")
        elif event == "tools":
            turn = episode.turns[-1]
            responses = episode.messages[len(episode.messages) - turn.calls :]
            for message, clock in zip(responses, turn.tool_clocks, strict=False):
                seconds = (clock[1] - clock[0]) / 1e9
                self.console.print(f"  result {escape(message['content'])} ({seconds:.3f} s)")


def describe(world: dict[str, Any]) -> list[str]:
    """The session's tools, one line each, and the example question."""
    lines = [f"tools of this {world['family']} world:"]
    for tool in world["tools"]:
        fn = tool["function"]
        lines.append(f"  {fn['name']}({', '.join(fn['parameters']['properties'])}): "
                     f"{fn['description']}")  # fmt: skip
    lines.append(f"for example: {world['messages'][0]['content']}")
    return lines


def run_session(
    harness: Harness,
    world: dict[str, Any],
    console: Console,
    read: Callable[[str], str] = input,
    seed: int = 0,
) -> list[Episode]:
    """Ask, run, print until an empty line or end of input; the episodes, in order."""
    for line in describe(world):
        console.print(escape(line))
    harness.on_event = ChatPrinter(console, harness.fmt)
    episodes = []
    while True:
        try:
            question = read("you> ").strip()
        except EOFError:
            break
        if not question:
            break
        before = dict(harness.seconds)
        (episode,) = harness.run([chat_task(world, question, len(episodes))], seed=seed)
        episodes.append(episode)
        took = {k: v - before.get(k, 0.0) for k, v in harness.seconds.items()}
        if episode.end_reason != "answer":
            console.print(f"(no answer: the episode ended at {episode.end_reason})")
        console.print(
            f"[dim]{len(episode.turns)} turns: generation {took.get('generate', 0.0):.1f} s, "
            f"tools {took.get('tools', 0.0):.3f} s[/dim]"
        )
    return episodes
