"""bench.trend: whether a bench's figure declines from round to round (issue 15's "no decline"), told by a slope that
one stray round does not tip."""

from __future__ import annotations

import statistics

import pytest

from bench import DECLINE_PER_ROUND, trend


def test_the_rounds_issue_15_was_filed_with_decline() -> None:
    assert trend([0.18, 0.13, 0.11, 0.09, 0.12]) == pytest.approx(-0.02 / 0.12)
    assert trend([0.18, 0.13, 0.11, 0.09, 0.12]) < DECLINE_PER_ROUND


def test_rounds_that_spread_without_a_direction_do_not() -> None:
    # make bench of 2026-12-02 10:17 UTC: the bare server's fast rounds made the ratio jump, not fall
    assert trend([0.39, 0.81, 0.44, 0.74, 0.50]) == pytest.approx(0.02625 / 0.50)
    assert trend([0.39, 0.81, 0.44, 0.74, 0.50]) > DECLINE_PER_ROUND


def test_one_round_far_off_does_not_make_a_decline() -> None:
    steady = [1.0, 1.01, 0.99, 1.0, 0.3]  # the last round slowed by another tenant of the host
    assert trend(steady) > DECLINE_PER_ROUND
    fitted = statistics.linear_regression(range(len(steady)), steady).slope / statistics.median(steady)
    assert fitted < DECLINE_PER_ROUND < trend(steady)  # a least-squares line would call it one


def test_a_steady_fall_is_its_share_of_the_median_a_round() -> None:
    assert trend([100.0, 90.0, 80.0, 70.0, 60.0]) == pytest.approx(-10 / 80)
    assert trend([1.0, 2.0]) == pytest.approx(1.0 / 1.5)


@pytest.mark.parametrize("rounds", [[], [0.5], [0.0, 0.0, 0.0]])
def test_too_few_rounds_or_a_zero_median_is_no_trend(rounds: list[float]) -> None:
    assert trend(rounds) == 0.0
