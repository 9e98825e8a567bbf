"""Compositions across families (BUTTON-style): a knowledge-base fact fed to arithmetic.

Depth = hops + operations, so ``heldout_compose`` can ask for deeper chains than any
training task while every single step stays familiar.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from agentrl.envs.base import Call, Environment, Solver, TaskSpec, in_order
from agentrl.envs.families.calculator import (
    OPERATIONS,
    CalculatorEnv,
    CalculatorTools,
    evaluate,
    operation_steps,
    rest_of,
)
from agentrl.envs.families.knowledge_base import (
    KnowledgeBaseEnv,
    KnowledgeBaseTools,
    build_chain,
    follow_path,
    question,
)
from agentrl.envs.world import World
from agentrl.tools.vocab import ToolVocab


class ComposeTools(KnowledgeBaseTools, CalculatorTools):
    TOOLS = ("lookup", "search_entities", "calculate")


class ComposeEnv(Environment):
    name = "compose"
    toolbox = ComposeTools
    vocab: ClassVar[dict[str, ToolVocab]] = KnowledgeBaseEnv.vocab | CalculatorEnv.vocab

    def sample(self, rng: random.Random, world: World, difficulty: dict[str, int]) -> TaskSpec:
        facts, start, path, fact = build_chain(rng, world, difficulty["hops"], numeric_end=True)
        steps = []
        value: Any = fact
        for _ in range(difficulty["ops"]):
            symbol = rng.choice(list(OPERATIONS))
            steps.append([symbol, world.number(2, 30) if symbol == "*" else world.number(2, 99)])
            value = evaluate(f"{value} {symbol} {steps[-1][1]}")
        parts = in_order(*operation_steps(steps))
        return TaskSpec(
            prompt=f"Take {question(path, start)} from the knowledge base, {parts}. What is the result?",
            state={"facts": facts, "start": start, "path": path, "steps": steps},
            verifier={"kind": "numeric", "answer": value, "rtol": 1e-6, "atol": 1e-6},
            needed_tools=["lookup", "calculate"],
            depth=len(path) + len(steps),
        )

    def solve(self, task: TaskSpec) -> Solver:
        steps = task.state["steps"]
        current: Any = yield from follow_path(
            task.state["start"], task.state["path"], operation_steps(steps)
        )
        for i, (symbol, operand) in enumerate(steps):
            current = yield Call(
                "calculate",
                {"expression": f"{current} {symbol} {operand}"},
                f"Now compute with {current}.",
                operation_steps(steps[i + 1 :]),
                in_order(*rest_of(current, steps[i:])),
            )
        return str(current)
