"""Crossed seeds × order seeds: the grid and its grand mean (docs/statistics.md)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd


class CrossedMean(NamedTuple):
    """A crossed grid's grand mean, its standard error and Satterthwaite df (NaN if se is 0)."""

    mean: float
    se: float
    df: float


def mean_squares(grid: np.ndarray | pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Mean squares (rows, columns, residual; float noise is 0) of a complete I×J ≥ 2×2 grid, df."""
    x = np.asarray(grid, dtype=float)
    if x.ndim != 2 or min(x.shape) < 2 or not np.isfinite(x).all():
        raise ValueError(f"a crossed grid needs at least 2 x 2 finite values, got {x.shape}")
    (n_i, n_j), grand = x.shape, x.mean()
    rows, cols = x.mean(axis=1), x.mean(axis=0)
    resid = x - rows[:, None] - cols[None, :] + grand
    ss = [n_j * ((rows - grand) ** 2).sum(), n_i * ((cols - grand) ** 2).sum(), (resid**2).sum()]
    df = np.array([n_i - 1, n_j - 1, (n_i - 1) * (n_j - 1)])
    ms = np.array(ss) / df
    return np.where(ms > 1e-12 * max(1.0, float((x**2).mean())), ms, 0.0), df


def grid_of(values: pd.Series) -> pd.DataFrame | None:
    """(seed, order_seed) values as a complete grid, cutting the most gapped row/column; or None."""
    finite = values.dropna()
    if finite.empty or finite.index.nlevels != 2:
        return None
    grid = finite.unstack()
    while grid.size and grid.isna().to_numpy().any():
        by_row, by_col = grid.isna().sum(axis=1), grid.isna().sum(axis=0)
        row = by_row.max() >= by_col.max()
        grid = grid.drop(index=by_row.idxmax()) if row else grid.drop(columns=by_col.idxmax())
    return grid if min(grid.shape) >= 2 else None


def crossed_mean(grid: np.ndarray | pd.DataFrame) -> CrossedMean:
    """The grand mean of an I × J grid (I, J ≥ 2) with its standard error."""
    ms, df = mean_squares(grid)
    on = (ms[:2] > ms[2]).astype(float)  # a positive seed / order component
    c = np.array([on[0], on[1], 1.0 - on.sum()]) / np.size(grid)
    var, terms = float(c @ ms), float(((c * ms) ** 2 / df).sum())
    df_v = var**2 / terms if var > 0 and terms > 0 else math.nan
    return CrossedMean(float(np.mean(grid)), math.sqrt(max(var, 0.0)), df_v)
