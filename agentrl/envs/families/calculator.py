"""Arithmetic calculator: chained operations, one tool call per operation.

Chaining forces the model to copy each intermediate result from the previous observation
into the next call: the copying skill a tiny from-scratch model had not learned by 3 M
training tokens, the wall of learning on this CPU.
"""

from __future__ import annotations

import ast
import operator
import random
from typing import Any, ClassVar

from agentrl.envs.base import Call, Environment, Solver, TaskSpec, ToolBox, in_order
from agentrl.envs.world import World
from agentrl.tools.executor import ToolError
from agentrl.tools.vocab import ToolVocab

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
OPERATIONS = {
    "+": ("add", "Add"),
    "-": ("subtract", "Subtract"),
    "*": ("multiply by", "Multiply it by"),
}


def operation_steps(steps: list[list[Any]]) -> tuple[str, ...]:
    """Arithmetic steps as a plan names them, in the prompt's words.

    >>> operation_steps([["*", 4], ["+", 9]])
    ('multiply by 4', 'add 9')
    """
    return tuple(f"{OPERATIONS[symbol][0]} {operand}" for symbol, operand in steps)


def rest_of(value: Any, steps: list[list[Any]]) -> tuple[str, ...]:
    """A calculation from ``value`` on, as the steps a prompt or a restated task names.

    >>> in_order(*rest_of(529, [["-", 83], ["*", 14]]))
    'start with 529, then subtract 83, then multiply by 14'
    """
    return (f"start with {value}", *operation_steps(steps))


def _clean(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 6)


def evaluate(expression: str) -> int | float:
    """Evaluate +, -, *, /, //, % and parentheses over numbers, without ``eval``."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            return -walk(node.operand) if isinstance(node.op, ast.USub) else walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        raise ToolError(f"unsupported expression element: {ast.dump(node)[:40]}")

    if len(expression) > 200:
        raise ToolError("expression too long (max 200 characters)")
    try:
        return _clean(walk(ast.parse(expression.strip(), mode="eval")))
    except SyntaxError as err:
        raise ToolError(f"cannot parse expression {expression!r}") from err
    except ZeroDivisionError as err:
        raise ToolError("division by zero") from err


class CalculatorTools(ToolBox):
    TOOLS = ("calculate",)

    def calculate(self, expression: str) -> int | float:
        """Evaluate an arithmetic expression.

        Args:
            expression: Arithmetic expression with numbers, + - * / and parentheses, e.g. "12 * 7".
        """
        return evaluate(expression)


class CalculatorEnv(Environment):
    name = "calculator"
    toolbox = CalculatorTools
    vocab: ClassVar[dict[str, ToolVocab]] = {
        "calculate": ToolVocab(
            verbs=("compute", "evaluate", "calc", "solve", "run", "do"),
            nouns=("math", "expression", "arithmetic", "formula", "sum"),
            args={
                "expression": (
                    "expr",
                    "formula",
                    "math_input",
                    "query",
                    "input",
                    "equation",
                    "calc_text",
                )
            },
            descriptions=(
                "Compute the value of a math expression.",
                "Arithmetic engine: returns the number an expression evaluates to.",
                "Solve an arithmetic formula and return the result.",
            ),
        )
    }

    def sample(self, rng: random.Random, world: World, difficulty: dict[str, int]) -> TaskSpec:
        start = world.number(2, 99)
        steps = []
        for _ in range(difficulty["ops"]):
            symbol = rng.choice(list(OPERATIONS))
            steps.append([symbol, world.number(2, 30) if symbol == "*" else world.number(2, 99)])
        value: int | float = start
        for symbol, operand in steps:
            value = evaluate(f"{value} {symbol} {operand}")
        if len(steps) == 1:
            prompt = f"What is {start} {steps[0][0]} {steps[0][1]}?"
        else:
            parts = in_order(*operation_steps(steps))
            prompt = f"Start with {start}, then {parts}. What is the result?"
        return TaskSpec(
            prompt=prompt,
            state={"start": start, "steps": steps},
            verifier={"kind": "numeric", "answer": value, "rtol": 1e-6, "atol": 1e-6},
            needed_tools=["calculate"],
            depth=len(steps),
        )

    def solve(self, task: TaskSpec) -> Solver:
        value: Any = task.state["start"]
        steps = task.state["steps"]
        for i, (symbol, operand) in enumerate(steps):
            thought = "I will use the calculator." if i == 0 else f"The result so far is {value}."
            value = yield Call(
                "calculate",
                {"expression": f"{value} {symbol} {operand}"},
                thought,
                operation_steps(steps[i + 1 :]),
                in_order(*rest_of(value, steps[i:])),
            )
        return str(value)
