"""Runs, failure thresholds and expected validation performance over the tidy results table.

Everything here is pandas/numpy/scipy on the table written by :mod:`bench.results.collect`
(one row per cell × split × metric) or on a trials table; nothing imports training code or
torch. Head-vs-head statistics live in :mod:`bench.results.frames`.

* A *run* is one seed (and batch-order seed) of one setting and head (:data:`RUN_KEYS`).
* ``metric="main"`` picks, per run, the row of the task's ``main_metric``.
* A run is **failed** (Mosbach et al. 2021) when its status is not ``ok``, its value is
  undefined (NaN), or its value is at or below the best constant prediction's score
  (:func:`failure_threshold`, with :data:`BASELINE_ATOL`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from bench.data.tasks import ALL_TASKS

#: ``train_size`` of a cell trained on the whole training split (normalised tables).
WHOLE_SPLIT = 0
#: ``order_seed`` of a cell whose batch order was drawn from its ``seed`` (normalised tables).
ORDER_FROM_SEED = -1
#: One setting of one head: a learning curve's training sizes are separate settings.
GROUP_KEYS = ["task", "encoder", "head_label", "freeze_label", "train_size"]
#: One run: a seed, and the order seed where the batch order had a seed of its own.
RUN_KEYS = [*GROUP_KEYS, "seed", "order_seed"]
#: Where heads are compared (paired by :data:`PAIR_KEYS`).
SETTING_KEYS = ["task", "encoder", "freeze_label", "train_size"]
#: What pairs two heads' runs: the same seed and the same batch order.
PAIR_KEYS = ["seed", "order_seed"]
TEXT_COLUMNS = [
    "task",
    "encoder",
    "head",
    "head_label",
    "layers",
    "freeze",
    "freeze_label",
    "status",
    "main_metric",
    "split",
    "metric",
    "reason",
    "run_dir",
]
FLOAT_COLUMNS = ["value", "baseline", "best_constant", "train_time_s"]
REQUIRED_COLUMNS = ["task", "encoder", "seed", "status", "split", "metric", "value"]
# Metrics whose failure threshold is 0 when the table holds no baseline (see module doc).
ZERO_THRESHOLD_METRICS = frozenset({"pearson", "spearman", "mcc"})
BASELINE_ATOL = 1e-6  # "at or below the baseline" tolerates float noise far below one example
CONFIDENCE = 0.95
#: Columns of a trials table (one row per hyperparameter trial of one setting and head).
TRIAL_COLUMNS = [
    "task",
    "encoder",
    "head",
    "head_label",
    "layers",
    "freeze",
    "freeze_label",
    "train_size",
    "trial",
    "status",
    "selection_metric",
    "selection_score",
]


# --------------------------------------------------------------------------- loading


def _main_metric_for(task: str) -> float | str:
    spec = ALL_TASKS.get(task)
    return spec.main_metric if spec is not None else np.nan


def normalize_table(table: pd.DataFrame) -> pd.DataFrame:
    """Return a copy with every expected column present and consistent dtypes.

    Missing optional columns are filled: ``head_label``/``head`` and
    ``freeze_label``/``freeze`` from each other, ``layers``/``baseline``/
    ``best_constant``/``reason`` as missing (older tables have no ``best_constant``),
    ``main_metric`` from the task specs of :mod:`bench.data.tasks`. The optional axes are
    whole numbers: ``train_size`` :data:`WHOLE_SPLIT` and ``order_seed``
    :data:`ORDER_FROM_SEED` where a cell did not set them (so they can key groups).

    Args:
        table: A tidy table as produced by :func:`bench.results.collect.tidy`.

    Returns:
        The normalised copy.

    Raises:
        ValueError: If a required column is missing, or ``main_metric`` cannot be inferred.
    """
    out = table.copy()
    for a, b in (("head_label", "head"), ("freeze_label", "freeze")):
        if a not in out and b in out:
            out[a] = out[b]
        if b not in out and a in out:
            out[b] = out[a]
    missing = [c for c in [*REQUIRED_COLUMNS, "head_label", "freeze_label"] if c not in out]
    if missing:
        raise ValueError(f"results table lacks required columns {missing}")
    for column in ("layers", "baseline", "best_constant", "reason", "run_dir", "train_time_s"):
        if column not in out:
            out[column] = np.nan
    if "summary_token" not in out:  # tables from before decoders: every encoder read [CLS]
        out["summary_token"] = "first"
    derived = out["task"].map(_main_metric_for).astype(object)
    if "main_metric" in out:
        given = out["main_metric"].astype(object)
        out["main_metric"] = given.where(given.notna(), derived)
    else:
        out["main_metric"] = derived
    for column in TEXT_COLUMNS:
        out[column] = out[column].astype("str")
    for column in FLOAT_COLUMNS:
        out[column] = pd.to_numeric(out[column], errors="coerce").astype("float64")
    out["seed"] = pd.to_numeric(out["seed"], errors="coerce").astype("Int64")
    out = fill_axes(out)
    if out["main_metric"].isna().any():
        tasks = sorted(out.loc[out["main_metric"].isna(), "task"].unique())
        raise ValueError(f"no main_metric column and unknown task(s) {tasks}")
    return out


# --------------------------------------------------------------------------- runs


def fill_axes(
    frame: pd.DataFrame, columns: Sequence[str] = ("train_size", "order_seed")
) -> pd.DataFrame:
    """The optional axes as whole numbers that can key groups and merges.

    A missing column or value becomes :data:`WHOLE_SPLIT` (``train_size``) or
    :data:`ORDER_FROM_SEED` (``order_seed``): the cell did not set it.

    Args:
        frame: A table with (or without) the axis columns; not modified.
        columns: The axes to fill.

    Returns:
        A copy with the columns as ``int64``.
    """
    unset = {"train_size": WHOLE_SPLIT, "order_seed": ORDER_FROM_SEED}
    out = frame.copy()
    for column in columns:
        given = out[column] if column in out else pd.Series(np.nan, index=out.index)
        out[column] = pd.to_numeric(given, errors="coerce").fillna(unset[column]).astype("int64")
    return out


def run_key(cell: dict[str, Any]) -> tuple[Any, ...]:
    """A result's ``cell`` as the :data:`RUN_KEYS` tuple of a normalised table's row.

    An optional axis that the cell does not set takes the table's value for it
    (:data:`WHOLE_SPLIT`, :data:`ORDER_FROM_SEED`).
    """
    unset = {"train_size": WHOLE_SPLIT, "order_seed": ORDER_FROM_SEED}
    return tuple(unset[k] if k in unset and cell.get(k) is None else cell.get(k) for k in RUN_KEYS)


def run_label(seed: object, order_seed: object = ORDER_FROM_SEED) -> str:
    """A run's name in lists of paired runs: ``3``, or ``3/o2`` with an order seed of its own."""
    if order_seed is None or int(order_seed) == ORDER_FROM_SEED:  # type: ignore[call-overload]
        return str(seed)
    return f"{seed}/o{order_seed}"


def failure_threshold(metric: str, baseline: float, best_constant: float = math.nan) -> float:
    """The value at or below which a run of ``metric`` counts as failed (NaN: no rule).

    Args:
        metric: Metric name.
        baseline: The majority-class baseline of that metric (NaN if none).
        best_constant: The best constant prediction's score of that metric on the same
            split (NaN if the table has none); it takes precedence when finite.

    Returns:
        ``best_constant`` if finite, else ``baseline`` if known, else 0 for
        correlation-type metrics, else NaN.
    """
    if np.isfinite(best_constant):
        return float(best_constant)
    if not np.isnan(baseline):
        return float(baseline)
    return 0.0 if metric in ZERO_THRESHOLD_METRICS else float("nan")


#: :func:`against_threshold`: the mean and its whole Student-t interval are above it.
def run_values(table: pd.DataFrame, metric: str = "main", split: str = "dev") -> pd.DataFrame:
    """One row per run with the chosen metric's value and whether the run failed.

    A non-ok run is kept (value NaN, failed) in every task whose metric/split applies:
    always for ``metric="main"``; otherwise when some ok run of the task reports it.

    Args:
        table: Tidy results table (normalised or raw).
        metric: A metric name, or ``"main"`` for each task's main metric.
        split: The evaluation split (``dev``, ``dev_mismatched``, ``test``).

    Returns:
        Columns: the run keys, head, freeze, layers, status, split, metric, value,
        baseline, best_constant, reason, threshold, fail_reason (``""`` when the run did
        not fail; else the status, ``undefined``, ``at or below best constant`` or ``at
        or below baseline``), failed.
    """
    table = normalize_table(table)
    ok = table[table["status"] == "ok"]
    wanted = ok["main_metric"] if metric == "main" else metric
    rows = ok[(ok["split"] == split) & (ok["metric"] == wanted)]
    rows = rows.drop_duplicates(subset=RUN_KEYS, keep="last")
    bad = table[table["status"] != "ok"].drop_duplicates(subset=RUN_KEYS, keep="last")
    if metric != "main":
        bad = bad[bad["task"].isin(rows["task"].unique())]
    bad = bad.assign(split=split, metric=bad["main_metric"] if metric == "main" else metric)
    bad = bad.assign(value=np.nan, baseline=np.nan, best_constant=np.nan)
    runs = pd.concat([rows, bad], ignore_index=True)
    keep = [
        *RUN_KEYS,
        "head",
        "freeze",
        "layers",
        "status",
        "split",
        "metric",
        "value",
        "baseline",
        "best_constant",
        "reason",
    ]
    runs = runs[keep].sort_values(RUN_KEYS, kind="stable").reset_index(drop=True)
    runs["threshold"] = [
        failure_threshold(m, b, c)
        for m, b, c in zip(runs["metric"], runs["baseline"], runs["best_constant"], strict=True)
    ]
    reasons = []
    for status, value, threshold, constant in zip(
        runs["status"], runs["value"], runs["threshold"], runs["best_constant"], strict=True
    ):
        if status != "ok":
            reasons.append(str(status))
        elif np.isnan(value):
            reasons.append("undefined")
        elif not np.isnan(threshold) and value <= threshold + BASELINE_ATOL:
            below = "best constant" if np.isfinite(constant) else "baseline"
            reasons.append(f"at or below {below}")
        else:
            reasons.append("")
    runs["fail_reason"] = reasons
    runs["failed"] = runs["fail_reason"] != ""
    return runs


# --------------------------------------------------------------------------- intervals


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[~np.isnan(x)]


def t_interval(
    values: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Student-t interval of the mean: ``mean ± t_{(1+c)/2, n-1} · s / sqrt(n)``.

    Uses ``scipy.stats.t``. A constant sample (s = 0) gives the zero-width interval at its
    value, the formula's value there.

    Args:
        values: The sample (NaNs are dropped).
        confidence: Confidence level.

    Returns:
        ``(low, high)``; NaNs when fewer than two values.
    """
    x = _finite(values)
    if x.size < 2:
        return float("nan"), float("nan")
    mean = float(np.mean(x))
    sem = float(np.std(x, ddof=1)) / math.sqrt(x.size)
    if sem == 0.0:
        return mean, mean
    low, high = sps.t.interval(confidence, df=x.size - 1, loc=mean, scale=sem)
    return float(low), float(high)


# --------------------------------------------------------------------------- EVP


def _max_weights(size: int, ns: np.ndarray) -> np.ndarray:
    """P(max of n draws = i-th smallest of ``size`` values), shape (len(ns), size)."""
    cdf = np.arange(1, size + 1) / size  # (N,)
    upper = cdf[None, :] ** ns.reshape(-1, 1)  # (len(n), N)
    lower = (cdf - 1 / size)[None, :] ** ns.reshape(-1, 1)
    return upper - lower


def _sorted_values(values: Sequence[float] | np.ndarray) -> np.ndarray:
    v = np.sort(np.asarray(values, dtype=float))
    v = v[~np.isnan(v)]
    if v.size == 0:
        raise ValueError("expected_max needs at least one value")
    return v


def _draws(n: int | Sequence[int]) -> np.ndarray:
    ns = np.asarray(n, dtype=float)
    if np.any(ns < 1):
        raise ValueError("n must be >= 1")
    return ns


def expected_max(values: Sequence[float] | np.ndarray, n: int | Sequence[int]) -> np.ndarray:
    """Expected maximum of ``n`` i.i.d. draws from the empirical distribution of ``values``.

    Dodge et al. (2019), "Show your work": with the N values sorted,
    ``E[max_n] = sum_i v_(i) * ((i/N)^n - ((i-1)/N)^n)`` — exact, no sampling.

    Args:
        values: Observed scores (one per seed; NaNs dropped).
        n: Number of draws (an int or a sequence of ints >= 1).

    Returns:
        The expected maxima, one per ``n`` (a 0-d array for an int ``n``).

    Raises:
        ValueError: If there are no values or some ``n`` < 1.
    """
    v = _sorted_values(values)
    ns = _draws(n)
    return (_max_weights(v.size, ns) @ v).reshape(ns.shape)


def expected_max_curve(
    scores: Sequence[float] | np.ndarray, n_failed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """EVP curve for n = 1..N draws with replacement, failed draws ranked below all others.

    The pool holds ``N = len(scores) + n_failed`` draws. A failed draw yields no model, so
    it can never be the best of n; the curve is the expected best score *given that at
    least one of the n draws succeeded*, and ``p_all_failed = (n_failed / N)^n`` is the
    chance that none did. The standard deviation is allentune's
    ``sqrt(sum_i p_i (v_(i) - E)^2)`` under the same condition. With no failed draws
    this is exactly Dodge et al. (2019) and :func:`expected_max`.

    Args:
        scores: Scores of the successful draws (NaNs are not allowed here).
        n_failed: Number of failed draws in the pool.

    Returns:
        ``(mean, std, p_all_failed)``, each of length N (NaN mean/std where every draw
        failed).
    """
    v = np.sort(np.asarray(scores, dtype=float))
    if np.isnan(v).any():
        raise ValueError("scores must not contain NaN: count those draws in n_failed")
    total = v.size + int(n_failed)
    if total == 0:
        raise ValueError("no draws")
    ns = np.arange(1, total + 1, dtype=float)
    p_all_failed = (n_failed / total) ** ns
    if v.size == 0:
        nan = np.full(total, np.nan)
        return nan, nan.copy(), p_all_failed
    weights = _max_weights(total, ns)[:, n_failed:]  # (N, successes): failed rank lowest
    mass = weights.sum(axis=1)  # = 1 - p_all_failed
    mean = weights @ v / mass
    var = (weights * (v[None, :] - mean[:, None]) ** 2).sum(axis=1) / mass
    return mean, np.sqrt(np.maximum(var, 0.0)), p_all_failed


def expected_validation_performance(
    table: pd.DataFrame, metric: str = "main", split: str = "dev"
) -> pd.DataFrame:
    """Expected best score after trying n seeds, n = 1..N, per setting (Dodge et al. 2019).

    Draws are the runs with a value; runs that crashed or diverged have none and are
    left out (their count is in :func:`cell_stats`' ``n_error``).

    Args:
        table: Tidy results table.
        metric: A metric name, or ``"main"``.
        split: The evaluation split.

    Returns:
        Long table: the setting keys, metric, n_seeds, expected_max, expected_max_std
        (standard deviation of the maximum of n draws).
    """
    runs = run_values(table, metric=metric, split=split)
    runs = runs[~runs["value"].isna()]
    rows = []
    for keys, group in runs.groupby(GROUP_KEYS, sort=True):
        v = _sorted_values(group["value"].to_numpy(dtype=float))
        mean, std, _ = expected_max_curve(v)
        for count, (e, s) in enumerate(zip(mean, std, strict=True), start=1):
            rows.append(
                {
                    **dict(zip(GROUP_KEYS, keys, strict=True)),
                    "metric": group["metric"].iloc[0],
                    "split": split,
                    "n_seeds": int(count),
                    "expected_max": float(e),
                    "expected_max_std": float(s),
                }
            )
    columns = [*GROUP_KEYS, "metric", "split", "n_seeds", "expected_max", "expected_max_std"]
    return pd.DataFrame(rows, columns=columns)


def evp_from_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """Expected validation performance against the number of trials, per setting and head.

    Dodge et al. (2019): the expected best selection score after n hyperparameter trials
    drawn with replacement from the N a head ran, n = 1..N, exactly from their empirical
    distribution (:func:`expected_max_curve`). Under an equal budget every head of a
    setting has the same N, so the curves compare heads at every budget.

    A trial is *failed* when its status is not ``ok`` (``failed``, ``diverged``) or its
    selection score is not finite (NaN, or -inf as :mod:`bench.run.search` records a
    trial without one). Failed trials stay in the pool (they spent budget), rank below
    every successful trial, and can never be the best: the curve is the expected best
    score given at least one successful draw, and ``p_all_failed`` is the chance that all
    n draws failed. Leaving them out instead would give a head that fails half its trials
    the same curve as one that never fails; scoring them -inf would make every curve
    -inf.

    Args:
        trials: A trials table with columns :data:`TRIAL_COLUMNS` (``head``, ``layers``,
            ``freeze`` and ``selection_metric`` may be missing). A trial listed twice
            counts once (the last row).

    Returns:
        Long table: the setting keys (task, encoder, head_label, freeze_label), head,
        layers, freeze, selection_metric, trials (N), failed_trials, n_trials (n = 1..N),
        expected_max, expected_max_std, p_all_failed.

    Raises:
        ValueError: If a required column is missing.
    """
    out = trials.copy()
    for a, b in (("head_label", "head"), ("freeze_label", "freeze")):
        if a not in out and b in out:
            out[a] = out[b]
        if b not in out and a in out:
            out[b] = out[a]
    out = fill_axes(out, ("train_size",))
    required = [*GROUP_KEYS, "trial", "status", "selection_score"]
    missing = [c for c in required if c not in out]
    if missing:
        raise ValueError(f"trials table lacks required columns {missing}")
    for column in ("layers", "selection_metric"):
        if column not in out:
            out[column] = np.nan
    out = out.drop_duplicates(subset=[*GROUP_KEYS, "trial"], keep="last")
    score = pd.to_numeric(out["selection_score"], errors="coerce").to_numpy(dtype=float)
    out["_ok"] = (out["status"].astype(str) == "ok").to_numpy() & np.isfinite(score)
    out["_score"] = score
    rows = []
    for keys, group in out.groupby(GROUP_KEYS, sort=True):
        good = group.loc[group["_ok"], "_score"].to_numpy(dtype=float)
        n_failed = int((~group["_ok"]).sum())
        mean, std, p_none = expected_max_curve(good, n_failed)
        first = group.iloc[0]
        for i, (e, s, q) in enumerate(zip(mean, std, p_none, strict=True), start=1):
            rows.append(
                {
                    **dict(zip(GROUP_KEYS, keys, strict=True)),
                    "head": first["head"],
                    "layers": first["layers"],
                    "freeze": first["freeze"],
                    "selection_metric": first["selection_metric"],
                    "trials": len(group),
                    "failed_trials": n_failed,
                    "n_trials": i,
                    "expected_max": float(e),
                    "expected_max_std": float(s),
                    "p_all_failed": float(q),
                }
            )
    columns = [
        *GROUP_KEYS,
        "head",
        "layers",
        "freeze",
        "selection_metric",
        "trials",
        "failed_trials",
        "n_trials",
        "expected_max",
        "expected_max_std",
        "p_all_failed",
    ]
    return pd.DataFrame(rows, columns=columns)
