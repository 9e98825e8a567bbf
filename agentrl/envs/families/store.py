"""A stateful inventory store: add, remove, list, count; verified on the final state.

Success needs the right final inventory, not only the right words: the verifier compares
the store's state after the episode with the expected one (tau-bench style).
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from agentrl.envs.base import Call, Environment, Solver, TaskSpec, ToolBox
from agentrl.envs.world import World
from agentrl.tools.executor import ToolError
from agentrl.tools.vocab import ToolVocab


class StoreTools(ToolBox):
    TOOLS = ("add_item", "remove_item", "list_items", "count_items")

    def __init__(self, state: dict[str, Any]):
        super().__init__(state)
        self.items: dict[str, int] = dict(state.get("items", {}))

    def snapshot(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.items.items()) if v > 0}

    def add_item(self, item: str, quantity: int) -> dict[str, Any]:
        """Add units of an item to the inventory.

        Args:
            item: Item name.
            quantity: How many units to add (positive).
        """
        if quantity <= 0:
            raise ToolError("quantity must be positive")
        self.items[item] = self.items.get(item, 0) + quantity
        return {"item": item, "quantity": self.items[item]}

    def remove_item(self, item: str, quantity: int) -> dict[str, Any]:
        """Remove units of an item from the inventory.

        Args:
            item: Item name.
            quantity: How many units to remove (positive, at most the stock).
        """
        if quantity <= 0:
            raise ToolError("quantity must be positive")
        have = self.items.get(item, 0)
        if quantity > have:
            raise ToolError(f"cannot remove {quantity} '{item}': only {have} in stock")
        self.items[item] = have - quantity
        return {"item": item, "quantity": self.items[item]}

    def list_items(self) -> dict[str, int]:
        """List every item in stock with its quantity."""
        return self.snapshot()

    def count_items(self, item: str) -> int:
        """Count the units of one item in stock.

        Args:
            item: Item name.
        """
        return self.items.get(item, 0)


class StoreEnv(Environment):
    name = "store"
    toolbox = StoreTools
    vocab: ClassVar[dict[str, ToolVocab]] = {
        "add_item": ToolVocab(
            verbs=("add", "put", "insert", "stock", "push"),
            nouns=("item", "product", "units", "goods", "stock"),
            args={
                "item": ("name", "product", "sku", "article", "thing"),
                "quantity": ("count", "amount", "qty", "units", "number"),
            },
            descriptions=(
                "Put units of a product into the inventory.",
                "Increase the stock of an item.",
            ),
        ),
        "remove_item": ToolVocab(
            verbs=("remove", "take", "delete", "drop", "pull"),
            nouns=("item", "product", "units", "goods", "stock"),
            args={
                "item": ("name", "product", "sku", "article", "thing"),
                "quantity": ("count", "amount", "qty", "units", "number"),
            },
            descriptions=(
                "Take units of a product out of the inventory.",
                "Decrease the stock of an item.",
            ),
        ),
        "list_items": ToolVocab(
            verbs=("list", "show", "get", "dump", "view"),
            nouns=("items", "inventory", "stock", "products", "all"),
            descriptions=("Show the whole inventory.", "Return all products in stock."),
        ),
        "count_items": ToolVocab(
            verbs=("count", "get", "check", "tally", "how_many"),
            nouns=("items", "stock", "units", "quantity", "product"),
            args={"item": ("name", "product", "sku", "article", "thing")},
            descriptions=(
                "How many units of a product are in stock.",
                "Return the stock level of an item.",
            ),
        ),
    }

    def sample(self, rng: random.Random, world: World, difficulty: dict[str, int]) -> TaskSpec:
        items = {world.word(): world.number(1, 40) for _ in range(rng.randint(2, 4))}
        pool = list(items) + [world.word() for _ in range(2)]
        stock, ops = dict(items), []
        for _ in range(difficulty["horizon"]):
            item = rng.choice(pool)
            if stock.get(item, 0) > 0 and rng.random() < 0.5:
                ops.append(["remove", item, rng.randint(1, stock[item])])
                stock[item] -= ops[-1][2]
            else:
                ops.append(["add", item, world.number(1, 40)])
                stock[item] = stock.get(item, 0) + ops[-1][2]
        ask = rng.choice([op[1] for op in ops])
        expected = {k: v for k, v in sorted(stock.items()) if v > 0}
        steps = ", ".join(f"{verb} {qty} {item}" for verb, item, qty in ops)
        return TaskSpec(
            prompt=f"Update the inventory: {steps}. Then report how many {ask} are in stock.",
            state={"items": items, "ops": ops, "ask": ask},
            verifier={
                "kind": "state",
                "expected": expected,
                "answer": stock.get(ask, 0),
                "rtol": 0.0,
                "atol": 0.0,
            },
            needed_tools=sorted({f"{op[0]}_item" for op in ops} | {"count_items"}),
            depth=len(ops) + 1,
        )

    def solve(self, task: TaskSpec) -> Solver:
        ops, ask = task.state["ops"], task.state["ask"]
        for i, (verb, item, qty) in enumerate(ops):
            later = tuple(f"{v} {q} {it}" for v, it, q in ops[i + 1 :])
            yield Call(
                f"{verb}_item",
                {"item": item, "quantity": qty},
                f"Next: {verb} {qty} {item}.",
                (*later, f"check the stock of {ask}"),
            )
        count = yield Call("count_items", {"item": ask}, f"Now I check the stock of {ask}.")
        return count
