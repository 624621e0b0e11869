"""Where a head's spread comes from: initialisation against batch order (torch-free).

A run's ``seed`` draws the head's initial weights and its dropout masks; with ``order_seed``
set, the training batch order comes from a seed of its own (:mod:`bench.axes.optional`). A
study that crosses the two (``experiment=variance_seeds``: every ``seed`` × every
``order_seed``) gives each head an I × O grid of scores, which a two-way analysis of
variance without replication splits into

- an **initialisation** component (between the rows: ``seed``),
- a **batch-order** component (between the columns: ``order_seed``),
- a **residual**: their interaction, which one run per pair cannot tell from other noise.

Components are the random-effects method-of-moments estimates, truncated at zero:
``var_init = max(0, (MS_init - MS_resid) / O)``, ``var_order = max(0, (MS_order - MS_resid) / I)``,
``var_resid = MS_resid``; each factor has the F test ``MS_factor / MS_resid``. This follows
Dodge et al. (2020), who found weight initialisation and data order to contribute comparably
to fine-tuning variance, and that some initialisations fail consistently.

The same decomposition of the 0/1 failure indicator (a run at or below the best constant, or
not ``ok``) says where a head's failures come from: ``initialisation`` when the rows explain
them (some initialisations fail whatever the order), ``batch order`` when the columns do.
On a 0/1 outcome the F test is an approximation; with few failures it rarely rejects, and the
origin is then reported as ``not separable``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.results.crossed import TwoWay, complete_grid, two_way
from bench.results.stats import GROUP_KEYS, ORDER_FROM_SEED, run_values

#: Significance level of the F tests that name a failure origin.
ALPHA = 0.05
#: What :func:`failure_origin` may answer.
ORIGINS = ("none", "every run", "initialisation", "batch order", "both", "not separable")
#: Columns of :func:`variance_table`.
VARIANCE_COLUMNS = [
    *GROUP_KEYS,
    "metric",
    "split",
    "n_init",
    "n_order",
    "runs_left_out",
    "mean",
    "sd_total",
    "sd_init",
    "sd_order",
    "sd_resid",
    "share_init",
    "share_order",
    "share_resid",
    "p_init",
    "p_order",
    "failures",
    "fail_p_init",
    "fail_p_order",
    "failure_origin",
]


def failure_origin(failed: np.ndarray, alpha: float = ALPHA) -> tuple[str, TwoWay | None]:
    """Where a grid's failures come from (:data:`ORIGINS`), by the two-way F tests.

    Args:
        failed: A complete rows (initialisation) × columns (order) grid of 0/1.
        alpha: The level of the F tests.

    Returns:
        The origin and the decomposition of the indicator (None when all or none failed).
    """
    x = np.asarray(failed, dtype=float)
    if not x.any():
        return "none", None
    if x.all():
        return "every run", None
    fit = two_way(x)
    if math.isnan(fit.p_rows):  # additive: rows and columns explain every failure exactly
        init, order = fit.ss_rows > 0, fit.ss_cols > 0
    else:
        init = fit.p_rows < alpha and fit.var_rows > 0
        order = fit.p_cols < alpha and fit.var_cols > 0
    if init and order:
        return "both", fit
    if init:
        return "initialisation", fit
    if order:
        return "batch order", fit
    return "not separable", fit


def crossed(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of settings whose seeds are crossed with order seeds (≥ 2 of each).

    Args:
        runs: :func:`bench.results.stats.run_values` rows.

    Returns:
        The runs of those settings (an empty frame when no setting is crossed).
    """
    own = runs[runs["order_seed"] != ORDER_FROM_SEED]
    if own.empty:
        return own
    sizes = own.groupby(GROUP_KEYS)[["seed", "order_seed"]].nunique()
    keep = sizes[(sizes["seed"] >= 2) & (sizes["order_seed"] >= 2)].index
    return own.set_index(GROUP_KEYS).loc[lambda f: f.index.isin(keep)].reset_index()


def variance_table(table: pd.DataFrame, metric: str = "main", split: str = "dev") -> pd.DataFrame:
    """One row per head setting of a crossed study: the decomposition of its scores.

    Args:
        table: A tidy results table.
        metric: A metric name, or ``"main"`` for each task's main metric.
        split: The reporting split.

    Returns:
        Columns :data:`VARIANCE_COLUMNS`: grid size (``n_init`` × ``n_order`` after
        dropping incomplete rows/columns, ``runs_left_out``), mean, total standard
        deviation of the grid, the components as standard deviations (``sd_init``,
        ``sd_order``, ``sd_resid``) and shares of their sum, the F-test p-values,
        failures and :func:`failure_origin` with its p-values. Empty when no setting
        crosses ≥ 2 seeds with ≥ 2 order seeds.
    """
    runs = crossed(run_values(table, metric=metric, split=split))
    rows = []
    for keys, group in runs.groupby(GROUP_KEYS, sort=True):
        scores, left_out = complete_grid(
            group.pivot_table(index="seed", columns="order_seed", values="value")
        )
        failed = group.pivot_table(index="seed", columns="order_seed", values="failed")
        failed, _ = complete_grid(failed.astype(float))
        row: dict[str, object] = {
            **dict(zip(GROUP_KEYS, keys, strict=True)),
            "metric": group["metric"].iloc[0],
            "split": split,
            "runs_left_out": left_out,
            "failures": int(group["failed"].sum()),
        }
        if min(scores.shape) >= 2:
            x = scores.to_numpy(dtype=float)
            fit = two_way(x)
            row.update(
                n_init=fit.n_rows,
                n_order=fit.n_cols,
                mean=fit.grand_mean,
                sd_total=float(x.std(ddof=1)),
                sd_init=math.sqrt(fit.var_rows),
                sd_order=math.sqrt(fit.var_cols),
                sd_resid=math.sqrt(fit.var_resid),
                share_init=fit.share(fit.var_rows),
                share_order=fit.share(fit.var_cols),
                share_resid=fit.share(fit.var_resid),
                p_init=fit.p_rows,
                p_order=fit.p_cols,
            )
        else:
            row.update(n_init=scores.shape[0], n_order=scores.shape[1])
        if min(failed.shape) >= 2:
            origin, fail_fit = failure_origin(failed.to_numpy(dtype=float))
            row.update(
                failure_origin=origin,
                fail_p_init=fail_fit.p_rows if fail_fit else math.nan,
                fail_p_order=fail_fit.p_cols if fail_fit else math.nan,
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=VARIANCE_COLUMNS)
