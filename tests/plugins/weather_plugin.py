"""A user environment defined outside agentrl, loaded through `synth.envs`."""

from __future__ import annotations

from typing import ClassVar

from agentrl.envs.base import Call, Environment, TaskSpec, ToolBox
from agentrl.tools.executor import ToolError
from agentrl.tools.vocab import ToolVocab


class WeatherTools(ToolBox):
    TOOLS = ("forecast",)

    def forecast(self, city: str, unit: str) -> int:
        """Tomorrow's temperature in a city.

        Args:
            city: City name.
            unit: "celsius" or "fahrenheit".
        """
        temps = self.state.get("temps", {})
        if city not in temps:
            raise ToolError(f"no forecast for '{city}'")
        celsius = temps[city]
        return celsius if unit == "celsius" else round(celsius * 9 / 5 + 32)


class WeatherEnv(Environment):
    name = "weather"
    toolbox = WeatherTools
    vocab: ClassVar[dict[str, ToolVocab]] = {
        "forecast": ToolVocab(
            verbs=("forecast", "get", "predict", "fetch"),
            nouns=("weather", "temperature", "temp"),
            args={
                "city": ("place", "location", "town", "where"),
                "unit": ("scale", "units", "degrees", "system"),
            },
        )
    }

    def sample(self, rng, world, difficulty):
        cities = [world.entity() for _ in range(3)]
        temps = {c: world.number(-20, 40) for c in cities}
        city, unit = rng.choice(cities), rng.choice(["celsius", "fahrenheit"])
        answer = temps[city] if unit == "celsius" else round(temps[city] * 9 / 5 + 32)
        return TaskSpec(
            prompt=f"How warm will {city} be tomorrow, in {unit}?",
            state={"temps": temps, "city": city, "unit": unit},
            verifier={"kind": "numeric", "answer": answer, "rtol": 0.0, "atol": 0.0},
            needed_tools=["forecast"],
            depth=1,
        )

    def solve(self, task):
        city, unit = task.state["city"], task.state["unit"]
        observed = yield Call(
            "forecast", {"city": city, "unit": unit}, f"I check the forecast for {city}."
        )
        return observed


class NotAnEnv:
    """Named in a test to check that a non-Environment plugin is refused."""
