"""Code execution: small list and number puzzles the model solves by writing a Python
program that a sandbox runs (``agentrl.tools.sandbox``; ``harness.sandbox`` picks
subprocess or docker). Opt-in, not built in — it needs the sandbox to work where synth,
rl and eval run:

    synth:
      envs: ["agentrl.envs.families.python_exec:PythonEnv"]

A program that fails, overruns its limits or prints nothing is an error observation the
model reads (stderr's last line), like any tool error.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from agentrl.envs.base import Call, Environment, Solver, TaskSpec, ToolBox
from agentrl.envs.world import World
from agentrl.tools.executor import ToolError
from agentrl.tools.sandboxes import open_sandbox
from agentrl.tools.vocab import ToolVocab

PUZZLES = ("sum_of_squares", "kth_smallest", "digit_sum_of_product")
ORDINALS = {1: "smallest", 2: "2nd smallest", 3: "3rd smallest", 4: "4th smallest"}


class PythonTools(ToolBox):
    TOOLS = ("run_python",)

    def __init__(self, state: dict[str, Any]):
        super().__init__(state)
        self.sandbox: Any = None

    def run_python(self, code: str) -> str:
        """Run a Python program in a sandbox and return what it prints.

        Args:
            code: A complete Python program that prints its result, e.g. "print(sum([1, 2]))".
        """
        if self.sandbox is None:
            self.sandbox = open_sandbox(self.sandbox_spec)
        result = self.sandbox.run(code)
        if result.error is not None:
            lines = result.observation.strip().splitlines()
            raise ToolError(lines[-1] if lines else f"program failed ({result.error})")
        if not result.stdout.strip():
            raise ToolError("the program printed nothing; print the result")
        return result.stdout.strip()

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None


class PythonEnv(Environment):
    name = "python"
    toolbox = PythonTools
    vocab: ClassVar[dict[str, ToolVocab]] = {
        "run_python": ToolVocab(
            verbs=("run", "exec", "execute", "eval"),
            nouns=("python", "code", "script", "program"),
            args={"code": ("source", "program", "script", "py_code", "snippet")},
            descriptions=(
                "Execute a Python program and return its printed output.",
                "Python sandbox: runs code, returns stdout.",
                "Run a short Python script and report what it prints.",
            ),
        )
    }

    def sample(self, rng: random.Random, world: World, difficulty: dict[str, int]) -> TaskSpec:
        kind = rng.choice(PUZZLES)
        size = 3 + difficulty["ops"]
        numbers = [world.number(2, 99) for _ in range(size)]
        if kind == "sum_of_squares":
            prompt = f"What is the sum of the squares of {', '.join(map(str, numbers))}?"
            code = f"print(sum(x * x for x in {numbers}))"
            answer = sum(x * x for x in numbers)
        elif kind == "kth_smallest":
            k = rng.randint(1, min(4, size))
            prompt = f"Which number is the {ORDINALS[k]} of {', '.join(map(str, numbers))}?"
            code = f"print(sorted({numbers})[{k - 1}])"
            answer = sorted(numbers)[k - 1]
        else:
            a, b = numbers[0] * 7 + 100, numbers[1]
            prompt = f"What is the sum of the digits of {a} * {b}?"
            code = f"print(sum(int(d) for d in str({a} * {b})))"
            answer = sum(int(d) for d in str(a * b))
        return TaskSpec(
            prompt=prompt,
            state={"code": code},
            verifier={"kind": "numeric", "answer": answer, "rtol": 0.0, "atol": 0.0},
            needed_tools=["run_python"],
            depth=1,
        )

    def solve(self, task: TaskSpec) -> Solver:
        result = yield Call(
            "run_python", {"code": task.state["code"]}, "I will compute it in Python."
        )
        return result.strip()
