"""Where a head's spread comes from: initialisation against batch order (docs/statistics.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from bench.results.crossed import grid_of, mean_squares
from bench.results.stats import GROUP_KEYS, ORDER_FROM_SEED, PAIR_KEYS, run_values

ALPHA = 0.05  #: Level of the F tests that name a failure origin.
COMPONENTS = ("init", "order", "resid")  #: In the order of :func:`two_way`.


def two_way(grid: np.ndarray | pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Components (init, order, residual) of a complete grid, and its F tests' p-values."""
    ms, df = mean_squares(grid)
    n_i, n_j = np.shape(grid)
    var = np.array([max(0.0, (ms[0] - ms[2]) / n_j), max(0.0, (ms[1] - ms[2]) / n_i), ms[2]])
    with np.errstate(divide="ignore", invalid="ignore"):
        return var, sps.f.sf(ms[:2] / ms[2], df[:2], df[2])


def variance_table(table: pd.DataFrame, metric: str = "main", split: str = "dev") -> pd.DataFrame:
    """Per head setting crossing seeds with order seeds: components, F tests, failure origin."""
    runs = run_values(table, metric=metric, split=split)
    rows = []
    for keys, group in runs[runs["order_seed"] != ORDER_FROM_SEED].groupby(GROUP_KEYS):
        indexed = group.set_index(PAIR_KEYS)
        scores, failed = grid_of(indexed["value"]), grid_of(indexed["failed"].astype(float))
        if scores is None or failed is None:
            continue
        (var, p), fail_p = two_way(scores), two_way(failed)[1]
        n_failed = int(failed.to_numpy().sum())
        origin = ("not separable", "initialisation", "batch order", "both")[
            int(fail_p[0] < ALPHA) + 2 * int(fail_p[1] < ALPHA)
        ]
        shares = var / var.sum() if var.sum() > 0 else np.full(3, np.nan)
        rows.append(
            dict(zip(GROUP_KEYS, keys, strict=True))
            | {"metric": group["metric"].iloc[0], "mean": float(scores.to_numpy().mean())}
            | {"n_init": scores.shape[0], "n_order": scores.shape[1], "failures": n_failed}
            | {"runs_left_out": len(group) - scores.size, "p_init": p[0], "p_order": p[1]}
            | {f"sd_{c}": v for c, v in zip(COMPONENTS, np.sqrt(var), strict=True)}
            | {f"share_{c}": v for c, v in zip(COMPONENTS, shares, strict=True)}
            | {"fail_p_init": fail_p[0], "fail_p_order": fail_p[1]}
            | {"failure_origin": {0: "none", failed.size: "every run"}.get(n_failed, origin)}
        )
    columns = [*GROUP_KEYS, "metric", "n_init", "n_order", "runs_left_out", "mean"]
    columns += [f"{k}_{c}" for k in ("sd", "share") for c in COMPONENTS]
    columns += ["p_init", "p_order", "failures", "fail_p_init", "fail_p_order", "failure_origin"]
    return pd.DataFrame(rows, columns=columns)
