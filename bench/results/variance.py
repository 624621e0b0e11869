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

from bench.results.crossed import TwoWay, complete_grid, grid_of, two_way
from bench.results.stats import GROUP_KEYS, ORDER_FROM_SEED, PAIR_KEYS, run_values

#: Significance level of the F tests that name a failure origin.
ALPHA = 0.05
#: What :func:`failure_origin` may answer.
ORIGINS = ("none", "every run", "initialisation", "batch order", "both", "not separable")
#: :func:`order_design`: every run's batch order comes from its seed (no order seed).
FROM_SEED = "from seed"
#: :func:`order_design`: the runs form a seeds × order seeds grid (:func:`run_grid`).
CROSSED = "crossed"
#: :func:`order_design`: each run's order seed is its seed (one batch order per seed).
ORDER_IS_SEED = "order_seed = seed"
#: :func:`order_design`: every run has the same order seed (one batch order for all seeds).
ONE_ORDER = "one order"
#: :func:`order_design`: order seeds of their own that vary, but form no grid.
NOT_CROSSED = "not crossed"
#: What :func:`order_design` may answer.
DESIGNS = (FROM_SEED, CROSSED, ORDER_IS_SEED, ONE_ORDER, NOT_CROSSED)
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


def run_grid(runs: pd.DataFrame) -> pd.DataFrame | None:
    """The seeds × order seeds grid that one setting's runs form, or None when not crossed.

    The one definition of a crossed design, :func:`bench.results.crossed.grid_of` (a
    complete grid of at least 2 seeds × 2 order seeds after
    :func:`~bench.results.crossed.complete_grid`), applied to the runs that ran: a failed
    run counts (the design is what ran, not what scored), a run whose batch order comes
    from its seed (:data:`~bench.results.stats.ORDER_FROM_SEED`) has no order seed and
    does not.

    Args:
        runs: One setting's :func:`bench.results.stats.run_values` rows.

    Returns:
        The grid (rows: seeds, columns: order seeds; every value 1), or None.
    """
    own = runs.loc[runs["order_seed"] != ORDER_FROM_SEED, PAIR_KEYS].drop_duplicates()
    if own.empty:
        return None
    return grid_of(pd.Series(1.0, index=pd.MultiIndex.from_frame(own)))


def order_design(runs: pd.DataFrame) -> str:
    """How one setting's batch orders relate to its seeds (:data:`DESIGNS`).

    Args:
        runs: One setting's :func:`bench.results.stats.run_values` rows.

    Returns:
        :data:`CROSSED` when the runs form a grid (:func:`run_grid`); else
        :data:`FROM_SEED` when no run has an order seed of its own,
        :data:`ORDER_IS_SEED` when each run's order seed is its seed, :data:`ONE_ORDER`
        when every run has the same one, :data:`NOT_CROSSED` otherwise.
    """
    return _design(runs, run_grid(runs))


def _design(runs: pd.DataFrame, grid: pd.DataFrame | None) -> str:
    """:func:`order_design` given the runs' :func:`run_grid` (computed once by the caller)."""
    own = runs[runs["order_seed"] != ORDER_FROM_SEED]
    if own.empty:
        return FROM_SEED
    if grid is not None:
        return CROSSED
    if bool((own["order_seed"] == own["seed"]).all()):
        return ORDER_IS_SEED
    if own["order_seed"].nunique() == 1:
        return ONE_ORDER
    return NOT_CROSSED


def order_designs(runs: pd.DataFrame) -> pd.DataFrame:
    """:func:`order_design` of every setting, with its numbers of seeds and batch orders.

    Args:
        runs: :func:`bench.results.stats.run_values` rows.

    Returns:
        One row per setting: :data:`~bench.results.stats.GROUP_KEYS`, ``design``,
        ``n_seeds`` (distinct seeds) and ``n_orders`` (the grid's order seeds where
        crossed, else the distinct order seeds of the runs' own; 0 for
        :data:`FROM_SEED`).
    """
    rows = []
    for keys, group in runs.groupby(GROUP_KEYS, sort=True):
        grid = run_grid(group)
        own = group.loc[group["order_seed"] != ORDER_FROM_SEED, "order_seed"]
        rows.append(
            {
                **dict(zip(GROUP_KEYS, keys, strict=True)),
                "design": _design(group, grid),
                "n_seeds": int(group["seed"].nunique()),
                "n_orders": int(grid.shape[1]) if grid is not None else int(own.nunique()),
            }
        )
    return pd.DataFrame(rows, columns=[*GROUP_KEYS, "design", "n_seeds", "n_orders"])


def crossed(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the settings whose seeds are crossed with order seeds (:func:`run_grid`).

    Args:
        runs: :func:`bench.results.stats.run_values` rows.

    Returns:
        Those settings' runs that have an order seed of their own (an empty frame when no
        setting is crossed).
    """
    own = runs[runs["order_seed"] != ORDER_FROM_SEED]
    if own.empty:
        return own
    designs = order_designs(own)
    keep = pd.MultiIndex.from_frame(designs.loc[designs["design"] == CROSSED, GROUP_KEYS])
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
        failures and :func:`failure_origin` with its p-values. Empty when no setting's
        runs are crossed (:func:`run_grid`).
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
