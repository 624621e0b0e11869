"""Runs, failure thresholds and expected validation performance (head vs head: ``frames``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats as sps

from bench.data.tasks import ALL_TASKS
from bench.errors import DataError

WHOLE_SPLIT = 0  #: ``train_size`` of a cell trained on the whole training split.
ORDER_FROM_SEED = -1  #: ``order_seed`` of a cell whose batch order was drawn from its seed.
#: One setting of one head: a learning curve's training sizes are separate settings.
GROUP_KEYS = ["task", "encoder", "head_label", "freeze_label", "train_size"]
RUN_KEYS = [*GROUP_KEYS, "seed", "order_seed"]  #: One run: its seed and batch-order seed.
SETTING_KEYS = ["task", "encoder", "freeze_label", "train_size"]  #: Where heads are compared.
PAIR_KEYS = ["seed", "order_seed"]  #: What pairs two heads' runs of a setting.
BASELINE_ATOL = 1e-6  #: "At or below the baseline" tolerates float noise below one example.
#: Columns of a trials table (one row per hyperparameter trial of one setting and head).
TRIAL_COLUMNS = [
    *("task", "encoder", "head", "head_label", "layers", "freeze", "freeze_label"),
    *("train_size", "trial", "status", "selection_metric", "selection_score"),
]
_UNSET = {"train_size": WHOLE_SPLIT, "order_seed": ORDER_FROM_SEED}
_LABELS = ["head", "head_label", "layers", "freeze", "freeze_label", "status", "reason"]
_CURVE = ["trials", "failed_trials", "n", "expected_max", "expected_max_std", "p_all_failed"]
_REQUIRED = ["task", "encoder", "seed", "status", "split", "metric", "value"]
#: How to make one table of several: what a reader refusing a joined table says.
MERGE = (
    "collect their run directories into one table instead "
    "(python -m bench.results.collect <run dirs>... -o <results dir>)"
)


def _pair_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with ``head``/``head_label``, ``freeze``/``freeze_label`` filled from each other."""
    twins = [("head_label", "head"), ("freeze_label", "freeze")]
    twins += [(b, a) for a, b in twins]
    return frame.assign(**{a: frame[b] for a, b in twins if a not in frame and b in frame})


def normalize_table(table: pd.DataFrame) -> pd.DataFrame:
    """A copy of a tidy table with every expected column present (NaN, or from the task spec).

    Raises:
        ValueError: If a required column is missing, or ``main_metric`` cannot be inferred.
        DataError: If the table holds a cell twice (:func:`_once`; a ``ValueError`` too).
    """
    out = _pair_labels(table)
    missing = [c for c in [*_REQUIRED, "head_label", "freeze_label"] if c not in out]
    if missing:
        raise ValueError(f"results table lacks required columns {missing}")
    optional = ["layers", "baseline", "best_constant", "reason", "run_dir", "train_time_s"]
    defaults = dict.fromkeys(optional, np.nan) | {"summary_token": "first"}  # older: [CLS]
    out = out.assign(**{c: v for c, v in defaults.items() if c not in out})
    spec = out["task"].map(lambda t: ALL_TASKS[t].main_metric if t in ALL_TASKS else np.nan)
    given = out.get("main_metric", spec).astype(object)
    out["main_metric"] = given.where(given.notna(), spec.astype(object))
    unknown = sorted(out.loc[out["main_metric"].isna(), "task"].unique())
    if unknown:
        raise ValueError(f"no main_metric column and unknown task(s) {unknown}")
    text = ["task", "encoder", *_LABELS, "main_metric", "split", "metric", "run_dir"]
    out[text] = out[text].astype("str")
    floats = ["value", "baseline", "best_constant", "train_time_s"]
    out[floats] = out[floats].apply(pd.to_numeric, errors="coerce").astype("float64")
    out["seed"] = pd.to_numeric(out["seed"], errors="coerce").astype("Int64")
    return _once(fill_axes(out))


def setting_name(row: pd.Series | dict[str, Any], seed: bool = False) -> str:
    """A setting's path, ``task/encoder/head_label/freeze_label`` (``/seed=N``: a cell's)."""
    name = "/".join(str(row[k]) for k in ("task", "encoder", "head_label", "freeze_label"))
    if not seed:
        return name
    number = row["seed"]  # a table's seed may be missing (<NA>)
    return f"{name}/seed={int(number) if pd.notna(number) else number}"


def _once(table: pd.DataFrame) -> pd.DataFrame:
    """``table``, if it holds each cell (run) once: one status, one row per split and metric.

    Raises:
        DataError: Naming the cells held twice (and their run directories).
    """
    twice = table.duplicated([*RUN_KEYS, "split", "metric"], keep=False)
    twice |= table.groupby(RUN_KEYS, dropna=False)["status"].transform("nunique") > 1
    if not twice.any():
        return table
    runs = table[twice].groupby(RUN_KEYS, dropna=False, sort=False)
    named = [
        f"{setting_name(rows.iloc[0], seed=True)} ({', '.join(map(str, rows['run_dir'].unique()))})"
        for _, rows in runs
    ]
    more = f" and {len(named) - 3} more" if len(named) > 3 else ""
    raise DataError(
        f"results table holds cells more than once ({len(named)}): {'; '.join(named[:3])}{more}; "
        f"{MERGE}, which keeps the latest result of each cell"
    )


def fill_axes(frame: pd.DataFrame, columns: Sequence[str] = tuple(_UNSET)) -> pd.DataFrame:
    """A copy with the optional ``columns`` as ``int64``, unset ones filled (:data:`_UNSET`)."""
    out = frame.copy()
    for column in columns:
        given = out[column] if column in out else pd.Series(np.nan, index=out.index)
        out[column] = pd.to_numeric(given, errors="coerce").fillna(_UNSET[column]).astype("int64")
    return out


def run_key(cell: dict[str, Any]) -> tuple[Any, ...]:
    """A result's ``cell`` as the :data:`RUN_KEYS` tuple of a normalised table's row."""
    return tuple(_UNSET.get(k) if cell.get(k) is None else cell[k] for k in RUN_KEYS)


def failure_threshold(metric: str, baseline: float, best_constant: float = math.nan) -> float:
    """At or below which a run fails: best constant, else baseline, else 0 (correlations) or NaN."""
    if np.isfinite(best_constant):
        return float(best_constant)
    if not np.isnan(baseline):
        return float(baseline)
    return 0.0 if metric in ("pearson", "spearman", "mcc") else math.nan


def run_values(table: pd.DataFrame, metric: str = "main", split: str = "dev") -> pd.DataFrame:
    """One row per run with ``metric``'s value (``"main"``: each task's) and whether it failed.

    A run fails (Mosbach et al. 2021) when not ``ok``, undefined, or at or below
    :func:`failure_threshold`; ``fail_reason`` says which (see docs/statistics.md).
    """
    table = normalize_table(table)
    ok = table[table["status"] == "ok"]
    wanted = ok["main_metric"] if metric == "main" else metric
    rows = ok[(ok["split"] == split) & (ok["metric"] == wanted)]
    bad = table[table["status"] != "ok"]
    if metric != "main":
        bad = bad[bad["task"].isin(rows["task"].unique())]
    bad = bad.assign(split=split, metric=bad["main_metric"] if metric == "main" else metric)
    bad = bad.assign(value=np.nan, baseline=np.nan, best_constant=np.nan)
    runs = pd.concat([rows, bad])
    keep = ["head", "freeze", "layers", "status", "split", "metric", "value", "baseline"]
    runs = runs[[*RUN_KEYS, *keep, "best_constant", "reason"]]
    runs = runs.sort_values(RUN_KEYS, kind="stable").reset_index(drop=True)
    columns = zip(runs["metric"], runs["baseline"], runs["best_constant"], strict=True)
    runs["threshold"] = [failure_threshold(*c) for c in columns]
    below = np.where(np.isfinite(runs["best_constant"]), "best constant", "baseline")
    value, status = runs["value"], runs["status"]
    failed = [status != "ok", value.isna(), value <= runs["threshold"] + BASELINE_ATOL]
    reasons = [status.astype(object), "undefined", np.char.add("at or below ", below)]
    runs["fail_reason"] = np.select(failed, reasons, default="")
    runs["failed"] = runs["fail_reason"] != ""
    return runs


def t_interval(values: ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean (NaNs dropped; zero width if constant, NaNs if n < 2)."""
    x = pd.Series(np.ravel(values), dtype=float).dropna().to_numpy()
    if x.size < 2:
        return math.nan, math.nan
    mean, sem = float(x.mean()), float(sps.sem(x))
    low, high = sps.t.interval(confidence, x.size - 1, loc=mean, scale=sem) if sem else (mean, mean)
    return float(low), float(high)


def _max_weights(size: int, ns: np.ndarray) -> np.ndarray:
    """P(the max of n draws is the i-th smallest of ``size`` values), shape (len(ns), size)."""
    cdf = np.arange(1, size + 1) / size
    return cdf[None, :] ** ns[:, None] - (cdf - 1 / size)[None, :] ** ns[:, None]


def expected_max(values: ArrayLike, n: int | Sequence[int]) -> np.ndarray:
    """Exact expected maximum of ``n`` i.i.d. draws from the values, NaNs dropped (Dodge 2019).

    Raises:
        ValueError: If there are no values or some ``n`` < 1.
    """
    v = np.sort(np.asarray(values, dtype=float))
    v, ns = v[~np.isnan(v)], np.asarray(n, dtype=float)
    if v.size == 0 or np.any(ns < 1):
        raise ValueError("expected_max needs at least one value and n >= 1")
    return (_max_weights(v.size, ns.ravel()) @ v).reshape(ns.shape)


def _evp(frame: pd.DataFrame, score: pd.Series, carry: list[str], n: str) -> pd.DataFrame:
    """EVP curves, n = 1..N draws with replacement, of each :data:`GROUP_KEYS` pool of ``score``.

    A NaN score is a failed draw: it ranks below every other and is never the best, so the
    mean and SD are of the best score given a success, ``p_all_failed`` the chance of none.
    Each curve carries its group's first ``carry`` values.
    """
    parts = []
    for _, group in frame.assign(_score=score).groupby(GROUP_KEYS, sort=True):
        v = np.sort(group["_score"].dropna().to_numpy(float))
        total, failed = len(group), len(group) - v.size
        ns = np.arange(1, total + 1)
        weights = _max_weights(total, ns)[:, failed:]  # failed draws hold the lowest ranks
        with np.errstate(invalid="ignore"):  # 0/0 where every draw failed: NaN
            mass = weights.sum(axis=1)
            mean = weights @ v / mass
            sd = np.sqrt((weights * (v[None, :] - mean[:, None]) ** 2).sum(axis=1) / mass)
        values = [total, failed, ns, mean, sd, (failed / total) ** ns]
        curve = pd.DataFrame(dict(zip(_CURVE, values, strict=True)))
        parts.append(curve.assign(**group.iloc[0][[*GROUP_KEYS, *carry]]))
    columns = [*GROUP_KEYS, *carry, *_CURVE]
    out = pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
    return out.rename(columns={"n": n})


def expected_validation_performance(
    table: pd.DataFrame, metric: str = "main", split: str = "dev"
) -> pd.DataFrame:
    """Expected best score of n seeds, n = 1..N, per setting (Dodge et al. 2019)."""
    runs = run_values(table, metric=metric, split=split).dropna(subset=["value"])
    out = _evp(runs, runs["value"], ["metric", "split"], "n_seeds")
    return out[[*GROUP_KEYS, "metric", "split", "n_seeds", "expected_max", "expected_max_std"]]


def evp_from_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """Expected best selection score after n of a head's N search trials (Dodge et al. 2019).

    A failed trial stays in the pool (it spent budget) but is never the best; a trial listed
    twice counts once (the last).

    Raises:
        ValueError: If a required column is missing.
    """
    out = fill_axes(_pair_labels(trials), ("train_size",))
    missing = [c for c in [*GROUP_KEYS, "trial", "status", "selection_score"] if c not in out]
    if missing:
        raise ValueError(f"trials table lacks required columns {missing}")
    out = out.assign(**{c: np.nan for c in ("layers", "selection_metric") if c not in out})
    out = out.drop_duplicates(subset=[*GROUP_KEYS, "trial"], keep="last")
    score = pd.to_numeric(out["selection_score"], errors="coerce")
    score = score.where((out["status"].astype(str) == "ok") & np.isfinite(score))
    return _evp(out, score, ["head", "layers", "freeze", "selection_metric"], "n_trials")
