"""The rollout sources ``rl.rollouts`` chooses between, in one registry: which sources a
step draws its groups from, and how many of this rank's groups each gives.

>>> [group_counts("mix", 4, 0.25), group_counts("pivots", 4, 0.25)]
[{'episodes': 3, 'pivots': 1}, {'pivots': 4}]
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from agentrl.config import RLSection
from agentrl.harness.loop import Harness
from agentrl.rl.pivots import Pivot, PivotJudge, PivotRollouts
from agentrl.rl.rollouts import EpisodeRollouts, GroupSource, StepRollouts

SOURCES = ("episodes", "pivots")  # every group source, by its name
# rl.rollouts's choices (tests/test_lists.py ties them): each names the share of a rank's
# groups every source gives, from the rank's share of tasks_per_step and rl.pivot_share
SOURCE_MIXES: dict[str, Callable[[int, float], dict[str, int]]] = {
    "episodes": lambda share, pivot_share: {"episodes": share},
    "pivots": lambda share, pivot_share: {"pivots": share},
    "mix": lambda share, pivot_share: {
        "episodes": share - round(share * pivot_share),
        "pivots": round(share * pivot_share),
    },
}


def group_counts(rollouts: str, share: int, pivot_share: float) -> dict[str, int]:
    """Groups each source gives a rank whose share of ``tasks_per_step`` is ``share``."""
    return SOURCE_MIXES[rollouts](share, pivot_share)


def build_rollouts(
    cfg: RLSection,
    harness: Harness,
    seed: int,
    rng: random.Random,
    rank: int,
    world: int,
    pivots: list[Pivot],
    judge: PivotJudge | None,
) -> StepRollouts:
    """A step's rollouts as ``rl.rollouts`` says, for rank ``rank`` of ``world``."""
    counts = group_counts(cfg.rollouts, cfg.tasks_per_step // world, cfg.pivot_share)
    builders: dict[str, Callable[[], GroupSource]] = {  # keyed as SOURCES
        "episodes": lambda: EpisodeRollouts(cfg, harness, seed, rng, rank, world),
        "pivots": lambda: PivotRollouts(cfg, harness, judge, pivots, seed, rng, rank, world),  # type: ignore[arg-type]
    }
    parts: list[tuple[Any, int]] = [(builders[name](), n) for name, n in counts.items()]
    return StepRollouts(cfg, parts)
