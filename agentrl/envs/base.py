"""Environment = task generator + tools + verifier data + an oracle that solves its tasks.

Write a plugin by subclassing :class:`ToolBox` (tools are its methods, with type hints and
Google-style docstrings) and :class:`Environment` (``sample`` draws a task from a fresh
:class:`~agentrl.envs.world.World`; ``solve`` is a generator that yields :class:`Call`,
receives each real observation and returns the final answer; a call's ``remaining``, the
steps after it in words, is what a split with ``thoughts: plan`` writes, and a solver that
leaves it empty makes every call say it is the last step; its ``rest``, the task left from
this call on in the prompt's own words, is what ``thoughts: restate`` writes, and a solver
that leaves it empty gets the brief thought). Everything a task needs to
rebuild its tools lives in ``TaskSpec.state`` as plain JSON, so RL and eval can re-execute
the tools long after synthesis.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentrl.envs.world import World
from agentrl.tools.sandboxes import DEFAULT_SANDBOX, SandboxSpec
from agentrl.tools.vocab import ToolVocab


@dataclass(frozen=True)
class Call:
    """One canonical tool call the oracle makes, with the short reasoning before it and,
    in words, the steps the task still needs after it (a ``plan`` thought names them) and
    the task left from this call on, written as the prompt writes a task, with what the
    episode has found filled in (a ``restate`` thought says it)."""

    tool: str
    args: dict[str, Any]
    thought: str = ""
    remaining: tuple[str, ...] = ()
    rest: str = ""


def in_order(*parts: str) -> str:
    """Steps of a task joined as the prompts join them.

    >>> in_order("start with 4", "add 9", "multiply by 2")
    'start with 4, then add 9, then multiply by 2'
    """
    return ", then ".join(parts)


@dataclass
class TaskSpec:
    """A task as data: prompt, tool state, verifier spec, difficulty and oracle depth."""

    prompt: str
    state: dict[str, Any]
    verifier: dict[str, Any]
    needed_tools: list[str]
    depth: int
    atoms: dict[str, list[Any]] = field(default_factory=dict)


class ToolBox:
    """Tools of one family bound to one task's state. ``TOOLS`` names the tool methods."""

    TOOLS: ClassVar[tuple[str, ...]] = ()
    # where code-running tools of this episode run; Environment.bind sets it
    sandbox_spec: SandboxSpec = DEFAULT_SANDBOX

    def __init__(self, state: dict[str, Any]):
        self.state = state

    def functions(self) -> dict[str, Callable[..., Any]]:
        return {name: getattr(self, name) for name in self.TOOLS}

    def snapshot(self) -> Any:
        """Final state for state-checking verifiers; None when the tools are stateless."""
        return None

    def close(self) -> None:
        """Release what the episode held (a sandbox container); called when it ends."""


Solver = Generator[Call, str, str]


class Environment(ABC):
    """A family of tasks. ``bind({})`` must work: distractor tools run on an empty state."""

    name: ClassVar[str]
    toolbox: ClassVar[type[ToolBox]]
    vocab: ClassVar[dict[str, ToolVocab]] = {}

    def bind(self, state: dict[str, Any], sandbox: SandboxSpec = DEFAULT_SANDBOX) -> ToolBox:
        box = self.toolbox(state)
        box.sandbox_spec = sandbox
        return box

    @abstractmethod
    def sample(self, rng: random.Random, world: World, difficulty: dict[str, int]) -> TaskSpec:
        """Draw one task; every entity, value and number comes from ``world``."""

    @abstractmethod
    def solve(self, task: TaskSpec) -> Solver:
        """Oracle: yield calls, receive observation texts, return the answer text."""
