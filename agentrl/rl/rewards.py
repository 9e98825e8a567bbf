"""Rewards as small pure functions: what one episode is trained on.

An episode's reward is its verifier outcome (only a grounded answer, one read off a tool
result in that episode, counts under ``rl.grounded_only``: a tiny model fakes success
from memorised facts), minus a shaping penalty per failed tool call. Under
``rl.progress_weight`` a failed episode earns partial credit for the share of the expert
trajectory's tool results it obtained: the chain's intermediate facts, each verified by a
tool, so a group that never finishes a deep chain still ranks how far along it got. The
``random`` control replaces the rewards by draws independent of them with the same mean,
the falsification arm of every learning claim.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from statistics import fmean
from typing import Any

from agentrl.config import RLSection
from agentrl.dataset import expert_trajectory
from agentrl.envs.verify import normalize, usable


def outcome(success: float, grounded: bool, grounded_only: bool) -> float:
    """The verifier's outcome, counted only when grounded if ``grounded_only``.

    >>> outcome(1.0, grounded=False, grounded_only=True)
    0.0
    >>> outcome(1.0, grounded=False, grounded_only=False)
    1.0
    """
    return float(grounded) if grounded_only else success


def shaped(reward: float, failed_calls: int, penalty: float) -> float:
    """``reward`` minus ``penalty`` per tool call the tools refused.

    >>> shaped(1.0, failed_calls=2, penalty=0.1)
    0.8
    """
    return reward - penalty * failed_calls


def expert_results(task: dict[str, Any]) -> list[str]:
    """The tool results the expert's trajectory of ``task`` read, its errors left out (an rl
    task keeps the trajectory apart from its prompt, under ``expert``).

    >>> expert_results({"messages": [{"role": "user", "content": "q"},
    ...     {"role": "tool", "content": "Error: no entity"}, {"role": "tool", "content": "Ulm"}]})
    ['Ulm']
    """
    messages = expert_trajectory(task) or []
    return usable([m["content"] for m in messages if m["role"] == "tool"])


def progress(expert: list[str], observations: list[str]) -> float:
    """The share of the expert's tool results that the episode's own tool results include:
    how far along the task's chain it got, whatever it answered. 0 when the expert read none.

    >>> progress(["Ulm", "120000"], ["Error: no relation 'mayor'", "ulm "])
    0.5
    >>> progress(["Ulm", "120000"], ["Error: Ulm", "12000"])
    0.0
    """
    if not expert:
        return 0.0
    seen = {normalize(o) for o in usable(observations)}
    return sum(normalize(result) in seen for result in expert) / len(expert)


def with_progress(reward: float, share: float, weight: float) -> float:
    """A failed episode's partial credit, ``weight`` x its ``share`` of the expert's results;
    a rewarded episode keeps its reward, so with ``weight`` < 1 finishing a chain always
    beats walking all of it and answering wrong.

    >>> with_progress(1.0, share=1.0, weight=0.25)
    1.0
    >>> with_progress(0.0, share=0.5, weight=0.25)
    0.125
    """
    return reward if reward > 0 else weight * share


def random_control(outcomes: list[float], rng: random.Random) -> list[float]:
    """Bernoulli draws with the batch's mean outcome, independent of which episode earned it.

    >>> random_control([1.0, 0.0, 0.0, 0.0], random.Random(0))
    [0.0, 0.0, 0.0, 0.0]
    >>> random_control([1.0, 1.0], random.Random(0))
    [1.0, 1.0]
    """
    mean = fmean(outcomes)
    return [float(rng.random() < mean) for _ in outcomes]


def failed_calls(episode: Any) -> int:
    """Tool calls of the episode that the tools refused."""
    return sum(sum(turn.call_errors.values()) for turn in episode.turns)


def outcome_rewards(
    episodes: list[Any],
    cfg: RLSection,
    rng: random.Random,
    tasks: Sequence[dict[str, Any]] = (),
) -> list[float]:
    """The reward each episode is trained on under ``cfg`` (rl.reward, rl.grounded_only,
    rl.progress_weight, rl.invalid_call_penalty). ``tasks`` are the records the episodes
    attempted, whose expert trajectories progress is measured against; one-turn episodes
    pass none and are scored on their outcome."""
    outcomes = [outcome(e.reward, e.grounded, cfg.grounded_only) for e in episodes]
    if cfg.progress_weight and tasks:
        expert = {task["id"]: expert_results(task) for task in tasks}
        outcomes = [
            with_progress(o, progress(expert[e.task_id], e.observations), cfg.progress_weight)
            for o, e in zip(outcomes, episodes, strict=True)
        ]
    if cfg.reward == "random":
        return random_control(outcomes, rng)
    return [
        shaped(r, failed_calls(e), cfg.invalid_call_penalty)
        for r, e in zip(outcomes, episodes, strict=True)
    ]
