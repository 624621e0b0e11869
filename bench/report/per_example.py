"""Per-example evidence for the verdict: a paired bootstrap over dev examples.

The seed-paired t-test says whether a head wins across training runs; this asks whether
the winner's margin holds across the *examples* of the reporting split. From the committed
predictions (``predictions.parquet``), the dev examples are resampled with replacement,
the same indices for both heads and every seed, and the mean-over-seeds metric difference
is recomputed (:func:`bench.results.stats.paired_bootstrap`). Metrics are NumPy
re-implementations of the task's main metric on class ids (checked against scikit-learn
and SciPy in the tests) so that thousands of resamples stay cheap. Token tasks are left
out: seqeval per resample is too slow for a report.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from bench.data.tasks import ALL_TASKS, TaskSpec
from bench.results import stats

#: Resamples per comparison in the report (the interval's Monte Carlo error is ~0.1 point).
N_RESAMPLES = 2000
Metric = Callable[[np.ndarray, np.ndarray], float]


def accuracy(y: np.ndarray, p: np.ndarray) -> float:
    """Share of equal entries."""
    return float(np.mean(y == p))


def binary_f1(y: np.ndarray, p: np.ndarray) -> float:
    """F1 of class 1 (0 when it is never predicted nor gold)."""
    tp = float(np.sum((y == 1) & (p == 1)))
    wrong = float(np.sum(y != p))
    return 2 * tp / (2 * tp + wrong) if tp else 0.0


def mcc(y: np.ndarray, p: np.ndarray) -> float:
    """Matthews correlation of two binary label vectors (0 when undefined, as scikit-learn)."""
    tp = float(np.sum((y == 1) & (p == 1)))
    tn = float(np.sum((y == 0) & (p == 0)))
    fp = float(np.sum((y == 0) & (p == 1)))
    fn = float(np.sum((y == 1) & (p == 0)))
    den = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / den) if den else 0.0


def pearson(y: np.ndarray, p: np.ndarray) -> float:
    """Pearson's r (NaN for a constant vector)."""
    if np.std(y) == 0 or np.std(p) == 0:
        return float("nan")
    return float(np.corrcoef(y, p)[0, 1])


METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "f1": binary_f1,
    "mcc": mcc,
    "pearson": pearson,
}


def encode(spec: TaskSpec, values: pd.Series) -> np.ndarray:
    """Label text (as written in the data files) → class ids, or scores for regression."""
    if spec.is_regression:
        return values.astype(float).to_numpy()
    raw = {text: name for text, name in spec.tsv_label_map.items()}
    ids = {name: i for i, name in enumerate(spec.label_names)}
    return np.asarray([ids[raw.get(v, v)] for v in values], dtype=np.int64)


def head_matrix(
    predictions: pd.DataFrame, keys: dict[str, object], head: str, split: str
) -> tuple[pd.Series, pd.DataFrame]:
    """Gold labels by example and predictions (examples × runs) of one head on a split.

    A run is a seed and, where the predictions have the column, its ``order_seed`` (a
    crossed study has several runs per seed). A ``train_size`` key matches
    :data:`bench.results.stats.WHOLE_SPLIT` to rows without one.
    """
    rows = predictions[(predictions["head_label"] == head) & (predictions["split"] == split)]
    for column, value in keys.items():
        if column == "train_size":
            sizes = rows[column].astype("Int64").fillna(stats.WHOLE_SPLIT)
            rows = rows[(sizes == value).to_numpy(dtype=bool)]
            continue
        rows = rows[rows[column] == value]
    gold = rows.drop_duplicates("example").set_index("example")["label"].sort_index()
    runs = ["seed"]
    if "order_seed" in rows:  # a run is a seed and its batch order (crossed studies)
        rows = rows.assign(
            order_seed=rows["order_seed"].astype("Int64").fillna(stats.ORDER_FROM_SEED)
        )
        runs.append("order_seed")
    wide = rows.pivot_table(index="example", columns=runs, values="pred", aggfunc="first")
    return gold, wide.sort_index()


def per_example_row(
    predictions: pd.DataFrame, r: pd.Series, split: str = "dev", n_resamples: int = N_RESAMPLES
) -> dict[str, float] | None:
    """The paired bootstrap of one verdict row (winner vs runner-up), or None if it cannot run.

    Args:
        predictions: ``predictions.parquet`` rows.
        r: A :func:`bench.report.headline.headline_frame` row.
        split: The reporting split.
        n_resamples: Bootstrap resamples.

    Returns:
        ``diff``, ``low``, ``high``, ``p``, ``n_examples``, ``seeds_a``, ``seeds_b``.
    """
    spec = ALL_TASKS.get(str(r["task"]))
    metric = METRICS.get(str(r["metric"]))
    if not isinstance(spec, TaskSpec) or metric is None or not isinstance(r["runner_up"], str):
        return None
    keys = {"task": r["task"], "encoder": r["encoder"], "freeze_label": r["freeze_label"]}
    if "train_size" in r and "train_size" in predictions:  # one point of a learning curve
        keys["train_size"] = r["train_size"]
    gold_a, wide_a = head_matrix(predictions, keys, str(r["winner"]), split)
    gold_b, wide_b = head_matrix(predictions, keys, str(r["runner_up"]), split)
    if wide_a.empty or wide_b.empty or not gold_a.index.equals(gold_b.index):
        return None
    if (
        not wide_a.index.equals(wide_b.index)
        or wide_a.isna().any().any()
        or wide_b.isna().any().any()
    ):
        return None
    labels = encode(spec, gold_a)
    preds_a = np.stack([encode(spec, wide_a[c]) for c in wide_a.columns])
    preds_b = np.stack([encode(spec, wide_b[c]) for c in wide_b.columns])
    boot = stats.paired_bootstrap(labels, preds_a, preds_b, metric, n_resamples=n_resamples)
    return {
        "diff": boot.diff,
        "low": boot.low,
        "high": boot.high,
        "p": boot.p,
        "n_examples": float(boot.n_examples),
        "seeds_a": float(preds_a.shape[0]),
        "seeds_b": float(preds_b.shape[0]),
    }
