"""Interval math for success rates: what a learning claim is judged by.

A rate over n episodes gets a Wilson score interval (well-behaved at 0 and 1, unlike the
normal approximation); a figure over seeds gets mean, sample std and the per-seed values.
Two checkpoints scored on the same tasks get a *paired* difference (``paired_difference``):
the tasks both solve or both fail cancel, so it needs far fewer tasks than comparing two
independent intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, stdev


@dataclass(frozen=True)
class Rate:
    successes: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.successes / self.n if self.n else 0.0

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}] (n={self.n})"


def wilson(successes: int, n: int, z: float = 1.96) -> Rate:
    """Wilson score interval for ``successes`` out of ``n`` (95% for z = 1.96)."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} outside [0, n={n}]")
    if n == 0:
        return Rate(0, 0, 0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Rate(successes, n, max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class OverSeeds:
    mean: float
    std: float
    values: tuple[float, ...]

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.std:.3f}"


def over_seeds(values: list[float]) -> OverSeeds:
    """Mean and sample standard deviation (0 for a single seed)."""
    if not values:
        raise ValueError("no values")
    return OverSeeds(fmean(values), stdev(values) if len(values) > 1 else 0.0, tuple(values))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: the chance that k of its n samples, drawn without
    replacement, hold at least one of its c successes (Chen et al. 2021, eq. 1)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c={c} <= n={n} and 1 <= k={k} <= n")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class Paired:
    """``after - before`` over the same n pairs: ``won`` pairs only ``after`` solved,
    ``lost`` pairs only ``before`` solved; ``low``/``high`` bound the difference."""

    n: int
    won: int
    lost: int
    low: float
    high: float

    @property
    def difference(self) -> float:
        return (self.won - self.lost) / self.n if self.n else 0.0

    @property
    def verdict(self) -> str:
        """What the interval (not the point estimate) says."""
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "no measurable difference"

    def as_dict(self) -> dict[str, float | int | str]:
        return {"difference": round(self.difference, 4), "low": round(self.low, 4),
                "high": round(self.high, 4), "won": self.won, "lost": self.lost,
                "pairs": self.n, "verdict": self.verdict}  # fmt: skip

    def __str__(self) -> str:
        return (
            f"{self.difference:+.3f} [{self.low:+.3f}, {self.high:+.3f}] "
            f"(won {self.won}, lost {self.lost} of {self.n})"
        )


def paired_difference(before: list[bool], after: list[bool], z: float = 1.96) -> Paired:
    """Difference of two success rates measured on the same items (``before[i]`` and
    ``after[i]`` are one task under two checkpoints), with Newcombe's hybrid score interval
    for paired proportions (Newcombe 1998, Stat. Med. 17:2635, method 10; the worked form
    in Altman et al., *Statistics with Confidence*, 2000, ch. 6).

    Chosen over a paired bootstrap because it is closed-form (the same bytes on every
    run), keeps its coverage with few discordant pairs, and never collapses to a zero-width
    interval when the two agree on every task (a bootstrap then says [0, 0]).

    >>> d = paired_difference([True] * 50 + [False] * 150, [True] * 60 + [False] * 140)
    >>> d.won, d.lost, round(d.difference, 3), d.verdict
    (10, 0, 0.05, 'better')
    >>> paired_difference([True, False] * 50, [True, False] * 50).verdict
    'no measurable difference'
    """
    if len(before) != len(after):
        raise ValueError(f"paired samples differ in length: {len(before)} and {len(after)}")
    n = len(before)
    if n == 0:
        return Paired(0, 0, 0, -1.0, 1.0)
    both = sum(1 for b, a in zip(before, after, strict=True) if b and a)
    won = sum(1 for b, a in zip(before, after, strict=True) if a and not b)
    lost = sum(1 for b, a in zip(before, after, strict=True) if b and not a)
    neither = n - both - won - lost
    p_after, p_before = (both + won) / n, (both + lost) / n
    first, second = wilson(both + won, n, z), wilson(both + lost, n, z)
    # the correlation of the two outcomes, shrunk towards 0 as Newcombe's method 10 does
    spread = (both + won) * (lost + neither) * (both + lost) * (won + neither)
    cross = both * neither - won * lost
    shrunk = cross - n / 2 if cross > n / 2 else min(cross, 0)
    phi = shrunk / math.sqrt(spread) if spread else 0.0
    d_low, d_high = p_after - first.low, first.high - p_after
    e_low, e_high = p_before - second.low, second.high - p_before
    low = (p_after - p_before) - math.sqrt(
        max(0.0, d_low**2 - 2 * phi * d_low * e_high + e_high**2)
    )
    high = (p_after - p_before) + math.sqrt(
        max(0.0, e_low**2 - 2 * phi * e_low * d_high + d_high**2)
    )
    return Paired(n, won, lost, max(-1.0, low), min(1.0, high))
