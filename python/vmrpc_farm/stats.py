"""Statistics of ``vmrpc-farm check`` and ``history`` (docs/farm.md), on the
stored raw repeats; no normality assumed anywhere.

- :func:`hl_ratio`: the ratio B/A of two samples of timings as the
  Hodges-Lehmann estimate of the shift of log B against log A (the median of
  all m*n differences log b_j - log a_i, taken back with exp), with the
  distribution-free interval of that shift from the Mann-Whitney U
  distribution (the k-th smallest and k-th largest of those differences).
  Deterministic: the same samples give the same figures. The U distribution
  is exact (a Gaussian binomial coefficient, in integers) up to
  ``EXACT_MAX_MN`` pairs and its normal approximation with the continuity
  correction above that.
- :func:`median_ci`: the median of one sample with the distribution-free
  interval of order statistics from the binomial distribution.
- :func:`verdict`: faster / slower / same / inconclusive from a ratio's
  interval and a threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import List, Optional, Sequence, Tuple

__all__ = ["Ratio", "hl_ratio", "median_ci", "verdict", "u_cdf", "EXACT_MAX_MN"]

EXACT_MAX_MN = 2500  # m*n up to which the U distribution is counted exactly


def _check(xs: Sequence[float], what: str) -> List[float]:
    out = [float(x) for x in xs]
    for x in out:
        if not (x > 0 and math.isfinite(x)):
            raise ValueError(f"{what}: timings must be finite and > 0, got {x!r}")
    return out


def _u_counts(m: int, n: int) -> List[int]:
    """Number of arrangements of m A's and n B's for each U = 0..m*n: the
    coefficients of the Gaussian binomial [m+n choose n]_q, the product over
    i = 1..n of (1 - q^(m+i)) / (1 - q^i), as power series cut at q^(m*n)
    (exact: the quotient is a polynomial of degree m*n)."""
    size = m * n + 1
    c = [1] + [0] * (size - 1)
    for i in range(1, n + 1):
        up = m + i
        for k in range(size - 1, up - 1, -1):
            c[k] -= c[k - up]
        for k in range(i, size):
            c[k] += c[k - i]
    return c


def u_cdf(m: int, n: int, u: int) -> float:
    """P(U <= u) for the Mann-Whitney U of samples of sizes m and n under
    the null (exact up to EXACT_MAX_MN pairs, else the normal approximation)."""
    if u < 0:
        return 0.0
    if u >= m * n:
        return 1.0
    if m * n <= EXACT_MAX_MN:
        c = _u_counts(m, n)
        return sum(c[: u + 1]) / math.comb(m + n, n)
    mu = m * n / 2
    sd = math.sqrt(m * n * (m + n + 1) / 12)
    return NormalDist().cdf((u + 0.5 - mu) / sd)


def _rank_k(m: int, n: int, alpha: float) -> int:
    """The largest k >= 1 with P(U <= k-1) <= alpha/2 (0: none; the sample
    is too small for an interval at this level)."""
    if m * n <= EXACT_MAX_MN:
        c = _u_counts(m, n)
        total = math.comb(m + n, n)
        acc, k = 0, 0
        for u in range(m * n + 1):
            acc += c[u]
            if acc / total > alpha / 2:
                break
            k = u + 1
        return k
    mu = m * n / 2
    sd = math.sqrt(m * n * (m + n + 1) / 12)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return max(0, int(math.floor(mu - z * sd + 0.5)))


@dataclass(frozen=True)
class Ratio:
    ratio: float  # B/A, the Hodges-Lehmann estimate
    lo: Optional[float]  # the interval; None where the samples are too small for it
    hi: Optional[float]
    level: float  # e.g. 0.95
    m: int
    n: int


def hl_ratio(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Ratio:
    """B/A with its interval at ``level`` (see the module's text)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    xa, xb = _check(a, "baseline"), _check(b, "candidate")
    if not xa or not xb:
        raise ValueError("both samples need at least one timing")
    la = [math.log(x) for x in xa]
    lb = [math.log(x) for x in xb]
    d = sorted(y - x for x in la for y in lb)
    mn = len(d)
    mid = (d[(mn - 1) // 2] + d[mn // 2]) / 2
    k = _rank_k(len(xa), len(xb), 1 - level)
    if k < 1:
        return Ratio(math.exp(mid), None, None, level, len(xa), len(xb))
    return Ratio(math.exp(mid), math.exp(d[k - 1]), math.exp(d[mn - k]), level, len(xa), len(xb))


def median_ci(
    xs: Sequence[float], level: float = 0.95
) -> Tuple[float, Optional[float], Optional[float]]:
    """(median, lo, hi): lo, hi are the order statistics x_(j), x_(n+1-j)
    with the largest j such that P(Binomial(n, 1/2) <= j-1) <= (1-level)/2;
    None where n is too small for one."""
    x = sorted(_check(xs, "sample"))
    n = len(x)
    if n == 0:
        raise ValueError("an empty sample has no median")
    med = (x[(n - 1) // 2] + x[n // 2]) / 2
    acc, j = 0.0, 0
    for i in range(n + 1):
        acc += math.comb(n, i) / 2**n
        if acc > (1 - level) / 2:
            break
        j = i + 1
    if j < 1:
        return med, None, None
    return med, x[j - 1], x[n - j]


VERDICTS = ("faster", "slower", "same", "inconclusive")


def verdict(r: Ratio, threshold: float) -> str:
    """slower (a regression): the whole interval above 1 and the estimate
    at least 1+threshold; faster: the whole interval below 1 and the
    estimate at most 1/(1+threshold); same: the estimate within
    [1/(1+threshold), 1+threshold] (a change, if any, below the threshold);
    inconclusive: an estimate beyond the threshold that the interval does
    not confirm (it reaches across 1), or no interval at all."""
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0, got {threshold!r}")
    if r.lo is None or r.hi is None:
        return "inconclusive"
    up, down = 1 + threshold, 1 / (1 + threshold)
    if r.lo > 1 and r.ratio >= up:
        return "slower"
    if r.hi < 1 and r.ratio <= down:
        return "faster"
    if down < r.ratio < up:
        return "same"
    return "inconclusive"
