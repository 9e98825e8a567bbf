"""The rollout sources ``rl.rollouts`` chooses between, in one registry: which sources a
step draws its groups from, and how many of this rank's groups each gives. ``anchors``
(answer states outside the kept pivots, never retired) take ``rl.anchor_share`` of the
pivot groups.

>>> [group_counts("mix", 4, 0.25), group_counts("pivots", 4, 0.25)]
[{'episodes': 3, 'pivots': 1}, {'pivots': 4}]
>>> group_counts("pivots", 4, 0.5, anchor_share=0.25)
{'pivots': 3, 'anchors': 1}
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from agentrl.config import RLSection
from agentrl.harness.loop import Harness
from agentrl.rl.pivots import Pivot, PivotJudge, PivotRollouts
from agentrl.rl.rollouts import EpisodeRollouts, GroupSource, StepRollouts

SOURCES = ("episodes", "pivots", "anchors")  # every group source, by its name
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


def group_counts(
    rollouts: str, share: int, pivot_share: float, anchor_share: float = 0.0
) -> dict[str, int]:
    """Groups each source gives a rank whose share of ``tasks_per_step`` is ``share``."""
    counts = SOURCE_MIXES[rollouts](share, pivot_share)
    if anchored := round(counts.get("pivots", 0) * anchor_share):
        counts |= {"pivots": counts["pivots"] - anchored, "anchors": anchored}
    return counts


def build_rollouts(
    cfg: RLSection,
    harness: Harness,
    seed: int,
    rng: random.Random,
    rank: int,
    world: int,
    pivots: list[Pivot],
    judge: PivotJudge | None,
    anchors: list[Pivot] | None = None,
    band: tuple[float, float] = (0.0, 1.0),
) -> StepRollouts:
    """A step's rollouts as ``rl.rollouts`` says, for rank ``rank`` of ``world``; a pivot
    whose group's pass rate leaves ``band`` retires (``PivotRollouts``)."""
    share = cfg.tasks_per_step // world
    counts = group_counts(cfg.rollouts, share, cfg.pivot_share, cfg.anchor_share)
    builders: dict[str, Callable[[], GroupSource]] = {  # keyed as SOURCES
        "episodes": lambda: EpisodeRollouts(cfg, harness, seed, rng, rank, world),
        "pivots": lambda: PivotRollouts(
            cfg,
            harness,
            judge,
            pivots,
            seed,
            rng,
            rank,
            world,
            band=band,  # type: ignore[arg-type]
        ),
        # its own seed: its draws and samples apart from the pivots' of the same step
        "anchors": lambda: PivotRollouts(
            cfg,
            harness,
            judge,
            anchors or [],
            seed + 1,
            rng,
            rank,
            world,
            "anchors",
            False,  # type: ignore[arg-type]
        ),
    }
    parts: list[tuple[Any, int]] = [(builders[name](), n) for name, n in counts.items()]
    return StepRollouts(cfg, parts)
