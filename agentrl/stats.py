"""Interval math for success rates: what a learning claim is judged by.

A rate over n episodes gets a Wilson score interval (well-behaved at 0 and 1, unlike the
normal approximation); a figure over seeds gets mean, sample std and the per-seed values.
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
