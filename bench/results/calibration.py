"""Calibration (ECE, Brier, NLL, temperature scaling) from stored ``probs`` (docs/statistics.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, softmax

from bench.axes.optional import AXIS_COLUMNS
from bench.cell import CELL_COLUMNS
from bench.data.selection import SELECTION_SPLIT
from bench.data.tasks import ALL_TASKS, TaskSpec
from bench.errors import DataError
from bench.results.predictions import label_texts

N_BINS = 15  #: Equal-width confidence bins of the ECE and the reliability diagrams.
TEMPERATURE_BOUNDS = (0.01, 100.0)  #: Searched (a perfectly separated slice stops at 0.01).
TINY = float(np.finfo(np.float64).tiny)  #: A probability's floor under a logarithm.
RUN_KEYS = [*CELL_COLUMNS, *AXIS_COLUMNS, "config_hash"]  #: One run (:func:`calibration_tables`).
SETTING_KEYS = ["task", "encoder", "freeze_label", "train_size", "head_label", "split"]
SCORES = ("ece", "brier", "nll")  #: Before (and, suffixed ``_ts``, after) temperature scaling.


def bin_totals(probs: np.ndarray, labels: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """(3, n_bins): examples, summed confidence and correct predictions per confidence bin."""
    confidence = probs.max(axis=1)
    index = np.digitize(confidence, np.linspace(0.0, 1.0, n_bins + 1)[1:-1], right=True)
    weights = (None, confidence, (probs.argmax(axis=1) == labels).astype(float))
    return np.stack([np.bincount(index, w, minlength=n_bins) for w in weights])


def scores(probs: np.ndarray, labels: np.ndarray, n_bins: int = N_BINS) -> dict[str, float]:
    """ECE, Brier score and NLL of (n, C) probabilities and n class ids."""
    _, confidence, correct = bin_totals(probs, labels, n_bins)
    onehot = np.eye(probs.shape[1])[labels]
    return {
        "ece": float(np.abs(correct - confidence).sum() / len(labels)),
        "brier": float(((probs - onehot) ** 2).sum(axis=1).mean()),
        "nll": float(-np.log(np.maximum(probs[np.arange(len(labels)), labels], TINY)).mean()),
    }


def scale_probabilities(probs: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(ln p / T)``: the probabilities at temperature ``T`` (no prediction changes)."""
    return softmax(np.log(np.maximum(probs, TINY)) / temperature, axis=1)


def fit_temperature(probs: np.ndarray, labels: np.ndarray) -> float:
    """The ``T`` in :data:`TEMPERATURE_BOUNDS` minimising the NLL (convex in 1/T; Brent on ln T)."""
    log_p, rows = np.log(np.maximum(probs, TINY)), np.arange(len(labels))

    def nll(log_t: float) -> float:
        return float(-log_softmax(log_p / math.exp(log_t), axis=1)[rows, labels].mean())

    bounds = tuple(math.log(t) for t in TEMPERATURE_BOUNDS)
    found = minimize_scalar(nll, bounds=bounds, method="bounded", options={"xatol": 1e-7})
    return math.exp(found.x)


def calibration_tables(
    predictions: pd.DataFrame, n_bins: int = N_BINS
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(runs, bins)``: per run and split its scores (``_ts``: scaled), per bin its sums."""
    runs: list[dict[str, object]] = []
    bins: list[dict[str, object]] = []
    rows = predictions[predictions["probs"].notna()] if "probs" in predictions else None
    for task, part in [] if rows is None else rows.groupby("task", sort=True):
        spec = ALL_TASKS.get(str(task))
        if not isinstance(spec, TaskSpec) or spec.is_regression:
            continue
        ids = {text: k for k, text in enumerate(label_texts(spec))}
        labels = part["label"].map(ids)
        if labels.isna().any():
            unknown = sorted(set(part.loc[labels.isna(), "label"].astype(str)))
            raise DataError(f"{spec.name}: labels {unknown} are not classes of the task")
        probs, labels = np.stack(part["probs"].to_numpy()).astype(float), labels.to_numpy(np.int64)
        if probs.shape[1] != len(ids):
            raise DataError(f"{spec.name}: {probs.shape[1]} probabilities per row, not {len(ids)}")
        splits = part["split"].to_numpy(dtype=object)
        for where in part.groupby(RUN_KEYS, sort=True, dropna=False).indices.values():
            ident = {k: part[k].iloc[where[0]] for k in RUN_KEYS}
            select = where[splits[where] == SELECTION_SPLIT]
            t = fit_temperature(probs[select], labels[select]) if len(select) else math.nan
            for split in sorted(set(splits[where]) - {SELECTION_SPLIT}):
                at = where[splits[where] == split]
                p, y = probs[at], labels[at]
                record = ident | {"split": split, "n": len(y), "temperature": t}
                record |= {"n_select": len(select), "accuracy": (p.argmax(axis=1) == y).mean()}
                for suffix in ("", "_ts") if math.isfinite(t) else ("",):
                    q = scale_probabilities(p, t) if suffix else p
                    record |= {f"{k}{suffix}": v for k, v in scores(q, y, n_bins).items()}
                    bins += [
                        ident
                        | {"split": split, "scaled": bool(suffix), "bin": m, "count": c}
                        | {"confidence_sum": s, "correct_sum": k}
                        for m, (c, s, k) in enumerate(bin_totals(q, y, n_bins).T)
                    ]
                runs.append(record)
    ts = [f"{s}{x}" for x in ("", "_ts") for s in SCORES]
    run_columns = [*RUN_KEYS, "split", "n", "accuracy", "temperature", "n_select", *ts]
    bin_columns = [*RUN_KEYS, "split", "scaled", "bin", "count", "confidence_sum", "correct_sum"]
    return pd.DataFrame(runs, columns=run_columns), pd.DataFrame(bins, columns=bin_columns)


def calibration_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per :data:`SETTING_KEYS`: ``seeds``, ``scaled_seeds``, every measure's mean and std."""
    measures = ["accuracy", "temperature", *SCORES, *(f"{s}_ts" for s in SCORES)]
    grouped = runs.groupby(SETTING_KEYS, sort=True, dropna=False)
    out = grouped[measures].agg(["mean", "std"])
    out.columns = [f"{m}_{a}" for m, a in out.columns]
    counts = grouped["temperature"].agg(seeds="size", scaled_seeds="count")
    return counts.join(out).reset_index()


def pooled_reliability(bins: pd.DataFrame) -> pd.DataFrame:
    """Reliability points, seeds pooled, per :data:`SETTING_KEYS`, ``scaled`` and non-empty bin."""
    sums = ["count", "confidence_sum", "correct_sum"]
    pooled = bins.groupby([*SETTING_KEYS, "scaled", "bin"], sort=True, dropna=False)[sums].sum()
    pooled = pooled[pooled["count"] > 0]
    means = pooled[["confidence_sum", "correct_sum"]].div(pooled["count"], axis=0)
    pooled[["confidence", "accuracy"]] = means.to_numpy()
    return pooled[["count", "confidence", "accuracy"]].reset_index()
