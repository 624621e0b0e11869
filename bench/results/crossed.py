"""Inference for runs that cross initialisation seeds with batch-order seeds.

A study such as ``variance_seeds`` trains every head for every (``seed``, ``order_seed``)
pair of an I × J grid. Its I·J runs are not independent: runs sharing a seed share that
seed's initialisation effect, and runs sharing an order seed share its data order (and
the *same* order seeds serve every seed and every head). A Student-t interval over the
I·J values treats them as independent and is too narrow; a paired t-test over I·J
differences is anti-conservative (with a seed effect it counts one seed J times).

The model is the two-way random-effects model without replication,
``x_ij = μ + a_i + b_j + e_ij`` with ``a_i ~ (0, σ_a²)``, ``b_j ~ (0, σ_b²)`` and
``e_ij ~ (0, σ_e²)`` (the seed × order interaction is not separable from ``e`` with
one run per pair). The grand mean's variance is ``σ_a²/I + σ_b²/J + σ_e²/(IJ)``. With the
ANOVA mean squares ``MS_A`` (seeds, I−1 df), ``MS_B`` (orders, J−1 df) and ``MS_E``
(residual, (I−1)(J−1) df), whose expectations are ``σ_e² + Jσ_a²``, ``σ_e² + Iσ_b²`` and
``σ_e²``, the unbiased estimate is ``V = (MS_A + MS_B − MS_E)/(IJ)``; a variance
component whose estimate is negative is set to 0 (its mean square then drops out of
``V``). Satterthwaite's (1946) approximation gives ``V``'s degrees of freedom,
``V² / Σ_k (c_k MS_k)² / df_k``, and ``(x̄ − μ0)/√V`` is referred to Student's t with them:
the standard analysis of a balanced crossed design (e.g. subjects × items, Clark 1973;
Baayen, Davidson & Bates 2008). With J = 1 or I = 1 the design is not crossed and the
ordinary t applies.

The decomposition itself (:func:`two_way`, :class:`TwoWay`) and the cut of a grid with
missing runs to a complete part (:func:`complete_grid`) are also what
:mod:`bench.results.variance` reports as the variance components of such a study.

For a bootstrap interval the grid is resampled as a whole: rows (seeds) and columns
(orders) are drawn with replacement independently and the mean of the resampled grid is
recomputed, Owen's (2007) "pigeonhole" bootstrap, which is mildly conservative for this
model; its percentile interval is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

#: The bootstrap method name of :func:`pigeonhole_interval`, as shown in tables.
PIGEONHOLE = "pigeonhole"


@dataclass(frozen=True)
class TwoWay:
    """A two-way analysis of variance without replication (rows × columns, one value each).

    Attributes:
        n_rows: Rows (initialisation seeds).
        n_cols: Columns (order seeds).
        grand_mean: Mean of every cell.
        ss_rows: Sum of squares between rows.
        ss_cols: Sum of squares between columns.
        ss_resid: Residual (interaction) sum of squares.
        var_rows: Row variance component (method of moments, at least 0).
        var_cols: Column variance component.
        var_resid: Residual variance (the residual mean square).
        p_rows: F test of the rows (NaN where the residual mean square is 0).
        p_cols: F test of the columns.
    """

    n_rows: int
    n_cols: int
    grand_mean: float
    ss_rows: float
    ss_cols: float
    ss_resid: float
    var_rows: float
    var_cols: float
    var_resid: float
    p_rows: float
    p_cols: float

    @property
    def var_total(self) -> float:
        """The sum of the three components."""
        return self.var_rows + self.var_cols + self.var_resid

    def share(self, component: float) -> float:
        """A component's share of :attr:`var_total` (NaN when the total is 0)."""
        total = self.var_total
        return component / total if total > 0 else math.nan


def two_way(values: np.ndarray) -> TwoWay:
    """Decompose a complete rows × columns grid (one value per cell).

    Args:
        values: A 2-D array without NaN, at least 2 × 2.

    Returns:
        The sums of squares, variance components and F-test p-values.

    Raises:
        ValueError: For a grid smaller than 2 × 2 or with a missing value.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 2 or min(x.shape) < 2:
        raise ValueError(f"a two-way grid needs at least 2 x 2 values, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("a two-way grid needs a finite value in every cell")
    n_rows, n_cols = x.shape
    grand = float(x.mean())
    rows = x.mean(axis=1)
    cols = x.mean(axis=0)
    ss_rows = float(n_cols * ((rows - grand) ** 2).sum())
    ss_cols = float(n_rows * ((cols - grand) ** 2).sum())
    resid = x - rows[:, None] - cols[None, :] + grand
    ss_resid = float((resid**2).sum())
    df_rows, df_cols = n_rows - 1, n_cols - 1
    df_resid = df_rows * df_cols
    ms_rows, ms_cols, ms_resid = ss_rows / df_rows, ss_cols / df_cols, ss_resid / df_resid
    tiny = 1e-12 * max(1.0, float((x**2).mean()))
    if ms_resid > tiny:
        p_rows = float(sps.f.sf(ms_rows / ms_resid, df_rows, df_resid))
        p_cols = float(sps.f.sf(ms_cols / ms_resid, df_cols, df_resid))
    else:  # an additive grid: F is undefined
        p_rows = p_cols = math.nan
    return TwoWay(
        n_rows=n_rows,
        n_cols=n_cols,
        grand_mean=grand,
        ss_rows=ss_rows,
        ss_cols=ss_cols,
        ss_resid=ss_resid,
        var_rows=max(0.0, (ms_rows - ms_resid) / n_cols),
        var_cols=max(0.0, (ms_cols - ms_resid) / n_rows),
        var_resid=ms_resid,
        p_rows=p_rows,
        p_cols=p_cols,
    )


def complete_grid(wide: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The largest complete part of a rows × columns grid, found by dropping gaps greedily.

    Repeatedly drops the row or column with the most missing values (rows first on ties)
    until no value is missing.

    Args:
        wide: Rows × columns with NaN where a run is missing.

    Returns:
        The complete grid and how many present values were dropped with it.
    """
    grid = wide.copy()
    present = int(grid.notna().sum().sum())
    while grid.size and grid.isna().to_numpy().any():
        by_row = grid.isna().sum(axis=1)
        by_col = grid.isna().sum(axis=0)
        if by_row.max() >= by_col.max():
            grid = grid.drop(index=by_row.idxmax())
        else:
            grid = grid.drop(columns=by_col.idxmax())
    return grid, present - int(grid.notna().sum().sum())


@dataclass(frozen=True)
class CrossedMean:
    """The grand mean of an I × J crossed grid with its standard error.

    Attributes:
        mean: The grand mean.
        se: Its standard error, ``√V`` (module docstring).
        df: Satterthwaite's degrees of freedom of ``V`` (NaN when ``V`` is 0).
        seeds: I, the rows.
        orders: J, the columns.
        ms_seed: ``MS_A``.
        ms_order: ``MS_B``.
        ms_error: ``MS_E``.
    """

    mean: float
    se: float
    df: float
    seeds: int
    orders: int
    ms_seed: float
    ms_order: float
    ms_error: float


def grid_of(values: pd.Series) -> pd.DataFrame | None:
    """Values indexed by (seed, order_seed) as a complete seeds × orders grid, if crossed.

    Runs form a crossed design when at least two seeds each ran with at least two order
    seeds. Where some runs are missing (a failed cell), the grid is cut to a complete part
    by :func:`complete_grid` (as the variance table cuts it); a part with fewer than two
    rows or columns is no grid.

    Args:
        values: A Series with a two-level index (seed, order_seed); NaNs count as missing.

    Returns:
        The grid (rows: seeds, columns: order seeds, no NaN), or None when the runs are
        not crossed (one order per seed, or one seed per order).
    """
    finite = values.dropna()
    if finite.empty or finite.index.nlevels != 2:
        return None
    wide = finite.unstack()
    if wide.shape[0] < 2 or wide.shape[1] < 2:
        return None
    grid, _ = complete_grid(wide)
    if grid.shape[0] < 2 or grid.shape[1] < 2:
        return None
    return grid


def crossed_mean(grid: np.ndarray | pd.DataFrame) -> CrossedMean:
    """The grand mean of a crossed grid, its standard error and Satterthwaite df.

    Args:
        grid: I × J values (I, J ≥ 2), no NaN.

    Returns:
        The :class:`CrossedMean` (module docstring for the formulas).

    Raises:
        ValueError: For a grid smaller than 2 × 2 or with NaNs (:func:`two_way`).
    """
    fit = two_way(np.asarray(grid, dtype=float))
    n_i, n_j = fit.n_rows, fit.n_cols
    mean = fit.grand_mean
    df_a, df_b = n_i - 1, n_j - 1
    df_e = df_a * df_b
    ms_a, ms_b, ms_e = fit.ss_rows / df_a, fit.ss_cols / df_b, fit.ss_resid / df_e
    cells = n_i * n_j
    seed_on = ms_a > ms_e  # σ_a² estimate (MS_A − MS_E)/J is positive
    order_on = ms_b > ms_e
    c_a = 1.0 / cells if seed_on else 0.0
    c_b = 1.0 / cells if order_on else 0.0
    c_e = (1.0 - int(seed_on) - int(order_on)) / cells
    var = c_a * ms_a + c_b * ms_b + c_e * ms_e
    terms = (c_a * ms_a) ** 2 / df_a + (c_b * ms_b) ** 2 / df_b + (c_e * ms_e) ** 2 / df_e
    df = var**2 / terms if var > 0 and terms > 0 else float("nan")
    return CrossedMean(
        mean=mean,
        se=math.sqrt(max(var, 0.0)),
        df=float(df),
        seeds=n_i,
        orders=n_j,
        ms_seed=ms_a,
        ms_order=ms_b,
        ms_error=ms_e,
    )


def crossed_t_interval(
    grid: np.ndarray | pd.DataFrame, confidence: float = 0.95
) -> tuple[float, float]:
    """Student-t interval of a crossed grid's mean with Satterthwaite's df.

    Args:
        grid: I × J values (I, J ≥ 2), no NaN.
        confidence: Confidence level.

    Returns:
        ``(low, high)``; the zero-width interval at the mean for a constant grid.
    """
    est = crossed_mean(grid)
    if est.se == 0.0 or not np.isfinite(est.df):
        return est.mean, est.mean
    low, high = sps.t.interval(confidence, df=est.df, loc=est.mean, scale=est.se)
    return float(low), float(high)


def crossed_t_test(
    diffs: np.ndarray | pd.DataFrame, confidence: float = 0.95
) -> tuple[float, float, float, str]:
    """Two-sided test that a crossed grid of paired differences has mean 0, with interval.

    Args:
        diffs: I × J differences a − b, one per (seed, order seed), no NaN.
        confidence: Confidence level of the interval of the mean difference.

    Returns:
        ``(p, low, high, reason)``; NaNs with a reason when every difference is the same
        (the standard error is 0 and t undefined).
    """
    est = crossed_mean(diffs)
    if est.se == 0.0 or not np.isfinite(est.df):
        nan = float("nan")
        if est.mean == 0.0:
            return nan, nan, nan, "all differences zero"
        return nan, nan, nan, "differences constant: t undefined"
    t = est.mean / est.se
    p = 2.0 * float(sps.t.sf(abs(t), df=est.df))
    low, high = sps.t.interval(confidence, df=est.df, loc=est.mean, scale=est.se)
    return p, float(low), float(high), ""


def pigeonhole_interval(
    grid: np.ndarray | pd.DataFrame,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, str]:
    """Percentile interval of a crossed grid's mean by Owen's pigeonhole bootstrap.

    Each resample draws I rows and J columns with replacement, independently
    (``rng.integers``: every resample's rows, then every resample's columns), and takes
    the mean of the I × J grid they index.

    Args:
        grid: I × J values (I, J ≥ 2), no NaN.
        confidence: Confidence level.
        n_resamples: Resamples.
        seed: Seed of ``numpy.random.default_rng``.

    Returns:
        ``(low, high, method)``: method :data:`PIGEONHOLE`, or ``"constant"`` for a
        constant grid (the single value).
    """
    x = np.asarray(grid, dtype=float)
    crossed_mean(x)  # validates the shape
    if np.all(x == x.flat[0]):
        return float(x.flat[0]), float(x.flat[0]), "constant"
    rng = np.random.default_rng(seed)
    n_i, n_j = x.shape
    rows = rng.integers(0, n_i, size=(n_resamples, n_i))
    cols = rng.integers(0, n_j, size=(n_resamples, n_j))
    means = x[rows[:, :, None], cols[:, None, :]].mean(axis=(1, 2))
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high), PIGEONHOLE


def design_text(grid: pd.DataFrame | np.ndarray | None) -> str:
    """``"5 seeds × 5 orders"`` for a crossed grid, ``""`` for independent runs."""
    if grid is None:
        return ""
    n_i, n_j = np.asarray(grid).shape
    return f"{n_i} seeds × {n_j} orders"
