"""The bootstrap intervals of the evaluation tables, on cases whose answers are known."""

from __future__ import annotations

import pytest

from embodied_r_ros.intervals import bootstrap_ci, paired_difference


def test_paired_difference_known_cases() -> None:
    same = [1.0, 0.0] * 50
    assert paired_difference(same, same) == (0.0, 0.0, 0.0)
    assert paired_difference([1.0] * 30, [0.0] * 30) == (1.0, 1.0, 1.0)
    # A is right on 10 more of 100 questions and equal elsewhere: +10 points, the interval of
    # a binomial 10 in 100 (about 4 to 16), above 0
    a = [1.0] * 10 + [1.0] * 40 + [0.0] * 50
    b = [0.0] * 10 + [1.0] * 40 + [0.0] * 50
    diff, low, high = paired_difference(a, b)
    assert diff == pytest.approx(0.10)
    assert 0.03 <= low <= 0.06 and 0.14 <= high <= 0.17
    # the same two accuracies (50 % and 40 %) from unrelated questions: the separate intervals
    # overlap, the paired one of these paired hits does not include 0
    a_low, _ = bootstrap_ci(a)
    _, b_high = bootstrap_ci(b)
    assert a_low < b_high and low > 0.0
    # B better by 5 of 100 but A better by 5 others: no difference, interval around 0
    a = [1.0] * 5 + [0.0] * 5 + [1.0] * 40 + [0.0] * 50
    b = [0.0] * 5 + [1.0] * 5 + [1.0] * 40 + [0.0] * 50
    diff, low, high = paired_difference(a, b)
    assert diff == 0.0 and low < 0.0 < high
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([1.0], [1.0, 0.0])
