"""What the ranks of a multi-process rl run agree on, kept out of the loop's arithmetic.

Every rank rolls out its own share of a step's tasks (``rollouts.py``), so ranks hold
different numbers of sequences; DeepSpeed all-reduces gradients at every accumulation
boundary, so every rank must run the same number of micro-batches. The trainer takes the
largest mini-batch count over ranks (``most``), and a rank short of sequences runs
zero-weighted micro-batches. Figures and checkpoint state are gathered to every rank
(``gathered``): rank 0 writes them. A lone process skips every collective.
"""

from __future__ import annotations

from statistics import fmean
from typing import Any

import torch

# figures added over ranks (counts of the step) and those whose maximum is the point;
# every other figure is the mean over the ranks that have it
SUMMED = frozenset({"groups", "sequences"})
SUMMED_SUFFIXES = ("_groups_drawn", "_groups_kept")  # each rollout source's group counts
MAXIMA = frozenset({"is_weight_max", "staleness"})


def most(value: int, world: int) -> int:
    """The largest ``value`` over the ranks."""
    if world == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.long)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return int(tensor.item())


def gathered(value: Any, world: int) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order, on every rank."""
    if world == 1:
        return [value]
    out: list[Any] = [None] * world
    torch.distributed.all_gather_object(out, value)
    return out


def merged_figures(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """One step's figures over ranks: counts summed, maxima maxed, the rest averaged.

    >>> merged_figures([{"groups": 2.0, "reward_mean": 0.5}, {"groups": 3.0, "reward_mean": 0.0}])
    {'groups': 5.0, 'reward_mean': 0.25}
    >>> merged_figures([{"is_weight_max": 1.5}, {"is_weight_max": 2.0, "kl": 0.1}])
    {'is_weight_max': 2.0, 'kl': 0.1}
    """
    if len(per_rank) == 1:
        return dict(per_rank[0])
    keys = list(dict.fromkeys(k for figures in per_rank for k in figures))
    out = {}
    for key in keys:
        values = [figures[key] for figures in per_rank if key in figures]
        if key in SUMMED or key.endswith(SUMMED_SUFFIXES):
            out[key] = float(sum(values))
        elif key in MAXIMA:
            out[key] = max(values)
        else:
            out[key] = fmean(values)
    return out
