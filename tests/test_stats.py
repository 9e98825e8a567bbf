"""Interval math behind every learning claim: Wilson intervals, paired differences and
figures over seeds."""

from __future__ import annotations

import random

import pytest

from agentrl.stats import over_seeds, paired_difference, wilson


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        (5, 10, 0.2366, 0.7634),
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (30, 200, 0.1071, 0.2061),
    ],
)
def test_wilson_matches_published_values(successes: int, n: int, low: float, high: float) -> None:
    rate = wilson(successes, n)
    assert rate.low == pytest.approx(low, abs=1e-4) and rate.high == pytest.approx(high, abs=1e-4)
    assert rate.low <= rate.value <= rate.high


def test_wilson_rejects_impossible_counts_and_is_uninformative_without_data() -> None:
    with pytest.raises(ValueError, match="successes=11"):
        wilson(11, 10)
    empty = wilson(0, 0)
    assert (empty.low, empty.high) == (0.0, 1.0)


def test_over_seeds_gives_mean_and_sample_std() -> None:
    figure = over_seeds([0.1, 0.2, 0.3])
    assert figure.mean == pytest.approx(0.2) and figure.std == pytest.approx(0.1)
    assert over_seeds([0.4]).std == 0.0
    with pytest.raises(ValueError):
        over_seeds([])


def test_pass_at_k_matches_its_definition() -> None:
    from itertools import combinations

    from agentrl.stats import pass_at_k

    for n, c in ((5, 0), (5, 1), (5, 2), (4, 4), (6, 3)):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            draws = list(combinations(outcomes, k))
            exact = sum(any(d) for d in draws) / len(draws)
            assert abs(pass_at_k(n, c, k) - exact) < 1e-12, (n, c, k)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def _pairs(both: int, won: int, lost: int, neither: int) -> tuple[list[bool], list[bool]]:
    before = [True] * both + [False] * won + [True] * lost + [False] * neither
    after = [True] * both + [True] * won + [False] * lost + [False] * neither
    return before, after


def test_paired_difference_matches_a_published_newcombe_interval() -> None:
    # Cavo et al. 2012 as worked in Fagerland, Lydersen & Laake (2017), ch. 8: 59 pairs
    # both, 6 only the first, 16 only the second, 80 neither -> -0.0621 [-0.1186, -0.0046]
    diff = paired_difference(*_pairs(both=59, won=6, lost=16, neither=80))
    assert diff.difference == pytest.approx(-0.0621, abs=1e-4)
    assert (diff.low, diff.high) == pytest.approx((-0.1186, -0.0046), abs=1e-4)
    assert (diff.won, diff.lost, diff.n, diff.verdict) == (6, 16, 161, "worse")


def test_paired_difference_covers_the_true_difference_95_percent_of_the_time() -> None:
    """Simulated checkpoints that agree on most tasks (the case eval meets): 200 tasks, a
    true gain of 5 points; the interval must hold it in ~95% of 2,000 draws."""
    rng = random.Random(0)
    covered = 0
    for _ in range(2000):
        before, after = [], []
        for _ in range(200):
            u = rng.random()  # both 0.55, only after 0.10, only before 0.05, neither 0.30
            before.append(u < 0.55 or 0.65 <= u < 0.70)
            after.append(u < 0.65)
        diff = paired_difference(before, after)
        covered += diff.low <= 0.05 <= diff.high
    assert 0.93 <= covered / 2000 <= 0.975


def test_paired_difference_is_never_zero_width_and_rejects_unpaired_input() -> None:
    same = paired_difference([True] * 120 + [False] * 80, [True] * 120 + [False] * 80)
    assert same.difference == 0 and same.low < -0.01 and same.high > 0.01
    assert same.verdict == "no measurable difference"
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([True], [True, False])
