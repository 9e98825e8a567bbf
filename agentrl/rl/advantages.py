"""Advantage estimators: from the outcomes of a step's groups (G rollouts of one task
each) to one advantage per turn of each trajectory. Every turn's tokens (the summary turn of
a context restart included) take their turn's advantage; the loss mask keeps tool
responses out.

An episode advantage is a baseline subtracted within the group, then a scale:

- ``grpo`` (Shao et al. 2024): R - group mean, scaled by the group's std.
- ``dr_grpo`` (Liu et al. 2025, "Understanding R1-Zero-like training"): R - group mean,
  unscaled: the std division favours easy and hard groups.
- ``rloo`` (Ahmadian et al. 2024): R minus the mean of the *other* rollouts of the group,
  unscaled.
- ``reinforce_pp_baseline`` (Hu 2025, REINFORCE++): R - group mean, then whitened over
  every group of the step (the batch).
- ``gigpo`` (Feng et al. 2025, arXiv 2505.10978): the grpo episode advantage plus ω times
  a step advantage. Turns whose environment state is identical across the group's
  trajectories (same state hash: an anchor state) form a step group; the step advantage
  is the turn's discounted return (γ per remaining turn, the outcome at the end)
  normalised within that group. A state seen once gets no step advantage, so gigpo
  equals grpo when no state repeats.
- ``rft``: rejection-sampling fine-tuning (RAFT, Dong et al. 2023; STaR's filter): no
  baseline; a rollout with a positive reward keeps it as its weight and every other one
  gets 0, so the update is fine-tuning on the verified successes. The simplest thing RL
  must beat; run it with ``rl.dynamic_sampling: false`` so groups that all succeed count.

``scale`` (``rl.scale``, TRL's ``scale_rewards``) overrides an estimator's own scale:
``group`` divides by the group's reward std, ``batch`` whitens over the whole step,
``none`` leaves the baseline-subtracted rewards as they are. The batch is every group the
step keeps, so the trainer calls ``advantages`` once per step, never per group.

Groups of one and groups whose values are all equal get zero advantage (nothing to
compare against), never a division by zero; rft alone, having no baseline, weights the
successes of any group.
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


SCALES = ("group", "batch", "none")


def _spread(values: Sequence[float]) -> float:
    return stdev(values) if len(values) > 1 else 0.0


def _divided(values: Sequence[float], spread: float, eps: float = 1e-6) -> list[float]:
    """``values`` over ``spread`` (+eps); all zero when there is no spread."""
    return [v / (spread + eps) if spread > 0 else 0.0 for v in values]


def _normalized(values: Sequence[float]) -> list[float]:
    return _divided(_centered(values), _spread(values))


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


def _successes(values: Sequence[float]) -> list[float]:
    """Positive rewards as they are, the rest 0.

    >>> _successes([1.0, 0.0, -0.5, 0.25])
    [1.0, 0.0, 0.0, 0.25]
    """
    return [v if v > 0 else 0.0 for v in values]


@dataclass(frozen=True)
class Estimator:
    baseline: Callable[[Sequence[float]], list[float]]  # a group's rewards, baseline removed
    scale: str  # its own scale, one of SCALES
    steps: bool = False  # adds gigpo's anchor-state step advantage


ESTIMATORS: dict[str, Estimator] = {
    "grpo": Estimator(_centered, "group"),
    "dr_grpo": Estimator(_centered, "none"),
    "rloo": Estimator(_leave_one_out, "none"),
    "reinforce_pp_baseline": Estimator(_centered, "batch"),
    "gigpo": Estimator(_centered, "group", steps=True),
    "rft": Estimator(_successes, "none"),
}


def _scaled(groups: list[list[Rollout]], based: list[list[float]], scale: str) -> list[list[float]]:
    """Baseline-subtracted episode advantages under ``scale``."""
    if scale == "group":
        return [
            _divided(values, _spread([r.reward for r in group]))
            for group, values in zip(groups, based, strict=True)
        ]
    if scale == "batch":
        flat = [a for values in based for a in values]
        if len(flat) < 2 or pstdev(flat) == 0:
            return [[0.0] * len(values) for values in based]
        mean, spread = fmean(flat), pstdev(flat)
        return [[(a - mean) / spread for a in values] for values in based]
    return based


def _step_advantages(group: list[Rollout], gamma: float) -> list[list[float]]:
    """gigpo's step advantage of each turn: its discounted return, normalised among the
    turns of the group that start from the same state."""
    returns = [
        [r.reward * gamma ** (len(r.states) - 1 - t) for t in range(len(r.states))] for r in group
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
    return step


def advantages(
    name: str,
    groups: list[list[Rollout]],
    gamma: float = 0.95,
    omega: float = 1.0,
    scale: str | None = None,
) -> PerTurn:
    """Per-turn advantages of every rollout of every group of a step, by the estimator
    ``name`` under ``scale`` (None: the estimator's own)."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator '{name}' (known: {', '.join(ESTIMATORS)})")
    estimator = ESTIMATORS[name]
    scale = scale or estimator.scale
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale '{scale}' (known: {', '.join(SCALES)})")
    based = [estimator.baseline([r.reward for r in group]) for group in groups]
    episode = _scaled(groups, based, scale)
    out: PerTurn = []
    for group, values in zip(groups, episode, strict=True):
        steps = _step_advantages(group, gamma) if estimator.steps else None
        out.append(
            [
                [a + omega * s for s in steps[i]] if steps else [a] * len(r.states)
                for i, (r, a) in enumerate(zip(group, values, strict=True))
            ]
        )
    return out
