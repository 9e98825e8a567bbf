"""Rewards as small pure functions: what one episode is trained on.

An episode's reward is its verifier outcome (only a grounded answer, one read off a tool
result in that episode, counts under ``rl.grounded_only``: a tiny model fakes success
from memorised facts), minus a shaping penalty per failed tool call. The ``random``
control replaces the outcomes by draws independent of them with the same mean, the
falsification arm of every learning claim.
"""

from __future__ import annotations

import random
from statistics import fmean
from typing import Any

from agentrl.config import RLSection


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


def outcome_rewards(episodes: list[Any], cfg: RLSection, rng: random.Random) -> list[float]:
    """The reward each episode is trained on under ``cfg`` (rl.reward, rl.grounded_only,
    rl.invalid_call_penalty)."""
    outcomes = [outcome(e.reward, e.grounded, cfg.grounded_only) for e in episodes]
    if cfg.reward == "random":
        return random_control(outcomes, rng)
    return [
        shaped(r, failed_calls(e), cfg.invalid_call_penalty)
        for r, e in zip(outcomes, episodes, strict=True)
    ]
