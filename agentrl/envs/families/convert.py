"""Unit and date conversion: chained conversions and date arithmetic."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from typing import Any, ClassVar

from agentrl.envs.base import Call, Environment, Solver, TaskSpec, ToolBox
from agentrl.envs.world import World
from agentrl.tools.executor import ToolError
from agentrl.tools.vocab import ToolVocab

# unit -> (dimension, factor to the base unit); temperatures are handled apart
UNITS: dict[str, tuple[str, float]] = {
    "meter": ("length", 1.0),
    "kilometer": ("length", 1000.0),
    "centimeter": ("length", 0.01),
    "mile": ("length", 1609.344),
    "foot": ("length", 0.3048),
    "inch": ("length", 0.0254),
    "kilogram": ("mass", 1.0),
    "gram": ("mass", 0.001),
    "pound": ("mass", 0.45359237),
    "ounce": ("mass", 0.028349523125),
    "liter": ("volume", 1.0),
    "milliliter": ("volume", 0.001),
    "gallon": ("volume", 3.785411784),
}
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError as err:
        raise ToolError(f"'{text}' is not a date in YYYY-MM-DD form") from err


def convert(value: float, from_unit: str, to_unit: str) -> float:
    src, dst = (u.strip().lower().rstrip("s") for u in (from_unit, to_unit))
    for unit in (src, dst):
        if unit not in UNITS:
            raise ToolError(f"unknown unit '{unit}'. Known: {', '.join(UNITS)}")
    if UNITS[src][0] != UNITS[dst][0]:
        raise ToolError(f"cannot convert {UNITS[src][0]} to {UNITS[dst][0]}")
    return float(f"{value * UNITS[src][1] / UNITS[dst][1]:.6g}")


class ConvertTools(ToolBox):
    TOOLS = ("convert_units", "add_days", "weekday")

    def convert_units(self, value: float, from_unit: str, to_unit: str) -> float:
        """Convert a quantity between units of length, mass or volume.

        Args:
            value: The quantity to convert.
            from_unit: Unit of the value, e.g. "mile".
            to_unit: Unit wanted, e.g. "kilometer".
        """
        return convert(value, from_unit, to_unit)

    def add_days(self, date: str, days: int) -> str:
        """Add a number of days to a date.

        Args:
            date: Date in YYYY-MM-DD form.
            days: Days to add (negative to go back).
        """
        return (_date(date) + dt.timedelta(days=days)).isoformat()

    def weekday(self, date: str) -> str:
        """The day of the week of a date.

        Args:
            date: Date in YYYY-MM-DD form.
        """
        return WEEKDAYS[_date(date).weekday()]


class ConvertEnv(Environment):
    name = "convert"
    toolbox = ConvertTools
    vocab: ClassVar[dict[str, ToolVocab]] = {
        "convert_units": ToolVocab(
            verbs=("convert", "transform", "change", "express"),
            nouns=("units", "measure", "quantity", "unit"),
            args={
                "value": ("amount", "quantity", "number", "x", "magnitude"),
                "from_unit": ("source_unit", "src", "unit_in", "from", "input_unit"),
                "to_unit": ("target_unit", "dst", "unit_out", "to", "output_unit"),
            },
            descriptions=(
                "Unit converter for length, mass and volume.",
                "Express a quantity in another unit.",
            ),
        ),
        "add_days": ToolVocab(
            verbs=("add", "shift", "offset", "move", "advance"),
            nouns=("days", "date", "calendar"),
            args={
                "date": ("day", "start_date", "when", "on", "from_date"),
                "days": ("offset", "delta", "n_days", "count", "shift"),
            },
            descriptions=(
                "Date arithmetic: a date plus some days.",
                "Move a date forward or backward by days.",
            ),
        ),
        "weekday": ToolVocab(
            verbs=("weekday", "day_name", "get", "find", "which"),
            nouns=("weekday", "day_of_week", "day"),
            args={"date": ("day", "start_date", "when", "on", "from_date")},
            descriptions=(
                "Name of the weekday of a date.",
                "Which day of the week a date falls on.",
            ),
        ),
    }

    def sample(self, rng: random.Random, world: World, difficulty: dict[str, int]) -> TaskSpec:
        horizon = difficulty["horizon"]
        if rng.random() < 0.5:
            dimension = rng.choice(["length", "mass", "volume"])
            units = [u for u, (d, _) in UNITS.items() if d == dimension]
            path = [rng.choice(units)]
            for _ in range(horizon):
                path.append(rng.choice([u for u in units if u != path[-1]]))
            value: Any = world.number(1, 500)
            state = {"mode": "units", "value": value, "path": path}
            prompt = f"Convert {value} {path[0]} to {path[1]}"
            prompt += "".join(f", then to {u}" for u in path[2:]) + ". What is the final value?"
            for src, dst in itertools.pairwise(path):
                value = convert(value, src, dst)
            verifier = {"kind": "numeric", "answer": value, "rtol": 1e-3, "atol": 1e-3}
            needed = ["convert_units"]
        else:
            start = f"{world.number(2000, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            shifts = [world.number(2, 60) for _ in range(max(1, horizon - 1))]
            ask_weekday = horizon > 1 or rng.random() < 0.5
            if ask_weekday and horizon == 1:
                shifts = []
            state = {"mode": "dates", "start": start, "shifts": shifts, "weekday": ask_weekday}
            date = dt.date.fromisoformat(start)
            for shift in shifts:
                date += dt.timedelta(days=shift)
            answer = WEEKDAYS[date.weekday()] if ask_weekday else date.isoformat()
            moves = " then ".join(f"{s} days later" for s in shifts)
            what = "which weekday is it" if ask_weekday else "what is the date"
            prompt = f"Starting from {start}, {what}" + (f" {moves}" if moves else "") + "?"
            verifier = {"kind": "exact", "answer": answer}
            needed = (["add_days"] if shifts else []) + (["weekday"] if ask_weekday else [])
        return TaskSpec(prompt, state, verifier, needed, depth=horizon)

    def solve(self, task: TaskSpec) -> Solver:
        state = task.state
        if state["mode"] == "units":
            value: Any = state["value"]
            hops = list(zip(state["path"], state["path"][1:], strict=False))
            for i, (src, dst) in enumerate(hops):
                observed = yield Call(
                    "convert_units",
                    {"value": value, "from_unit": src, "to_unit": dst},
                    f"Convert {value} {src} to {dst}.",
                    tuple(f"convert that from {a} to {b}" for a, b in hops[i + 1 :]),
                )
                try:
                    value = float(observed)
                except ValueError:
                    return observed
            return observed
        date = state["start"]
        shifts = state["shifts"]
        weekday = ("the weekday of that date",) if state["weekday"] else ()
        for i, shift in enumerate(shifts):
            later = tuple(f"add {s} days" for s in shifts[i + 1 :]) + weekday
            date = yield Call(
                "add_days", {"date": date, "days": shift}, f"Add {shift} days to {date}.", later
            )
        if state["weekday"]:
            return (yield Call("weekday", {"date": date}, f"Now the weekday of {date}."))
        return date
