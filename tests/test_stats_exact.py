"""The exact Mann-Whitney null distribution of evidence/stats.py against scipy's exact one."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from evidence import stats


def _scipy_cdf(m: int, n: int, k: int) -> float:
    x, y = stats._data_with_u(m, n, k)
    return float(sps.mannwhitneyu(x, y, alternative="less", method="exact").pvalue)


@pytest.mark.parametrize("m", range(1, 16))
def test_null_cdf_equals_scipy_exact(m: int) -> None:
    for n in range(1, 16):
        cum = stats.u_cumulative_counts(m, n)
        assert len(cum) == m * n + 1 and cum[-1] == math.comb(m + n, m)
        assert stats.u_cumulative_counts(n, m) == cum  # U's law is symmetric in m, n
        step = max(1, (m * n) // 12)
        for k in sorted({0, min(1, m * n), m * n // 2, m * n, *range(0, m * n + 1, step)}):
            ours = stats.null_cdf(m, n, k)
            assert ours == pytest.approx(_scipy_cdf(m, n, k), rel=1e-12, abs=1e-15), (m, n, k)


def test_counts_are_the_distribution_of_u() -> None:
    # 2 vs 2: orderings of xxyy give U = 0,1,2,2,3,4 -> counts 1,1,2,1,1
    assert stats.u_cumulative_counts(2, 2) == (1, 2, 4, 5, 6)
    # 1 vs n: U is uniform on 0..n
    assert stats.u_cumulative_counts(1, 5) == (1, 2, 3, 4, 5, 6)


def test_large_designs_use_the_normal_approximation() -> None:
    m = n = 101  # beyond EXACT_LIMIT_PAIRS
    assert stats.u_method(m, n) == "asymptotic"
    k = m * n // 3
    x, y = stats._data_with_u(m, n, k)
    want = sps.mannwhitneyu(x, y, alternative="less", method="asymptotic").pvalue
    assert stats.null_cdf(m, n, k) == pytest.approx(float(want))


def test_bad_designs_raise() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        stats.u_cumulative_counts(0, 3)
    with pytest.raises(ValueError, match="outside"):
        stats.null_cdf(3, 3, 10)
