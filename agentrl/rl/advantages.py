"""Advantage estimators: from a group's outcomes (G rollouts of one task) to one advantage
per turn of each trajectory. Every turn's tokens (the summary turn of a context restart
included) take their turn's advantage; the loss mask keeps tool responses out.

- ``grpo`` (Shao et al. 2024): (R - group mean) / group std.
- ``dr_grpo`` (Liu et al. 2025, "Understanding R1-Zero-like training"): R - group mean;
  no std, whose division favours easy and hard groups.
- ``rloo`` (Ahmadian et al. 2024): R minus the mean of the *other* rollouts of the group.
- ``reinforce_pp_baseline`` (Hu 2025, REINFORCE++): R - group mean, then whitened over the
  whole batch.
- ``gigpo`` (Feng et al. 2025, arXiv 2505.10978): the grpo episode advantage plus ω times
  a step advantage. Turns whose environment state is identical across the group's
  trajectories (same state hash: an anchor state) form a step group; the step advantage
  is the turn's discounted return (γ per remaining turn, the outcome at the end)
  normalised within that group. A state seen once gets no step advantage, so gigpo
  equals grpo when no state repeats.

Groups of one and groups whose values are all equal get zero advantage (nothing to
compare against), never a division by zero.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import fmean, pstdev, stdev


@dataclass(frozen=True)
class Rollout:
    reward: float
    states: tuple[str, ...]  # the state hash at each turn, in turn order


PerTurn = list[list[list[float]]]  # group -> rollout -> turn -> advantage


def _normalized(values: Sequence[float], eps: float = 1e-6) -> list[float]:
    if len(values) < 2:
        return [0.0] * len(values)
    mean, spread = fmean(values), stdev(values)
    return [(v - mean) / (spread + eps) if spread > 0 else 0.0 for v in values]


def _centered(values: Sequence[float]) -> list[float]:
    if len(values) < 2:
        return [0.0] * len(values)
    mean = fmean(values)
    return [v - mean for v in values]


def _leave_one_out(values: Sequence[float]) -> list[float]:
    n = len(values)
    if n < 2:
        return [0.0] * n
    total = sum(values)
    return [v - (total - v) / (n - 1) for v in values]


def _per_turn(groups: list[list[Rollout]], episode: list[list[float]]) -> PerTurn:
    return [
        [[a] * len(r.states) for r, a in zip(group, values, strict=True)]
        for group, values in zip(groups, episode, strict=True)
    ]


def _episode(fn: Callable[[Sequence[float]], list[float]]) -> Callable[..., PerTurn]:
    def estimate(groups: list[list[Rollout]], **_: float) -> PerTurn:
        return _per_turn(groups, [fn([r.reward for r in group]) for group in groups])

    return estimate


def reinforce_pp_baseline(groups: list[list[Rollout]], **_: float) -> PerTurn:
    centered = [_centered([r.reward for r in group]) for group in groups]
    flat = [a for group in centered for a in group]
    if len(flat) < 2 or pstdev(flat) == 0:
        return _per_turn(groups, [[0.0] * len(g) for g in centered])
    mean, spread = fmean(flat), pstdev(flat)
    return _per_turn(groups, [[(a - mean) / spread for a in group] for group in centered])


def gigpo(
    groups: list[list[Rollout]], gamma: float = 0.95, omega: float = 1.0, **_: float
) -> PerTurn:
    out: PerTurn = []
    for group in groups:
        episode = _normalized([r.reward for r in group])
        returns = [
            [r.reward * gamma ** (len(r.states) - 1 - t) for t in range(len(r.states))]
            for r in group
        ]
        anchors: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, rollout in enumerate(group):
            for t, state in enumerate(rollout.states):
                anchors[state].append((i, t))
        step = [[0.0] * len(r.states) for r in group]
        for members in anchors.values():
            for (i, t), value in zip(
                members, _normalized([returns[i][t] for i, t in members]), strict=True
            ):
                step[i][t] = value
        out.append([[a + omega * s for s in steps] for a, steps in zip(episode, step, strict=True)])
    return out


ESTIMATORS: dict[str, Callable[..., PerTurn]] = {
    "grpo": _episode(_normalized),
    "dr_grpo": _episode(_centered),
    "rloo": _episode(_leave_one_out),
    "reinforce_pp_baseline": reinforce_pp_baseline,
    "gigpo": gigpo,
}


def advantages(
    name: str, groups: list[list[Rollout]], gamma: float = 0.95, omega: float = 1.0
) -> PerTurn:
    """Per-turn advantages of every rollout of every group, by the estimator ``name``."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator '{name}' (known: {', '.join(ESTIMATORS)})")
    return ESTIMATORS[name](groups, gamma=gamma, omega=omega)
