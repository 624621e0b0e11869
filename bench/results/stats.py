"""Seed statistics over the tidy results table: summaries, paired head tests, Holm, EVP.

Everything here is pandas/numpy/scipy on the table written by :mod:`bench.results.collect`
(one row per cell × split × metric), on a trials table (one row per hyperparameter trial),
or on per-example predictions; nothing imports training code or torch.
``docs/statistics.md`` explains every method for users, with its references.

Conventions:

* A *run* is one seed of one setting (task, encoder, head_label, freeze_label).
* ``metric="main"`` picks, per run, the row of the task's ``main_metric``.
* A run is **failed** (Mosbach et al. 2021) when its status is not ``ok`` (``failed`` or
  ``diverged``: no value at all), when its value is undefined (NaN: e.g. the correlation
  of constant predictions), or when its value is at or below a threshold, with
  :data:`BASELINE_ATOL`:

  - the **best constant** prediction's score on the same split and metric, where the table
    has a finite ``best_constant`` (:mod:`bench.data.baselines`: majority share for
    accuracy, the better of all-positive/all-negative for F1, 0 for MCC and correlations,
    and for entity F1 the best ``B-X`` on every word, ``2s / (N + G)``: small but not 0);
  - otherwise (tables written before ``best_constant`` existed) the majority-class
    ``baseline`` of the same metric and split; correlation-type metrics (Pearson,
    Spearman, Matthews) without one use 0, since a constant predictor has no correlation
    (MCC is defined as 0 there, as in scikit-learn). For any other metric without either
    the rule is not applicable and only the status counts.
* ``mean``/``std``/``median``/``min``/``max`` and the intervals use every run that has a
  value, including ok runs at or below the threshold (they are real outcomes of that seed);
  runs without a value cannot enter them but are counted in ``n_failed``.
* Runs that cross seeds with batch-order seeds (every seed with several ``order_seed``
  values, each order with several seeds) are not independent: their intervals and paired
  tests use the two-way random-effects analysis of :mod:`bench.results.crossed` (Student t
  with Satterthwaite's df; Owen's pigeonhole bootstrap), and ``design`` names the grid.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
import pandas as pd
from scipy import stats as sps

from bench.data.tasks import ALL_TASKS
from bench.results import crossed

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
N_RESAMPLES = 10_000  # bootstrap resamples
CONFIDENCE = 0.95
RNG_SEED = 0  # fixed, so every table is reproducible to the last digit
DECIMALS = 12  # paired differences are rounded to this many decimals (float noise)
#: Why crossed runs get no Wilcoxon p (:func:`compare_heads`).
CROSSED_NO_SIGNED_RANK = "crossed seeds × orders: the signed-rank test needs independent pairs"
#: Significance tiers after Holm: (upper bound, tier); a p at or above the last is "n.s.".
SIGNIFICANCE_TIERS = ((0.001, "***"), (0.01, "**"), (0.05, "*"))
NOT_SIGNIFICANT = "n.s."
#: The significance level after Holm's correction (the last tier's bound).
ALPHA = SIGNIFICANCE_TIERS[-1][0]
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

BootstrapMethod = Literal["BCa", "percentile"]
# What scipy warns when BCa cannot be computed (turned into errors, then a fallback).
_DEGENERATE = (sps.DegenerateDataWarning, RuntimeWarning)


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
ABOVE_THRESHOLD = "above"
#: :func:`against_threshold`: the mean is above it, but its Student-t interval reaches it.
INTERVAL_REACHES = "interval reaches it"
#: :func:`against_threshold`: the mean is at or below it: the head does not beat a constant.
NOT_ABOVE = "at or below"


def against_threshold(mean: float, t_low: float, threshold: float) -> str:
    """Whether a head's mean score is shown to beat its failure threshold (the best constant).

    A setting whose best head is at or below the best constant prediction has no winner: its
    heads are compared among failures. One whose best head's 95% interval reaches the
    threshold has a winner that is not shown to beat a constant.

    Args:
        mean: The head's mean score over seeds.
        t_low: The lower end of its Student-t interval (NaN with fewer than two seeds: the
            mean alone decides).
        threshold: :func:`failure_threshold` of its runs (NaN: no rule applies).

    Returns:
        :data:`ABOVE_THRESHOLD`, :data:`INTERVAL_REACHES` or :data:`NOT_ABOVE`, with the same
        tolerance (:data:`BASELINE_ATOL`) as a failed run; ``""`` when the mean or the
        threshold is missing.
    """
    if np.isnan(mean) or np.isnan(threshold):
        return ""
    if mean <= threshold + BASELINE_ATOL:
        return NOT_ABOVE
    if not np.isnan(t_low) and t_low <= threshold + BASELINE_ATOL:
        return INTERVAL_REACHES
    return ABOVE_THRESHOLD


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


def bootstrap_interval(
    values: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = RNG_SEED,
    method: BootstrapMethod = "BCa",
) -> tuple[float, float, str]:
    """Bootstrap interval of the mean (``scipy.stats.bootstrap``, fixed rng), with its method.

    BCa (Efron 1987) corrects the percentile interval for the bias and skew of the
    bootstrap distribution. It is undefined for a constant sample (every resample has the
    same mean: the bias correction is ``Φ⁻¹(0)``); there the interval is the single value
    (the limit of every bootstrap interval as the spread goes to 0) and the method is
    ``"constant"``. Where scipy cannot compute BCa for a non-constant sample (a degenerate
    bootstrap distribution), the percentile interval of the same resamples is returned
    and the method says so; no warning escapes.

    Args:
        values: The sample (NaNs are dropped).
        confidence: Confidence level.
        n_resamples: Bootstrap resamples.
        seed: Seed of ``numpy.random.default_rng``.
        method: ``"BCa"`` or ``"percentile"``.

    Returns:
        ``(low, high, method_used)`` with ``method_used`` one of ``"BCa"``,
        ``"percentile"``, ``"constant"``, or ``"none"`` (fewer than two values: NaNs).
    """
    x = _finite(values)
    if x.size < 2:
        return float("nan"), float("nan"), "none"
    if np.all(x == x[0]):
        return float(x[0]), float(x[0]), "constant"
    with warnings.catch_warnings():
        for category in _DEGENERATE:
            warnings.simplefilter("error", category)
        try:
            res = sps.bootstrap(
                (x,),
                np.mean,
                n_resamples=n_resamples,
                confidence_level=confidence,
                method=method,
                rng=np.random.default_rng(seed),
            )
            low, high = res.confidence_interval.low, res.confidence_interval.high
        except _DEGENERATE:
            low = high = float("nan")
    if np.isfinite(low) and np.isfinite(high):
        return float(low), float(high), method
    if method == "percentile":  # pragma: no cover - the percentile method is always defined
        return float("nan"), float("nan"), "none"
    low, high, _ = bootstrap_interval(x, confidence, n_resamples, seed, "percentile")
    return low, high, "percentile"


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = RNG_SEED,
    method: BootstrapMethod = "percentile",
) -> tuple[float, float]:
    """Bootstrap CI of the mean; :func:`bootstrap_interval` without the method used.

    Args:
        values: The sample (NaNs are dropped).
        confidence: Confidence level.
        n_resamples: Bootstrap resamples.
        seed: Seed of ``numpy.random.default_rng``.
        method: ``"percentile"`` (the default, as before) or ``"BCa"``.

    Returns:
        ``(low, high)``; NaNs when fewer than two values, the value for a constant sample.
    """
    low, high, _ = bootstrap_interval(values, confidence, n_resamples, seed, method)
    return low, high


# --------------------------------------------------------------------------- summaries


def cell_stats(table: pd.DataFrame, metric: str = "main", split: str = "dev") -> pd.DataFrame:
    """Seed statistics per (task, encoder, head_label, freeze_label).

    Args:
        table: Tidy results table.
        metric: A metric name, or ``"main"`` for each task's main metric.
        split: The evaluation split.

    Returns:
        One row per setting: keys, head, freeze, layers, metric, split, n_runs, n (runs
        with a value), n_failed, n_error (status failed/diverged), mean, std (ddof=1),
        median, min, max, t_low, t_high (Student-t interval of the mean), ci_low, ci_high
        (bootstrap interval of the mean), ci_method (what made ``ci_*``: ``BCa``,
        ``percentile``, ``constant`` or ``none``, see :func:`bootstrap_interval`; or
        ``pigeonhole`` for crossed runs), design (``""`` for independent runs, else the
        crossed grid, ``"5 seeds × 5 orders"``: its intervals are those of
        :mod:`bench.results.crossed`, over the grid's complete part), baseline (majority
        class), best_constant, threshold.
    """
    runs = run_values(table, metric=metric, split=split)
    out = []
    for keys, group in runs.groupby(GROUP_KEYS, sort=True):
        x = _finite(group["value"].to_numpy(dtype=float))
        grid = crossed.grid_of(group.set_index(PAIR_KEYS)["value"])
        if grid is None:
            t_low, t_high = t_interval(x)
            low, high, how = bootstrap_interval(x)
        else:
            t_low, t_high = crossed.crossed_t_interval(grid)
            low, high, how = crossed.pigeonhole_interval(grid, n_resamples=N_RESAMPLES)
        first = group.iloc[0]
        out.append(
            {
                **dict(zip(GROUP_KEYS, keys, strict=True)),
                "head": first["head"],
                "freeze": first["freeze"],
                "layers": first["layers"],
                "metric": first["metric"],
                "split": split,
                "n_runs": len(group),
                "n": int(x.size),
                "n_failed": int(group["failed"].sum()),
                "n_error": int((group["status"] != "ok").sum()),
                "mean": float(np.mean(x)) if x.size else np.nan,
                "std": float(np.std(x, ddof=1)) if x.size > 1 else np.nan,
                "median": float(np.median(x)) if x.size else np.nan,
                "min": float(np.min(x)) if x.size else np.nan,
                "max": float(np.max(x)) if x.size else np.nan,
                "t_low": t_low,
                "t_high": t_high,
                "ci_low": low,
                "ci_high": high,
                "ci_method": how,
                "design": crossed.design_text(grid),
                "baseline": float(group["baseline"].mean()),
                "best_constant": float(group["best_constant"].mean()),
                "threshold": float(group["threshold"].mean()),
            }
        )
    columns = [
        *GROUP_KEYS,
        "head",
        "freeze",
        "layers",
        "metric",
        "split",
        "n_runs",
        "n",
        "n_failed",
        "n_error",
        "mean",
        "std",
        "median",
        "min",
        "max",
        "t_low",
        "t_high",
        "ci_low",
        "ci_high",
        "ci_method",
        "design",
        "baseline",
        "best_constant",
        "threshold",
    ]
    return pd.DataFrame(out, columns=columns)


# --------------------------------------------------------------------------- comparisons


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (family-wise error rate); NaNs stay NaN, not counted.

    With the m finite p-values sorted ascending, ``p_adj(i) = max_{j<=i} min(1,
    (m - j + 1) p(j))``, returned in the input order (Holm 1979).

    Args:
        pvalues: Raw p-values of one family.

    Returns:
        The adjusted p-values.
    """
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    finite = np.flatnonzero(~np.isnan(p))
    m = finite.size
    if m == 0:
        return adjusted
    order = finite[np.argsort(p[finite], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


#: Up to this many pairs with ties or zeros, ``scipy.stats.wilcoxon(method="auto")``
#: enumerates every sign pattern (2**13 < its 9,999 resamples); above, it approximates.
WILCOXON_PERMUTATION_MAX_PAIRS = 13


def positive_rank_sum(d: np.ndarray, axis: int = -1) -> np.ndarray:
    """Wilcoxon's T+ along ``axis``: the summed ranks of the positive differences.

    Ranks are of ``|d|`` among the non-zero differences (ties share their average rank);
    zeros are dropped, as ``zero_method="wilcox"`` drops them. Vectorised, so that
    ``scipy.stats.permutation_test`` evaluates every sign pattern in one call.
    """
    values = np.moveaxis(np.asarray(d, dtype=float), axis, -1)
    magnitude = np.where(values == 0, np.nan, np.abs(values))
    ranks = sps.rankdata(magnitude, axis=-1, nan_policy="omit")
    return np.where(values > 0, ranks, 0.0).sum(axis=-1)


def paired_test(diffs: Sequence[float] | np.ndarray) -> tuple[float, str]:
    """Two-sided Wilcoxon signed-rank p-value of paired differences.

    As ``scipy.stats.wilcoxon`` with ``method="auto"``: the exact null distribution for up
    to 50 distinct, non-zero differences; with ties or zeros, exhaustive permutations up to
    13 pairs, else the normal approximation. Zero differences are dropped
    (``zero_method="wilcox"``). Differences are rounded to 12 decimals first, so that float
    noise (0.81 - 0.78 vs 0.84 - 0.81) neither breaks ties nor turns a zero into a signed
    rank. The permutation case calls ``scipy.stats.permutation_test`` itself with the
    vectorised statistic :func:`positive_rank_sum`, the same test as ``wilcoxon``'s (which
    evaluates its statistic once per sign pattern: a quarter of a second per comparison at
    13 pairs, where a report makes hundreds of comparisons).

    Args:
        diffs: Differences a - b, one per seed.

    Returns:
        ``(p, reason)``: p is NaN, with a reason, for fewer than two pairs or when every
        difference is zero.
    """
    d = np.round(np.asarray(diffs, dtype=float), DECIMALS)
    if d.size < 2:
        return float("nan"), "fewer than 2 paired seeds"
    if np.all(d == 0):
        return float("nan"), "all differences zero"
    nonzero = np.abs(d[d != 0])
    ties_or_zeros = nonzero.size < d.size or np.unique(nonzero).size < nonzero.size
    if ties_or_zeros and d.size <= WILCOXON_PERMUTATION_MAX_PAIRS:
        test = sps.permutation_test(
            (d,),
            positive_rank_sum,
            permutation_type="samples",
            vectorized=True,
            n_resamples=np.inf,
            alternative="two-sided",
        )
        return float(test.pvalue), ""
    return float(sps.wilcoxon(d, zero_method="wilcox", method="auto").pvalue), ""


def paired_t_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
) -> tuple[float, float, float, str]:
    """Two-sided paired t-test of a - b (``scipy.stats.ttest_rel``) and its t interval.

    The t-test is continuous: any p can be reached with two or more pairs, unlike the
    exact Wilcoxon test whose floor is ``2 / 2^n``. When every difference is the same
    (after rounding to 12 decimals), the t statistic is undefined (0/0 for zeros, ±inf
    otherwise) and no p is given: two seeds that happen to differ by the same amount
    are not evidence of p = 0.

    Args:
        a: Values of head a, one per seed.
        b: Values of head b on the same seeds, in the same order.
        confidence: Confidence level of the interval of the mean difference.

    Returns:
        ``(p, low, high, reason)``; p and the interval are NaN with a reason for fewer
        than two pairs, all differences zero, or constant differences.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in shape: {x.shape} vs {y.shape}")
    d = np.round(x - y, DECIMALS)
    if d.size < 2:
        return float("nan"), float("nan"), float("nan"), "fewer than 2 paired seeds"
    if np.all(d == 0):
        return float("nan"), float("nan"), float("nan"), "all differences zero"
    if np.all(d == d[0]):
        return float("nan"), float("nan"), float("nan"), "differences constant: t undefined"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # precision note on near-equal d
        res = sps.ttest_rel(x, y)
        ci = res.confidence_interval(confidence)
    return float(res.pvalue), float(ci.low), float(ci.high), ""


def compare_heads(
    table: pd.DataFrame,
    metric: str = "main",
    split: str = "dev",
    family: Sequence[str] = tuple(SETTING_KEYS),
) -> pd.DataFrame:
    """All head-vs-head comparisons within a setting (:data:`SETTING_KEYS`), paired by seed.

    Only seeds where both heads have a value (status ok) are paired. The headline test is
    the two-sided paired t-test (:func:`paired_t_test`): with ~28 headline comparisons,
    Holm's first threshold (0.05/28) is below the exact Wilcoxon floor at 10 seeds
    (2/2^10), so Wilcoxon could never be significant there. The Wilcoxon signed-rank p
    (:func:`paired_test`) stays as a second, distribution-free column. A *family* for
    the Holm correction of ``p`` is every comparison with a p-value inside one group of
    ``family`` (default: one task × encoder × freezing strategy × training size, i.e. one
    "which head wins here?" question); ``n_comparisons`` is that family's size. For one
    correction over
    everything a headline shows, see :func:`holm_all`.

    Args:
        table: Tidy results table.
        metric: A metric name, or ``"main"``.
        split: The evaluation split.
        family: Columns defining a Holm family; :data:`SETTING_KEYS` or a coarser grouping
            of them (e.g. without ``train_size``: one family per learning curve).

    Returns:
        One row per (setting, head_a, head_b): n_pairs, seeds, mean_a, mean_b, diff
        (mean of a - b), t_low, t_high (t interval of the mean difference), ci_low,
        ci_high, ci_method (bootstrap interval of it, as in :func:`cell_stats`), design
        (as in :func:`cell_stats`: for crossed runs, the test, the t interval and the
        bootstrap are :mod:`bench.results.crossed`'s on the complete grid of
        differences, and there is no Wilcoxon test), se and df (the standard error of
        the mean difference and the degrees of freedom the t-test refers it to: ``n − 1``,
        or for crossed runs the crossed standard error and Satterthwaite's df; NaN where
        there is no test), p (paired t-test), p_min
        (smallest p the t-test can reach: 0 wherever it runs),
        reason (why ``p`` is NaN), p_wilcoxon, p_wilcoxon_min (its exact floor
        ``2/2^k`` over the k non-zero differences), reason_wilcoxon, n_comparisons,
        p_holm.
    """
    runs = run_values(table, metric=metric, split=split)
    runs = runs[~runs["value"].isna()]
    rows = []
    for keys, group in runs.groupby(SETTING_KEYS, sort=True):
        wide = group.pivot_table(index=PAIR_KEYS, columns="head_label", values="value")
        heads = list(wide.columns)
        for i, head_a in enumerate(heads):
            for head_b in heads[i + 1 :]:
                pair = wide[[head_a, head_b]].dropna()
                grid = crossed.grid_of(pair[head_a] - pair[head_b])
                if grid is not None:  # keep the grid's runs only, in the grid's order
                    pair = pair.loc[grid.stack().index]
                a = pair[head_a].to_numpy(dtype=float)
                b = pair[head_b].to_numpy(dtype=float)
                d = a - b
                se, df = float("nan"), float("nan")
                if grid is None:
                    p, t_low, t_high, reason = paired_t_test(a, b)
                    p_w, reason_w = paired_test(d)
                    low, high, how = bootstrap_interval(np.round(d, DECIMALS))
                    if not reason:  # the t-test's own standard error and df
                        se, df = float(np.std(d, ddof=1)) / math.sqrt(d.size), float(d.size - 1)
                else:
                    p, t_low, t_high, reason = crossed.crossed_t_test(grid.round(DECIMALS))
                    p_w, reason_w = float("nan"), CROSSED_NO_SIGNED_RANK
                    low, high, how = crossed.pigeonhole_interval(
                        grid.round(DECIMALS), n_resamples=N_RESAMPLES
                    )
                    if not reason:  # the crossed standard error, Satterthwaite's df
                        est = crossed.crossed_mean(grid.round(DECIMALS))
                        se, df = est.se, est.df
                nonzero = int(np.count_nonzero(np.round(d, DECIMALS)))
                rows.append(
                    {
                        **dict(zip(SETTING_KEYS, keys, strict=True)),
                        "metric": group["metric"].iloc[0],
                        "split": split,
                        "head_a": head_a,
                        "head_b": head_b,
                        "n_pairs": len(pair),
                        "seeds": ",".join(run_label(*run) for run in pair.index),
                        "mean_a": float(a.mean()) if a.size else np.nan,
                        "mean_b": float(b.mean()) if b.size else np.nan,
                        "diff": float(d.mean()) if d.size else np.nan,
                        "t_low": t_low,
                        "t_high": t_high,
                        "ci_low": low,
                        "ci_high": high,
                        "ci_method": how,
                        "design": crossed.design_text(grid),
                        "se": se,
                        "df": df,
                        "p": p,
                        "p_min": 0.0 if not reason else np.nan,
                        "reason": reason,
                        "p_wilcoxon": p_w,
                        "p_wilcoxon_min": 2.0 / 2**nonzero if not reason_w else np.nan,
                        "reason_wilcoxon": reason_w,
                    }
                )
    columns = [
        *SETTING_KEYS,
        "metric",
        "split",
        "head_a",
        "head_b",
        "n_pairs",
        "seeds",
        "mean_a",
        "mean_b",
        "diff",
        "t_low",
        "t_high",
        "ci_low",
        "ci_high",
        "ci_method",
        "design",
        "se",
        "df",
        "p",
        "p_min",
        "reason",
        "p_wilcoxon",
        "p_wilcoxon_min",
        "reason_wilcoxon",
    ]
    out = pd.DataFrame(rows, columns=[*columns, "n_comparisons", "p_holm"])
    if out.empty:
        return out
    fam = list(family)
    out["n_comparisons"] = out.groupby(fam)["p"].transform("count").astype(int)
    out["p_holm"] = out.groupby(fam)["p"].transform(lambda s: pd.Series(holm(s), index=s.index))
    return out


def significance_tier(p: float) -> str:
    """The tier of an (adjusted) p-value: ``***`` < 0.001, ``**`` < 0.01, ``*`` < 0.05.

    Args:
        p: A p-value, normally after Holm.

    Returns:
        ``"***"``, ``"**"``, ``"*"``, ``"n.s."`` (p >= 0.05), or ``""`` for NaN (no test).
    """
    if p is None or np.isnan(p):
        return ""
    for bound, tier in SIGNIFICANCE_TIERS:
        if p < bound:
            return tier
    return NOT_SIGNIFICANT


def simultaneous_confidence(m: int, alpha: float = ALPHA) -> float:
    """The per-comparison confidence of Bonferroni's simultaneous intervals: ``1 − α/m``.

    Args:
        m: The comparisons in the family (those with a test: Holm's m).
        alpha: The family-wise level (:data:`ALPHA`: simultaneous 95%).

    Returns:
        ``1 − alpha/m``; NaN for an empty family.
    """
    return 1.0 - alpha / m if m >= 1 else float("nan")


def simultaneous_interval(
    diff: float, se: float, df: float, m: int, alpha: float = ALPHA
) -> tuple[float, float]:
    """Bonferroni's simultaneous interval of a mean difference in a family of ``m`` tests.

    ``diff ± t_{1 − α/(2m), df} · se``: the t-interval of the test that gives the p-value,
    at confidence ``1 − α/m`` instead of ``1 − α``, so that the ``m`` intervals of a family
    cover their true differences together with probability at least ``1 − α``. It excludes
    0 exactly when the raw two-sided p of the same t statistic is below ``α/m``, and then
    Holm's adjusted p (never above ``m`` times the raw p) is below ``α``: an interval that
    excludes 0 is always significant after Holm. The converse does not hold (Holm's
    step-down test rejects more than Bonferroni), so a Holm-significant difference can have
    an interval that still reaches 0.

    Args:
        diff: The mean difference.
        se: Its standard error (:func:`compare_heads`' ``se``).
        df: The t distribution's degrees of freedom (``df``).
        m: The comparisons in the family (Holm's m).
        alpha: The family-wise level.

    Returns:
        ``(low, high)``; NaNs where any input is missing, ``m`` < 1 or ``df`` <= 0; the
        zero-width interval at ``diff`` for ``se`` = 0.
    """
    values = np.array([diff, se, df], dtype=float)
    if m < 1 or not np.all(np.isfinite(values)) or df <= 0:
        return float("nan"), float("nan")
    if se == 0.0:
        return float(diff), float(diff)
    half = float(sps.t.ppf(1.0 - alpha / (2.0 * m), df)) * float(se)
    return float(diff) - half, float(diff) + half


def holm_all(comparisons: pd.DataFrame, p: str = "p", alpha: float = ALPHA) -> pd.DataFrame:
    """One Holm correction over every comparison of a headline, not one per family.

    Pass the comparisons (:func:`compare_heads` rows) of every setting the headline
    shows, e.g. all tasks × freezing strategies, filtered to the rows it shows; the
    family is then the whole table, so a reader who scans all of them for a "win" is
    protected at the family-wise level (Holm 1979).

    Args:
        comparisons: A comparisons table with a p-value column.
        p: The column of raw p-values (``"p"``: the paired t-test).
        alpha: The family-wise level of ``ahead`` and of the simultaneous intervals.

    Returns:
        A copy with ``n_comparisons_all`` (finite p-values corrected together, ``m``),
        ``p_holm_all``, ``significance`` (:func:`significance_tier` of ``p_holm_all``:
        two-sided, whichever head is ahead) and, where the rows have ``diff``
        (:func:`compare_heads` rows), ``ahead``: whether ``head_a`` is
        significantly *ahead* (``p_holm_all`` < ``alpha`` and ``diff`` > 0). A leader
        chosen by its mean over all its runs can be significantly behind on the seeds both
        heads completed (the other head's missing seeds were its good ones); ``ahead`` is
        what "the leader wins significantly" means. Where the rows also have ``se`` and
        ``df`` (:func:`compare_heads` rows), ``sim_low``/``sim_high``: the simultaneous
        interval of ``diff`` over the same ``m`` comparisons (:func:`simultaneous_interval`,
        Bonferroni, confidence ``sim_confidence`` = 1 − alpha/m), the interval to show
        beside ``p_holm_all``; ``t_low``/``t_high`` stay the per-comparison 95% intervals.
    """
    out = comparisons.copy()
    raw = pd.to_numeric(out[p], errors="coerce").to_numpy(dtype=float)
    m = int(np.count_nonzero(~np.isnan(raw)))
    out["n_comparisons_all"] = m
    out["p_holm_all"] = holm(raw)
    out["significance"] = [significance_tier(v) for v in out["p_holm_all"]]
    if "diff" in out:
        diff = pd.to_numeric(out["diff"], errors="coerce").to_numpy(dtype=float)
        out["ahead"] = (out["p_holm_all"].to_numpy(dtype=float) < alpha) & (diff > 0)
        if "se" in out and "df" in out:
            se = pd.to_numeric(out["se"], errors="coerce").to_numpy(dtype=float)
            df = pd.to_numeric(out["df"], errors="coerce").to_numpy(dtype=float)
            bounds = [
                simultaneous_interval(d, s, f, m, alpha)
                for d, s, f in zip(diff, se, df, strict=True)
            ]
            out["sim_low"] = [low for low, _ in bounds]
            out["sim_high"] = [high for _, high in bounds]
            out["sim_confidence"] = simultaneous_confidence(m, alpha)
    return out


def ranked_heads(cells: pd.DataFrame) -> pd.DataFrame:
    """One setting's heads with a score, best mean first (ties: by name).

    Args:
        cells: :func:`cell_stats` rows of one setting.

    Returns:
        The rows with a value (``n > 0``), the leader first.
    """
    return cells[cells["n"] > 0].sort_values(["mean", "head_label"], ascending=[False, True])


def oriented(row: pd.Series, first: str) -> pd.Series:
    """A :func:`compare_heads` row turned into ``first − other`` (intervals flipped if needed).

    Args:
        row: One comparison of ``head_a`` with ``head_b``.
        first: The head that becomes ``head_a``.

    Returns:
        The row itself when ``first`` is already ``head_a``, else a copy with the heads,
        their means, the difference and its intervals (t, bootstrap and, where present,
        simultaneous) swapped.
    """
    if row["head_a"] == first:
        return row
    r = row.copy()
    r["head_a"], r["head_b"] = row["head_b"], row["head_a"]
    r["mean_a"], r["mean_b"] = row["mean_b"], row["mean_a"]
    r["diff"] = -row["diff"]
    for low, high in (("t_low", "t_high"), ("ci_low", "ci_high"), ("sim_low", "sim_high")):
        if low in row and high in row:
            r[low], r[high] = -row[high], -row[low]
    return r


def leader_comparisons(cells: pd.DataFrame, comparisons: pd.DataFrame) -> pd.DataFrame:
    """The best head of every setting against each other head of it, as leader − other.

    Args:
        cells: :func:`cell_stats` rows (any number of settings, :data:`SETTING_KEYS`).
        comparisons: :func:`compare_heads` rows of the same table.

    Returns:
        The comparisons that involve each setting's leader (:func:`ranked_heads`), oriented
        by :func:`oriented`, in setting order; empty when no setting has two heads. Correct
        them together with :func:`holm_all`.
    """
    rows = []
    for keys, group in cells.groupby(SETTING_KEYS, sort=True):
        ranked = ranked_heads(group)
        if len(ranked) < 2:
            continue
        leader = str(ranked.iloc[0]["head_label"])
        mask = np.ones(len(comparisons), dtype=bool)
        for column, value in zip(SETTING_KEYS, keys, strict=True):
            mask &= (comparisons[column] == value).to_numpy()
        pairs = comparisons[mask]
        for _, row in pairs[(pairs["head_a"] == leader) | (pairs["head_b"] == leader)].iterrows():
            rows.append(oriented(row, leader))
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).reset_index(drop=True)


# --------------------------------------------------------------------------- per example


@dataclass(frozen=True)
class PairedBootstrap:
    """Result of :func:`paired_bootstrap`.

    Attributes:
        diff: Observed mean-over-seeds metric of A minus that of B.
        low: Lower end of the interval of ``diff``.
        high: Upper end of the interval of ``diff``.
        p: Two-sided bootstrap p-value of "no difference".
        method: What made the interval: ``percentile``, ``BCa`` or ``constant``.
        n_resamples: Resamples drawn.
        n_undefined: Resamples where the metric was undefined (NaN), left out.
        n_examples: Examples resampled.
        distribution: The resampled differences, in draw order (NaNs included).
    """

    diff: float
    low: float
    high: float
    p: float
    method: str
    n_resamples: int
    n_undefined: int
    n_examples: int
    distribution: np.ndarray


def _as_runs(preds: Any, n: int, name: str) -> np.ndarray:
    runs = np.asarray(preds)
    if runs.ndim < 2 or runs.shape[0] < 1 or runs.shape[1] != n:
        raise ValueError(f"{name} must have shape (seeds, {n} examples), got {runs.shape}")
    return runs


def paired_bootstrap(
    labels: Any,
    preds_a: Any,
    preds_b: Any,
    metric: Callable[[Any, Any], float],
    n_resamples: int = N_RESAMPLES,
    rng: np.random.Generator | int | None = None,
    confidence: float = CONFIDENCE,
    method: BootstrapMethod = "percentile",
) -> PairedBootstrap:
    """Per-example paired bootstrap of a metric difference between two heads.

    Each resample draws the examples with replacement, ``idx = rng.integers(0, n,
    size=n)`` (one call per resample, in order), and the *same* ``idx`` serves both
    heads and every seed: ``δ* = mean_s metric(labels[idx], A[s, idx]) - mean_s
    metric(labels[idx], B[s, idx])``. The seeds of A and B need not match in number.

    The p-value inverts the percentile interval: with ``B`` finite resamples,
    ``p = min(1, 2 · min(1 + #{δ* <= 0}, 1 + #{δ* >= 0}) / (B + 1))``, i.e. twice the
    share of resampled differences on the far side of zero, with the +1 correction
    (Davison & Hinkley 1997) so that p is never 0; differences exactly 0 count on both
    sides (conservative). Identical predictions give δ* = 0 everywhere, so p = 1.

    The interval is the percentile interval of the δ*, or with ``method="BCa"`` Efron's
    (1987) BCa interval on the same resamples (``scipy.stats.bootstrap`` given them; its
    jackknife costs n · (seeds of A + seeds of B) more metric calls). If every δ* is the
    same, the interval is that value (``method="constant"``).

    Args:
        labels: Gold labels, indexable along axis 0 by an integer array, one entry per
            example (an object array of sequences for token tasks).
        preds_a: Predictions of head A, shape (seeds, examples, ...).
        preds_b: Predictions of head B on the same examples, shape (seeds, examples, ...).
        metric: ``metric(labels, preds) -> float`` on a subset of examples, e.g. accuracy.
        n_resamples: Resamples.
        rng: A generator, or a seed for ``numpy.random.default_rng`` (default
            :data:`RNG_SEED`).
        confidence: Confidence level of the interval.
        method: ``"percentile"`` or ``"BCa"``.

    Returns:
        The :class:`PairedBootstrap`.

    Raises:
        ValueError: On mismatched shapes, no examples, ``n_resamples`` < 1, or an
            undefined observed metric.
    """
    gold = np.asarray(labels)
    n = int(gold.shape[0]) if gold.ndim else 0
    if n == 0:
        raise ValueError("paired_bootstrap needs at least one example")
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    runs_a, runs_b = _as_runs(preds_a, n, "preds_a"), _as_runs(preds_b, n, "preds_b")
    gen = (
        rng
        if isinstance(rng, np.random.Generator)
        else np.random.default_rng(RNG_SEED if rng is None else rng)
    )

    def delta(idx: np.ndarray) -> float:
        idx = np.asarray(idx, dtype=np.intp)
        y = gold[idx]
        score_a = np.mean([float(metric(y, run[idx])) for run in runs_a])
        score_b = np.mean([float(metric(y, run[idx])) for run in runs_b])
        return float(score_a - score_b)

    observed = delta(np.arange(n))
    if not np.isfinite(observed):
        raise ValueError("the metric is undefined on the full set of examples")
    dist = np.array([delta(gen.integers(0, n, size=n)) for _ in range(n_resamples)])
    finite = dist[np.isfinite(dist)]
    count = finite.size
    below = int(np.count_nonzero(np.round(finite, DECIMALS) <= 0))
    above = int(np.count_nonzero(np.round(finite, DECIMALS) >= 0))
    p = min(1.0, 2.0 * min(below + 1, above + 1) / (count + 1))
    if count == 0:
        low = high = float("nan")
        how = "none"
    elif np.all(finite == finite[0]):
        low = high = float(finite[0])
        how = "constant"
    else:
        low, high, how = _interval_of(finite, delta, n, confidence, method)
    return PairedBootstrap(
        diff=observed,
        low=low,
        high=high,
        p=float(p),
        method=how,
        n_resamples=n_resamples,
        n_undefined=n_resamples - count,
        n_examples=n,
        distribution=dist,
    )


def _interval_of(
    dist: np.ndarray,
    statistic: Callable[[np.ndarray], float],
    n: int,
    confidence: float,
    method: BootstrapMethod,
) -> tuple[float, float, str]:
    """Interval from given resamples via ``scipy.stats.bootstrap`` (BCa falls back)."""
    with warnings.catch_warnings():
        for category in _DEGENERATE:
            warnings.simplefilter("error", category)
        try:
            res = sps.bootstrap(
                (np.arange(n),),
                statistic,
                n_resamples=0,
                bootstrap_result=SimpleNamespace(bootstrap_distribution=dist),
                confidence_level=confidence,
                method=method,
                vectorized=False,
            )
            low, high = res.confidence_interval.low, res.confidence_interval.high
        except _DEGENERATE:
            low = high = float("nan")
    if np.isfinite(low) and np.isfinite(high):
        return float(low), float(high), method
    alpha = (1 - confidence) / 2
    low, high = np.percentile(dist, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high), "percentile"


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
