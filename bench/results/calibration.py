"""Calibration of the classification heads: ECE, Brier score, NLL, temperature scaling.

Everything here reads the class probabilities of ``predictions.parquet`` (the ``probs``
column, :mod:`bench.results.predictions`): the softmax of the selected model's logits, in
class-id order. Regression (STS-B) and token tasks (CoNLL-2003) store none and are left
out. Definitions, for ``n`` examples with probabilities ``p_i`` over ``C`` classes, label
``y_i``, confidence ``c_i = max_k p_ik`` and prediction ``argmax_k p_ik`` (ties: the lower
class id, as ``pred``):

- **ECE** (expected calibration error, Guo et al. 2017): ``n_bins`` (default
  :data:`N_BINS` = 15) equal-width bins over the confidence, bin ``m`` holding
  ``((m-1)/M, m/M]`` (the first bin also holds 0);
  ``ECE = sum_m |B_m|/n * |accuracy(B_m) - mean confidence(B_m)|``.
- **Brier score**: the multi-class form, ``mean_i sum_k (p_ik - 1[y_i = k])^2``, in
  [0, 2]; for two classes it is twice scikit-learn's ``brier_score_loss`` of class 1.
- **NLL**: ``mean_i -ln p_i,y_i`` (natural log), ``p`` floored at the smallest normal
  float64 so that a stored 0 stays finite.
- **Temperature scaling** (Guo et al. 2017): one ``T > 0`` per run, scaled probabilities
  ``softmax(ln p / T)`` (the same as ``softmax(logits / T)``: ``ln p`` differs from the
  logits by a constant per example), ``T`` minimising the NLL on the run's **selection
  slice** (``split == "select"``, held out from train). It is never fitted on a reporting
  split: a run without a selection slice (``selection=dev``, or one written before the
  slice's predictions were stored) gets ``T = NaN`` and no scaled scores.

:func:`calibration_tables` gives one row per run and reporting split, and the per-bin
totals behind the reliability diagrams; :func:`calibration_summary` and
:func:`pooled_reliability` aggregate them over seeds. Torch-free (NumPy, SciPy, pandas).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

from bench.axes.optional import AXIS_COLUMNS
from bench.cell import CELL_COLUMNS
from bench.data.selection import SELECTION_SPLIT
from bench.data.tasks import ALL_TASKS, TaskSpec
from bench.errors import DataError
from bench.results.predictions import label_texts

#: Equal-width confidence bins of the ECE and the reliability diagrams.
N_BINS = 15
#: The range searched for the temperature (a slice the model separates perfectly drives T
#: towards 0: the fit then stops at the lower bound).
TEMPERATURE_BOUNDS = (0.01, 100.0)
#: The floor of a probability under a logarithm (the smallest normal float64).
TINY = float(np.finfo(np.float64).tiny)
#: The scores computed before and after temperature scaling.
SCORES = ("ece", "brier", "nll")
#: One row per run and reporting split (:func:`calibration_tables`).
RUN_COLUMNS = [
    *CELL_COLUMNS,
    *AXIS_COLUMNS,
    "config_hash",
    "split",
    "n",
    "accuracy",
    "ece",
    "brier",
    "nll",
    "temperature",
    "n_select",
    "ece_ts",
    "brier_ts",
    "nll_ts",
]
#: Per-bin totals of a run and split, before (``scaled`` False) and after scaling.
BIN_COLUMNS = [
    *CELL_COLUMNS,
    *AXIS_COLUMNS,
    "config_hash",
    "split",
    "scaled",
    "bin",
    "lower",
    "upper",
    "count",
    "confidence_sum",
    "correct_sum",
]
#: What a setting is for the summaries: one row per head, freezing strategy, training size
#: (one point of a learning curve; missing where the whole split trained) and split.
SETTING_KEYS = ["task", "encoder", "freeze_label", "train_size", "head_label", "split"]


def binning_text(n_bins: int = N_BINS) -> str:
    """The binning in words, for captions: ``15 equal-width bins ...``."""
    return (
        f"{n_bins} equal-width bins over the top-class probability (confidence), "
        f"bin m = ((m−1)/{n_bins}, m/{n_bins}]"
    )


def _checked(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``probs`` as an (n, C) float array and ``labels`` as n class ids, or a ValueError."""
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels)
    if p.ndim != 2 or y.ndim != 1 or len(p) != len(y):
        raise ValueError(f"expected (n, C) probabilities and n labels, got {p.shape}, {y.shape}")
    if len(y) and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= p.shape[1]):
        raise ValueError(f"labels must be class ids in [0, {p.shape[1]})")
    return p, y.astype(np.int64)


def bin_totals(
    probs: np.ndarray, labels: np.ndarray, n_bins: int = N_BINS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per confidence bin: examples, summed confidence, correct predictions.

    Args:
        probs: (n, C) class probabilities.
        labels: (n,) class ids.
        n_bins: Number of equal-width bins over [0, 1].

    Returns:
        Three arrays of length ``n_bins``: counts, confidence sums, correct counts.
    """
    p, y = _checked(probs, labels)
    confidence = p.max(axis=1) if len(p) else np.zeros(0)
    correct = (p.argmax(axis=1) == y).astype(np.float64) if len(p) else np.zeros(0)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    index = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)
    counts = np.bincount(index, minlength=n_bins).astype(np.float64)
    return (
        counts,
        np.bincount(index, weights=confidence, minlength=n_bins),
        np.bincount(index, weights=correct, minlength=n_bins),
    )


def ece_from_totals(
    counts: np.ndarray, confidence_sum: np.ndarray, correct_sum: np.ndarray
) -> float:
    """ECE from per-bin totals (:func:`bin_totals`); NaN without examples."""
    total = float(np.sum(counts))
    if not total:
        return math.nan
    return float(np.sum(np.abs(np.asarray(correct_sum) - np.asarray(confidence_sum))) / total)


def expected_calibration_error(
    probs: np.ndarray, labels: np.ndarray, n_bins: int = N_BINS
) -> float:
    """Expected calibration error over ``n_bins`` equal-width confidence bins.

    Args:
        probs: (n, C) class probabilities.
        labels: (n,) class ids.
        n_bins: Number of bins.

    Returns:
        ``sum_m |B_m|/n * |accuracy(B_m) - confidence(B_m)|``, in [0, 1]; NaN when empty.
    """
    return ece_from_totals(*bin_totals(probs, labels, n_bins))


def brier_score(probs: np.ndarray, labels: np.ndarray) -> float:
    """Multi-class Brier score: mean over examples of ``sum_k (p_k - 1[y = k])^2`` (0 to 2).

    Args:
        probs: (n, C) class probabilities.
        labels: (n,) class ids.

    Returns:
        The score; NaN when empty.
    """
    p, y = _checked(probs, labels)
    if not len(p):
        return math.nan
    onehot = np.eye(p.shape[1])[y]
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def negative_log_likelihood(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean ``-ln p_y`` (``p`` floored at :data:`TINY`); NaN when empty.

    Args:
        probs: (n, C) class probabilities.
        labels: (n,) class ids.

    Returns:
        The mean negative log-likelihood in nats.
    """
    p, y = _checked(probs, labels)
    if not len(p):
        return math.nan
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y], TINY))))


def scale_probabilities(probs: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(ln p / T)``: the probabilities at temperature ``T`` (``T = 1``: unchanged).

    Args:
        probs: (n, C) class probabilities.
        temperature: ``T > 0``.

    Returns:
        (n, C) scaled probabilities (the argmax, hence every prediction, is unchanged).
    """
    if not temperature > 0:
        raise ValueError(f"the temperature must be positive, got {temperature}")
    z = np.log(np.maximum(np.asarray(probs, dtype=np.float64), TINY)) / temperature
    return np.exp(z - logsumexp(z, axis=1, keepdims=True))


def _scaled_nll(log_probs: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    z = log_probs / temperature
    # NumPy's reduction, not scipy.special.logsumexp: the same stable log-sum-exp, without
    # the per-call overhead that dominated a report's hundreds of temperature fits.
    return float(np.mean(np.logaddexp.reduce(z, axis=1) - z[np.arange(len(labels)), labels]))


def fit_temperature(
    probs: np.ndarray,
    labels: np.ndarray,
    bounds: tuple[float, float] = TEMPERATURE_BOUNDS,
) -> float:
    """The temperature that minimises the NLL of ``probs`` (a bounded search over ln T).

    The NLL of temperature-scaled probabilities is convex in ``1/T``, so the bounded
    Brent search over ``ln T`` finds its one minimum (or stops at a bound).

    Args:
        probs: (n, C) class probabilities of the fitting examples (the selection slice).
        labels: (n,) class ids.
        bounds: The range of ``T`` searched.

    Returns:
        ``T``; NaN without examples.
    """
    p, y = _checked(probs, labels)
    if not len(p):
        return math.nan
    log_probs = np.log(np.maximum(p, TINY))
    found = minimize_scalar(
        lambda t: _scaled_nll(log_probs, y, math.exp(t)),
        bounds=(math.log(bounds[0]), math.log(bounds[1])),
        method="bounded",
        options={"xatol": 1e-7},
    )
    return float(math.exp(found.x))


def _arrays(labels: np.ndarray, probs: np.ndarray, spec: TaskSpec) -> tuple[np.ndarray, np.ndarray]:
    """(n, C) probabilities and class ids of prediction rows of one classification task.

    Args:
        labels: The rows' labels as written in the data (object array of strings).
        probs: The rows' class probabilities (object array of 1-D arrays).
        spec: Their task.
    """
    ids = {text: k for k, text in enumerate(label_texts(spec))}
    unknown = sorted({str(text) for text in labels if text not in ids})
    if unknown:
        raise DataError(f"{spec.name}: labels {unknown} are not classes of the task")
    stacked = np.stack([np.asarray(p, dtype=np.float64) for p in probs])
    if stacked.shape[1] != len(ids):
        raise DataError(f"{spec.name}: {stacked.shape[1]} probabilities per row, not {len(ids)}")
    return stacked, np.fromiter((ids[text] for text in labels), dtype=np.int64, count=len(labels))


def has_probabilities(predictions: pd.DataFrame) -> bool:
    """Whether any row of a ``predictions.parquet`` table carries class probabilities."""
    return "probs" in predictions and bool(predictions["probs"].notna().any())


def calibration_tables(
    predictions: pd.DataFrame, n_bins: int = N_BINS
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Calibration of every run with probabilities, before and after temperature scaling.

    Args:
        predictions: ``predictions.parquet`` rows (:data:`~bench.results.predictions.
            PREDICTION_COLUMNS`); rows without ``probs`` are ignored.
        n_bins: Number of ECE / reliability bins.

    Returns:
        ``(runs, bins)``: one row per run and reporting split (:data:`RUN_COLUMNS`), and
        the per-bin totals behind its reliability diagram (:data:`BIN_COLUMNS`). Both empty
        when no row has probabilities.

    Raises:
        DataError: When a label is not a class of its task or a row's probabilities do not
            have one value per class.
    """
    runs: list[dict[str, object]] = []
    bins: list[dict[str, object]] = []
    if not has_probabilities(predictions):
        return pd.DataFrame(columns=RUN_COLUMNS), pd.DataFrame(columns=BIN_COLUMNS)
    rows = predictions[predictions["probs"].notna()].reset_index(drop=True)
    keys = [*CELL_COLUMNS, *AXIS_COLUMNS, "config_hash"]
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # Plain arrays, sliced by each run's row positions: selecting sub-frames per run and
    # split was most of the time of a report with a few hundred runs.
    splits = rows["split"].to_numpy(dtype=object)
    label_column = rows["label"].to_numpy(dtype=object)
    probs_column = rows["probs"].to_numpy(dtype=object)
    key_columns = {key: rows[key].to_numpy(dtype=object) for key in keys}  # <NA> stays <NA>
    for where in rows.groupby(keys, sort=True, dropna=False).indices.values():
        ident = {key: column[where[0]] for key, column in key_columns.items()}
        spec = ALL_TASKS.get(str(ident["task"]))
        if not isinstance(spec, TaskSpec) or spec.is_regression:
            continue
        select = where[splits[where] == SELECTION_SPLIT]
        temperature = (
            fit_temperature(*_arrays(label_column[select], probs_column[select], spec))
            if len(select)
            else math.nan
        )
        reported = {s for s in splits[where] if isinstance(s, str)} - {SELECTION_SPLIT}
        for split in sorted(reported):  # a missing split is dropped, as groupby drops it
            part = where[splits[where] == split]
            probs, labels = _arrays(label_column[part], probs_column[part], spec)
            record: dict[str, object] = {
                **ident,
                "split": split,
                "n": len(labels),
                "accuracy": float(np.mean(probs.argmax(axis=1) == labels)),
                "temperature": temperature,
                "n_select": len(select),
            }
            versions = {False: probs}
            if math.isfinite(temperature):
                versions[True] = scale_probabilities(probs, temperature)
            for scaled, p in versions.items():
                totals = bin_totals(p, labels, n_bins)
                suffix = "_ts" if scaled else ""
                record[f"ece{suffix}"] = ece_from_totals(*totals)
                record[f"brier{suffix}"] = brier_score(p, labels)
                record[f"nll{suffix}"] = negative_log_likelihood(p, labels)
                for m in range(n_bins):
                    bins.append(
                        {
                            **ident,
                            "split": split,
                            "scaled": scaled,
                            "bin": m,
                            "lower": float(edges[m]),
                            "upper": float(edges[m + 1]),
                            "count": float(totals[0][m]),
                            "confidence_sum": float(totals[1][m]),
                            "correct_sum": float(totals[2][m]),
                        }
                    )
            runs.append(record)
    return (
        pd.DataFrame(runs, columns=RUN_COLUMNS),
        pd.DataFrame(bins, columns=BIN_COLUMNS),
    )


def calibration_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of every score, per setting.

    Args:
        runs: :func:`calibration_tables`' first table.

    Returns:
        One row per :data:`SETTING_KEYS`: ``seeds``, ``scaled_seeds`` (runs with a fitted
        temperature), ``<score>_mean``/``<score>_std`` for ``accuracy``, ``temperature``
        and each score of :data:`SCORES` before and after scaling (``_ts``).
    """
    measures = ["accuracy", "temperature", *SCORES, *(f"{s}_ts" for s in SCORES)]
    if runs.empty:
        columns = [*SETTING_KEYS, "seeds", "scaled_seeds"]
        columns += [f"{m}_{a}" for m in measures for a in ("mean", "std")]
        return pd.DataFrame(columns=columns)
    grouped = runs.groupby(SETTING_KEYS, sort=True, dropna=False)
    out = grouped.size().rename("seeds").to_frame()
    out["scaled_seeds"] = grouped["temperature"].count()
    for measure in measures:
        values = grouped[measure]
        out[f"{measure}_mean"] = values.mean()
        out[f"{measure}_std"] = values.std(ddof=1)
    return out.reset_index()


def pooled_reliability(bins: pd.DataFrame, keys: Sequence[str] = SETTING_KEYS) -> pd.DataFrame:
    """Reliability-diagram points pooled over the runs (seeds) of each group.

    Args:
        bins: :func:`calibration_tables`' second table.
        keys: What one curve is (default: a head in one setting and split).

    Returns:
        One row per group, ``scaled`` and non-empty bin: ``lower``, ``upper``, ``count``,
        ``confidence`` (mean confidence) and ``accuracy`` of the pooled examples.
    """
    columns = [*keys, "scaled", "bin", "lower", "upper", "count", "confidence", "accuracy"]
    if bins.empty:
        return pd.DataFrame(columns=columns)
    pooled = (
        bins.groupby([*keys, "scaled", "bin"], sort=True, dropna=False)
        .agg(
            lower=("lower", "first"),
            upper=("upper", "first"),
            count=("count", "sum"),
            confidence_sum=("confidence_sum", "sum"),
            correct_sum=("correct_sum", "sum"),
        )
        .reset_index()
    )
    pooled = pooled[pooled["count"] > 0].copy()
    pooled["confidence"] = pooled["confidence_sum"] / pooled["count"]
    pooled["accuracy"] = pooled["correct_sum"] / pooled["count"]
    return pooled[columns].reset_index(drop=True)
