"""Seed statistics over the tidy results table: per-cell summaries, paired head tests, EVP.

Everything here is pandas/numpy/scipy on the table written by :mod:`bench.results.collect`
(one row per cell × split × metric); nothing imports training code or torch.

Conventions (the README's "Statistics and tables" section explains them for users):

* A *run* is one seed of one setting (task, encoder, head_label, freeze_label).
* ``metric="main"`` picks, per run, the row of the task's ``main_metric``.
* A run is **failed** (Mosbach et al. 2021) when its status is not ``ok`` (``failed`` or
  ``diverged``: no value at all), when its value is undefined (NaN: e.g. the correlation
  of constant predictions), or when its value is at or below the majority-class baseline
  of the same metric and split. Correlation-type metrics (Pearson, Spearman, Matthews)
  have no usable constant-predictor baseline (the correlation of a constant is undefined;
  MCC is defined as 0 there, as in scikit-learn), so the threshold is 0: a run that does not beat
  "no correlation" failed. For any other metric without a baseline the rule is not
  applicable and only the status counts.
* ``mean``/``std``/``median``/``min``/``max`` and the CI use every run that has a value,
  including ok runs at or below the baseline (they are real outcomes of that seed); runs
  without a value cannot enter them but are counted in ``n_failed``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from bench.data.tasks import ALL_TASKS

GROUP_KEYS = ["task", "encoder", "head_label", "freeze_label"]
RUN_KEYS = [*GROUP_KEYS, "seed"]
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
FLOAT_COLUMNS = ["value", "baseline", "train_time_s"]
REQUIRED_COLUMNS = ["task", "encoder", "seed", "status", "split", "metric", "value"]
# Metrics whose failure threshold is 0 when the table holds no baseline (see module doc).
ZERO_THRESHOLD_METRICS = frozenset({"pearson", "spearman", "mcc"})
BASELINE_ATOL = 1e-6  # "at or below the baseline" tolerates float noise far below one example
N_RESAMPLES = 10_000  # bootstrap resamples (percentile method)
CONFIDENCE = 0.95
RNG_SEED = 0  # fixed, so every table is reproducible to the last digit


# --------------------------------------------------------------------------- loading


def _main_metric_for(task: str) -> float | str:
    spec = ALL_TASKS.get(task)
    return spec.main_metric if spec is not None else np.nan


def normalize_table(table: pd.DataFrame) -> pd.DataFrame:
    """Return a copy with every expected column present and consistent dtypes.

    Missing optional columns are filled: ``head_label``/``head`` and
    ``freeze_label``/``freeze`` from each other, ``layers``/``baseline``/``reason`` as
    missing, ``main_metric`` from the task specs of :mod:`bench.data.tasks`.

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
    for column in ("layers", "baseline", "reason", "run_dir", "train_time_s"):
        if column not in out:
            out[column] = np.nan
    if "main_metric" not in out:
        out["main_metric"] = np.nan
    out["main_metric"] = out["main_metric"].fillna(out["task"].map(_main_metric_for))
    for column in TEXT_COLUMNS:
        out[column] = out[column].astype("str")
    for column in FLOAT_COLUMNS:
        out[column] = pd.to_numeric(out[column], errors="coerce").astype("float64")
    out["seed"] = pd.to_numeric(out["seed"], errors="coerce").astype("Int64")
    if out["main_metric"].isna().any():
        tasks = sorted(out.loc[out["main_metric"].isna(), "task"].unique())
        raise ValueError(f"no main_metric column and unknown task(s) {tasks}")
    return out


# --------------------------------------------------------------------------- runs


def failure_threshold(metric: str, baseline: float) -> float:
    """The value at or below which a run of ``metric`` counts as failed (NaN: no rule).

    Args:
        metric: Metric name.
        baseline: The majority-class baseline of that metric (NaN if none).

    Returns:
        ``baseline`` if known, 0 for correlation-type metrics, else NaN.
    """
    if not np.isnan(baseline):
        return float(baseline)
    return 0.0 if metric in ZERO_THRESHOLD_METRICS else float("nan")


def run_values(table: pd.DataFrame, metric: str = "main", split: str = "dev") -> pd.DataFrame:
    """One row per run with the chosen metric's value and whether the run failed.

    A non-ok run is kept (value NaN, failed) in every task whose metric/split applies:
    always for ``metric="main"``; otherwise when some ok run of the task reports it.

    Args:
        table: Tidy results table (normalised or raw).
        metric: A metric name, or ``"main"`` for each task's main metric.
        split: The evaluation split (``dev``, ``dev_mismatched``, ``test``).

    Returns:
        Columns: the run keys, head, freeze, layers, status, metric, split, value,
        baseline, threshold, failed, fail_reason.
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
    bad = bad.assign(value=np.nan, baseline=np.nan)
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
        "reason",
    ]
    runs = runs[keep].sort_values(RUN_KEYS, kind="stable").reset_index(drop=True)
    runs["threshold"] = [
        failure_threshold(m, b) for m, b in zip(runs["metric"], runs["baseline"], strict=True)
    ]
    reasons = []
    for status, value, threshold in zip(
        runs["status"], runs["value"], runs["threshold"], strict=True
    ):
        if status != "ok":
            reasons.append(str(status))
        elif np.isnan(value):
            reasons.append("undefined")
        elif not np.isnan(threshold) and value <= threshold + BASELINE_ATOL:
            reasons.append("at or below baseline")
        else:
            reasons.append("")
    runs["fail_reason"] = reasons
    runs["failed"] = runs["fail_reason"] != ""
    return runs


# --------------------------------------------------------------------------- summaries


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    n_resamples: int = N_RESAMPLES,
    seed: int = RNG_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean (``scipy.stats.bootstrap``, fixed rng).

    The percentile method is used rather than BCa because BCa's jackknife acceleration is
    degenerate for the handful of seeds a sweep has (identical values, n = 2 or 3).

    Args:
        values: The sample (NaNs are dropped).
        confidence: Confidence level.
        n_resamples: Bootstrap resamples.
        seed: Seed of ``numpy.random.default_rng``.

    Returns:
        ``(low, high)``; NaNs when fewer than two values.
    """
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if x.size < 2:
        return float("nan"), float("nan")
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    res = sps.bootstrap(
        (x,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def cell_stats(table: pd.DataFrame, metric: str = "main", split: str = "dev") -> pd.DataFrame:
    """Seed statistics per (task, encoder, head_label, freeze_label).

    Args:
        table: Tidy results table.
        metric: A metric name, or ``"main"`` for each task's main metric.
        split: The evaluation split.

    Returns:
        One row per setting: keys, head, freeze, layers, metric, split, n_runs, n (runs
        with a value), n_failed, n_error (status failed/diverged), mean, std (ddof=1),
        median, min, max, ci_low, ci_high (bootstrap of the mean), baseline, threshold.
    """
    runs = run_values(table, metric=metric, split=split)
    out = []
    for keys, group in runs.groupby(GROUP_KEYS, sort=True):
        x = group["value"].to_numpy(dtype=float)
        x = x[~np.isnan(x)]
        low, high = bootstrap_ci(x)
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
                "ci_low": low,
                "ci_high": high,
                "baseline": float(group["baseline"].mean()),
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
        "ci_low",
        "ci_high",
        "baseline",
        "threshold",
    ]
    return pd.DataFrame(out, columns=columns)


# --------------------------------------------------------------------------- comparisons


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment (family-wise error rate); NaNs stay NaN, not counted.

    With the m finite p-values sorted ascending, ``p_adj(i) = max_{j<=i} min(1,
    (m - j + 1) p(j))``, returned in the input order.

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


def paired_test(diffs: Sequence[float] | np.ndarray) -> tuple[float, str]:
    """Two-sided Wilcoxon signed-rank p-value of paired differences.

    ``scipy.stats.wilcoxon`` with ``method="auto"``: the exact null distribution for up to
    50 distinct, non-zero differences; with ties or zeros, exhaustive permutations up to
    13 pairs. Zero differences are dropped (``zero_method="wilcox"``). Differences are
    rounded to 12 decimals first, so that float noise (0.81 - 0.78 vs 0.84 - 0.81) neither
    breaks ties nor turns a zero into a signed rank.

    Args:
        diffs: Differences a - b, one per seed.

    Returns:
        ``(p, reason)``: p is NaN, with a reason, for fewer than two pairs or when every
        difference is zero.
    """
    d = np.round(np.asarray(diffs, dtype=float), 12)
    if d.size < 2:
        return float("nan"), "fewer than 2 paired seeds"
    if np.all(d == 0):
        return float("nan"), "all differences zero"
    return float(sps.wilcoxon(d, zero_method="wilcox", method="auto").pvalue), ""


def compare_heads(
    table: pd.DataFrame,
    metric: str = "main",
    split: str = "dev",
    family: Sequence[str] = ("task", "encoder", "freeze_label"),
) -> pd.DataFrame:
    """All head-vs-head comparisons within a task/encoder/freeze setting, paired by seed.

    Only seeds where both heads have a value (status ok) are paired. A *family* for the
    Holm correction is every comparison with a p-value inside one group of ``family``
    (default: one task × encoder × freezing strategy, i.e. one "which head wins here?"
    question); ``n_comparisons`` is that family's size.

    Args:
        table: Tidy results table.
        metric: A metric name, or ``"main"``.
        split: The evaluation split.
        family: Columns defining a Holm family; must include task, encoder, freeze_label
            or a coarser grouping of them.

    Returns:
        One row per (setting, head_a, head_b): n_pairs, seeds, mean_a, mean_b, diff
        (mean of a - b), ci_low, ci_high (bootstrap of the mean difference), p, p_min
        (smallest two-sided p the exact test can reach with these pairs), reason,
        n_comparisons, p_holm.
    """
    runs = run_values(table, metric=metric, split=split)
    runs = runs[~runs["value"].isna()]
    setting = ["task", "encoder", "freeze_label"]
    rows = []
    for keys, group in runs.groupby(setting, sort=True):
        wide = group.pivot_table(index="seed", columns="head_label", values="value")
        heads = list(wide.columns)
        for i, head_a in enumerate(heads):
            for head_b in heads[i + 1 :]:
                pair = wide[[head_a, head_b]].dropna()
                d = (pair[head_a] - pair[head_b]).to_numpy(dtype=float)
                p, reason = paired_test(d)
                low, high = bootstrap_ci(d)
                nonzero = int(np.count_nonzero(np.round(d, 12)))
                rows.append(
                    {
                        **dict(zip(setting, keys, strict=True)),
                        "metric": group["metric"].iloc[0],
                        "split": split,
                        "head_a": head_a,
                        "head_b": head_b,
                        "n_pairs": len(pair),
                        "seeds": ",".join(str(s) for s in pair.index),
                        "mean_a": float(pair[head_a].mean()) if len(pair) else np.nan,
                        "mean_b": float(pair[head_b].mean()) if len(pair) else np.nan,
                        "diff": float(d.mean()) if d.size else np.nan,
                        "ci_low": low,
                        "ci_high": high,
                        "p": p,
                        "p_min": 2.0 / 2**nonzero if nonzero and not reason else np.nan,
                        "reason": reason,
                    }
                )
    columns = [
        *setting,
        "metric",
        "split",
        "head_a",
        "head_b",
        "n_pairs",
        "seeds",
        "mean_a",
        "mean_b",
        "diff",
        "ci_low",
        "ci_high",
        "p",
        "p_min",
        "reason",
    ]
    out = pd.DataFrame(rows, columns=[*columns, "n_comparisons", "p_holm"])
    if out.empty:
        return out
    fam = list(family)
    out["n_comparisons"] = out.groupby(fam)["p"].transform("count").astype(int)
    out["p_holm"] = out.groupby(fam)["p"].transform(lambda s: pd.Series(holm(s), index=s.index))
    return out


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
        ns = np.arange(1, v.size + 1)
        weights = _max_weights(v.size, ns)
        mean, second = weights @ v, weights @ v**2
        for count, e, e2 in zip(ns, mean, second, strict=True):
            std = float(np.sqrt(max(e2 - e**2, 0.0)))
            rows.append(
                {
                    **dict(zip(GROUP_KEYS, keys, strict=True)),
                    "metric": group["metric"].iloc[0],
                    "split": split,
                    "n_seeds": int(count),
                    "expected_max": float(e),
                    "expected_max_std": std,
                }
            )
    columns = [*GROUP_KEYS, "metric", "split", "n_seeds", "expected_max", "expected_max_std"]
    return pd.DataFrame(rows, columns=columns)
