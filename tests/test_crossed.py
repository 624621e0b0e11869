"""Crossed seed × batch-order grids: the complete grid and the standard error of its mean.

The mean squares come from statsmodels' ANOVA of the additive model, the variance of the
grand mean from the row- and column-means form, and the interval's behaviour from
simulation of the two-way random-effects model.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.formula.api import ols
from statsmodels.stats.anova import anova_lm

from bench.results import crossed


def _grid(rng: np.random.Generator, n_i: int, n_j: int, sa: float, sb: float, se: float):
    """A draw of x_ij = a_i + b_j + e_ij with the given standard deviations."""
    return (
        rng.normal(0, sa, size=(n_i, 1))
        + rng.normal(0, sb, size=(1, n_j))
        + rng.normal(0, se, size=(n_i, n_j))
    )


def _statsmodels_ms(x: np.ndarray) -> pd.Series:
    """Mean squares of seeds, orders and residual by statsmodels' ANOVA of the additive model."""
    frame = pd.DataFrame(
        [(i, j, x[i, j]) for i, j in itertools.product(*map(range, x.shape))],
        columns=["seed", "order", "y"],
    )
    return anova_lm(ols("y ~ C(seed) + C(order)", frame).fit())["mean_sq"]


@pytest.mark.parametrize(
    ("shape", "seed", "sb"), [((5, 4), 3, 0.7), ((3, 7), 4, 0.0), ((10, 2), 5, 0.7)]
)
def test_the_mean_squares_and_the_standard_error_match_independent_constructions(shape, seed, sb):
    n_i, n_j = shape
    x = _grid(np.random.default_rng(seed), n_i, n_j, sa=1.0, sb=sb, se=0.5)
    ms, df = crossed.mean_squares(x)
    ms_a, ms_b, ms_e = _statsmodels_ms(x).to_numpy()
    assert bool(ms_b > ms_e) == (sb > 0)  # both branches: an order component kept, and dropped
    np.testing.assert_allclose(ms, [ms_a, ms_b, ms_e], rtol=1e-10)
    assert df.tolist() == [n_i - 1, n_j - 1, (n_i - 1) * (n_j - 1)]
    est = crossed.crossed_mean(x)
    assert est.mean == pytest.approx(x.mean(), rel=1e-12)
    # V from the components that are positive: var(row means)/I = MS_A/(IJ), and so on
    var = ms_e / x.size
    var += (ms_a > ms_e) * (np.var(x.mean(axis=1), ddof=1) / n_i - ms_e / x.size)
    var += (ms_b > ms_e) * (np.var(x.mean(axis=0), ddof=1) / n_j - ms_e / x.size)
    assert est.se == pytest.approx(math.sqrt(var), rel=1e-10)
    c_e = (1 - (ms_a > ms_e) - (ms_b > ms_e)) / x.size
    terms = ((ms_a > ms_e) * ms_a / x.size) ** 2 / (n_i - 1)
    terms += ((ms_b > ms_e) * ms_b / x.size) ** 2 / (n_j - 1)
    terms += (c_e * ms_e) ** 2 / ((n_i - 1) * (n_j - 1))
    assert est.df == pytest.approx(var**2 / terms, rel=1e-10)


def test_a_negative_component_drops_out_and_leaves_the_t_over_seed_means():
    # no order effect and a large residual: MS_B < MS_E, so V = MS_A / (IJ) with I - 1 df
    x = np.array([[0.0, 1.0, -1.0], [5.0, 4.0, 6.0], [2.0, 3.0, 1.0], [9.0, 7.0, 8.0]])
    ms = _statsmodels_ms(x).to_numpy()
    assert ms[1] < ms[2] < ms[0]
    est = crossed.crossed_mean(x)
    assert est.se == pytest.approx(sps.sem(x.mean(axis=1)), rel=1e-12)
    assert est.df == pytest.approx(3.0, rel=1e-12)


def test_a_constant_grid_has_no_error_and_no_degrees_of_freedom():
    est = crossed.crossed_mean(np.full((3, 4), 0.81) + 1e-17 * np.arange(12).reshape(3, 4))
    assert est.mean == pytest.approx(0.81) and est.se == 0.0 and math.isnan(est.df)
    with pytest.raises(ValueError, match="2 x 2"):
        crossed.crossed_mean(np.ones((1, 4)))
    with pytest.raises(ValueError, match="2 x 2"):
        crossed.crossed_mean(np.array([[1.0, np.nan], [2.0, 3.0]]))


def test_the_crossed_interval_keeps_its_level_where_the_naive_one_does_not():
    rng = np.random.default_rng(1)
    covered = naive = 0
    for _ in range(1000):
        x = 3.0 + _grid(rng, 5, 5, sa=0.5, sb=1.0, se=0.3)
        est = crossed.crossed_mean(x)
        low, high = sps.t.interval(0.95, est.df, loc=est.mean, scale=est.se)
        covered += low <= 3.0 <= high
        iid = sps.ttest_1samp(x.ravel(), 3.0).confidence_interval(0.95)
        naive += iid.low <= 3.0 <= iid.high
    assert 0.92 <= covered / 1000 <= 0.98
    assert naive / 1000 < 0.75  # 25 runs counted as independent: far too narrow


def _indexed(pairs, values) -> pd.Series:
    index = pd.MultiIndex.from_tuples(pairs, names=["seed", "order_seed"])
    return pd.Series(np.asarray(values, dtype=float), index=index)


def test_grids_are_found_only_where_seeds_and_orders_cross():
    pairs = list(itertools.product([1, 2, 3], [1, 2, 3, 4]))
    values = _indexed(pairs, np.arange(12.0))
    grid = crossed.grid_of(values)
    assert grid is not None and grid.shape == (3, 4)
    np.testing.assert_array_equal(grid.to_numpy(), np.arange(12.0).reshape(3, 4))
    # one missing run: its row goes (rows first on a tie), the rest stays whole
    holed = values.copy()
    holed[(2, 3)] = np.nan
    kept = crossed.grid_of(holed)
    assert kept is not None and list(kept.index) == [1, 3] and list(kept.columns) == [1, 2, 3, 4]
    # a whole order missing for two seeds of four: the column goes, not two rows
    more = _indexed(list(itertools.product([1, 2, 3, 4], [1, 2, 3])), np.arange(12.0))
    kept = crossed.grid_of(more.drop([(1, 3), (2, 3)]))
    assert kept is not None and kept.shape == (4, 2)
    # the order drawn from the seed, or one order per seed: not crossed
    assert crossed.grid_of(_indexed([(1, -1), (2, -1), (3, -1)], [0.1, 0.2, 0.3])) is None
    assert crossed.grid_of(_indexed([(1, 1), (2, 2), (3, 3)], [0.1, 0.2, 0.3])) is None
    assert crossed.grid_of(_indexed([(1, 1), (1, 2), (2, 3), (2, 4)], [0.1] * 4)) is None
