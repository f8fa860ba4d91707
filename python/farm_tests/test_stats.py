"""vmrpc_farm.stats on fixed data: the Hodges-Lehmann ratio and its rank
interval, the median's interval, the verdicts."""

from __future__ import annotations

import math

import pytest

from vmrpc_farm import stats


def test_u_distribution_matches_the_tables() -> None:
    # [5 choose 2]_q = 1 + q + 2q^2 + 2q^3 + 2q^4 + q^5 + q^6
    assert stats._u_counts(3, 2) == [1, 1, 2, 2, 2, 1, 1]
    # Mann-Whitney two-sided 5 % critical values: 23 (10, 10), 2 (5, 5), 127 (20, 20)
    assert stats.u_cdf(10, 10, 23) <= 0.025 < stats.u_cdf(10, 10, 24)
    assert stats._rank_k(10, 10, 0.05) == 24
    assert stats._rank_k(5, 5, 0.05) == 3
    assert stats._rank_k(20, 20, 0.05) == 128
    assert stats._rank_k(3, 3, 0.05) == 0  # too few for a 95 % interval
    # past the exact range, the normal approximation stays close to it
    assert abs(stats._rank_k(60, 60, 0.05) - 1427) <= 2


def test_hl_ratio_of_a_scaled_sample() -> None:
    a = [float(x) for x in range(1, 11)]
    r = stats.hl_ratio(a, [1.2 * x for x in a])
    assert r.ratio == pytest.approx(1.2, rel=1e-12)
    # the 24th smallest and largest of the 100 log-differences log(1.2 j / i)
    d = sorted(math.log(1.2 * j / i) for i in a for j in a)
    assert r.lo == pytest.approx(math.exp(d[23])) and r.hi == pytest.approx(math.exp(d[76]))
    assert (r.m, r.n, r.level) == (10, 10, 0.95)


def test_hl_ratio_fixed_timings() -> None:
    a = [1.00, 1.02, 0.99, 1.01, 1.03, 0.98, 1.00, 1.01]
    b = [1.21, 1.19, 1.22, 1.20, 1.18, 1.23, 1.20, 1.21]
    r = stats.hl_ratio(a, b)
    assert 1.18 < r.ratio < 1.21
    assert r.lo is not None and r.hi is not None and 1.15 < r.lo < r.ratio < r.hi < 1.25
    assert stats.verdict(r, 0.10) == "slower"
    assert stats.verdict(stats.hl_ratio(b, a), 0.10) == "faster"
    same = stats.hl_ratio(a, [x * 1.001 for x in reversed(a)])
    assert stats.verdict(same, 0.05) == "same"
    # beyond the threshold but not confirmed by the interval: undecided
    assert stats.verdict(stats.Ratio(1.12, 0.97, 1.30, 0.95, 8, 8), 0.05) == "inconclusive"
    assert stats.verdict(stats.Ratio(0.90, 0.80, 1.02, 0.95, 8, 8), 0.05) == "inconclusive"
    assert stats.verdict(stats.Ratio(1.5, None, None, 0.95, 2, 2), 0.05) == "inconclusive"
    # significant but under the threshold: same (a change too small to count)
    assert stats.verdict(stats.Ratio(1.03, 1.02, 1.04, 0.95, 8, 8), 0.10) == "same"
    assert stats.verdict(stats.Ratio(1.03, 0.95, 1.12, 0.95, 8, 8), 0.10) == "same"
    # exactly at the threshold and confirmed: slower
    assert stats.verdict(stats.Ratio(1.10, 1.05, 1.2, 0.95, 8, 8), 0.10) == "slower"


def test_hl_is_deterministic_and_robust_to_an_outlier() -> None:
    a = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0]
    b = list(a)
    b[3] = 50.0  # one repeat hit by a page fault storm
    r1, r2 = stats.hl_ratio(a, b), stats.hl_ratio(a, b)
    assert r1 == r2
    assert stats.verdict(r1, 0.05) == "same"


def test_median_ci_order_statistics() -> None:
    assert stats.median_ci([float(x) for x in range(1, 21)]) == (10.5, 6.0, 15.0)
    assert stats.median_ci([3.0, 1.0, 2.0]) == (2.0, None, None)  # n = 3: no 95 % interval
    m, lo, hi = stats.median_ci([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # n = 6: x(1), x(6)
    assert (m, lo, hi) == (3.5, 1.0, 6.0)


@pytest.mark.parametrize(
    "a, b, msg",
    [
        ([], [1.0], "at least one"),
        ([1.0, 0.0], [1.0], "finite and > 0"),
        ([1.0], [float("nan")], "finite and > 0"),
        ([1.0], [-2.0], "finite and > 0"),
    ],
)
def test_hl_refuses_bad_samples(a: list, b: list, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        stats.hl_ratio(a, b)


def test_verdict_refuses_a_bad_threshold() -> None:
    with pytest.raises(ValueError, match="threshold must be > 0"):
        stats.verdict(stats.Ratio(1.0, 0.9, 1.1, 0.95, 5, 5), 0.0)


def test_best_of_keeps_each_groups_fastest_batch() -> None:
    """bench --best-of K: a time_evaluator result of R*K batches becomes R
    repeats, each its group's fastest batch by wall clock and by device
    timer (no device figure where a batch of the group has none)."""
    from vmrpc_farm.jobs import _best_of

    t = {"number": 2, "results": [3.0, 1.0, 2.0, 5.0, 4.0, 6.0, 9.0],
         "device_results": [2.5, 0.9, 1.8, 4.0, None, 5.0, 8.0], "warmup": 0.5,
         "gate_wait": 0.0}
    b = _best_of(t, 3)
    assert b["results"] == [1.0, 4.0]  # the 7th batch, a group of one, is left out
    assert b["device_results"] == [0.9, None]
    assert (b["number"], b["best_of"], b["median"], b["min"], b["max"]) == (2, 3, 2.5, 1.0, 4.0)
    assert b["device_median"] == 0.9 and b["warmup"] == 0.5
