"""Interval math behind every learning claim: Wilson intervals and figures over seeds."""

from __future__ import annotations

import pytest

from agentrl.stats import over_seeds, wilson


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
