"""GLUE's official metrics with torchmetrics, and the majority-class baseline.

Matthews correlation is our own small torchmetrics ``Metric`` over a confusion matrix:
torchmetrics' ``BinaryMatthewsCorrCoef`` returns 0.0256 instead of 0 for a constant
predictor (its zero-denominator fallback), which made CoLA's "baseline" a positive number.
We follow scikit-learn (and GLUE's evaluation, which uses it): MCC is 0 when either the
predictions or the labels are constant.

Pearson and Spearman correlation (STS-B) are our own :class:`Correlation` too, computed as
SciPy's ``pearsonr``/``spearmanr`` compute them (the re-scorer,
:mod:`bench.results.rescore`, uses those): undefined (NaN, recorded as None) when the
predictions or the labels are constant. torchmetrics' classes disagree there:
``SpearmanCorrCoef`` returns 0 (an epsilon in its denominator), and ``PearsonCorrCoef``,
updated batch by batch, turns the float32 rounding of its running mean into a small finite
"correlation" of a constant (e.g. -0.008 for 0.1 everywhere on STS-B dev).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import torch
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import BinaryAccuracy, BinaryF1Score, MulticlassAccuracy
from torchmetrics.utilities import dim_zero_cat

from bench.data.tasks import TaskSpec
from bench.errors import ConfigError


class MatthewsCorrCoef(Metric):
    """Matthews correlation (Gorodkin's multi-class form), 0 where it is undefined.

    Args:
        num_classes: Number of classes.
    """

    full_state_update = False
    confusion: torch.Tensor  # (C, C) counts, a metric state

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.add_state(
            "confusion",
            default=torch.zeros(num_classes, num_classes, dtype=torch.float64),
            dist_reduce_fx="sum",
        )

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Add a batch of predicted and gold class ids."""
        index = target.long().flatten() * self.num_classes + preds.long().flatten()
        counts = torch.bincount(index, minlength=self.num_classes**2)
        self.confusion += counts.reshape(self.num_classes, self.num_classes).double()

    def compute(self) -> torch.Tensor:
        """Return MCC as sklearn's ``matthews_corrcoef`` defines it."""
        c = self.confusion
        true_sum, pred_sum = c.sum(dim=1), c.sum(dim=0)
        n, correct = c.sum(), c.trace()
        cov_tp = correct * n - true_sum @ pred_sum
        cov_pp = n * n - pred_sum @ pred_sum
        cov_tt = n * n - true_sum @ true_sum
        denominator = cov_pp * cov_tt
        if denominator == 0:
            return torch.tensor(0.0, dtype=torch.float64)
        return cov_tp / torch.sqrt(denominator)


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """1-based ranks, tied values sharing their mean rank (``scipy.stats.rankdata``)."""
    _, inverse, counts = torch.unique(values, return_inverse=True, return_counts=True)
    last = torch.cumsum(counts, dim=0).to(torch.float64)  # rank of each group's last member
    return (last - (counts.to(torch.float64) - 1) / 2)[inverse]


def _float64(values: torch.Tensor) -> torch.Tensor:
    """Flattened float64 values, on their device unless it has no float64 (Apple's MPS)."""
    flat = values.detach().flatten()
    return flat.cpu().double() if flat.device.type == "mps" else flat.double()


def correlation(
    preds: torch.Tensor, target: torch.Tensor, method: Literal["pearson", "spearman"]
) -> torch.Tensor:
    """Pearson or Spearman correlation in float64, NaN where it is undefined.

    Undefined as in SciPy: when the predictions or the targets are constant (one value
    repeated, exactly), or there are fewer than two pairs; a NaN input gives NaN.

    Args:
        preds: Predicted scores, any shape (flattened).
        target: Gold scores, the same number of elements.
        method: ``"pearson"``, or ``"spearman"`` (Pearson of average ranks).

    Returns:
        A float64 scalar in [-1, 1], or NaN.
    """
    x, y = _float64(preds), _float64(target)
    nan = torch.tensor(math.nan, dtype=torch.float64, device=x.device)
    if x.numel() < 2 or bool((x == x[0]).all()) or bool((y == y[0]).all()):
        return nan
    if bool(torch.isnan(x).any() or torch.isnan(y).any()):
        return nan  # ranks would order NaN as a value
    if method == "spearman":
        x, y = _average_ranks(x), _average_ranks(y)
    x, y = x - x.mean(), y - y.mean()
    return ((x * y).sum() / torch.sqrt((x * x).sum() * (y * y).sum())).clamp(-1.0, 1.0)


class Correlation(Metric):
    """Pearson or Spearman correlation over everything updated, undefined for a constant.

    Keeps the split's scores (STS-B dev: 1,500 pairs) and computes :func:`correlation` on
    them once, in float64: the value SciPy gives on the same predictions, and NaN (None in
    the result) where the predictions or the labels are constant.

    Args:
        method: ``"pearson"`` or ``"spearman"``.
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = True
    preds: list[torch.Tensor]  # metric states: one float64 tensor per update
    target: list[torch.Tensor]

    def __init__(self, method: Literal["pearson", "spearman"]) -> None:
        super().__init__()
        self.method: Literal["pearson", "spearman"] = method
        self.add_state("preds", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        """Add a batch of predicted and gold scores (kept on the CPU where MPS lacks float64)."""
        self.preds.append(_float64(preds))
        self.target.append(_float64(target))

    def compute(self) -> torch.Tensor:
        """Return the correlation of every pair added (NaN where undefined)."""
        if isinstance(self.preds, list) and not self.preds:
            return torch.tensor(math.nan, dtype=torch.float64)
        return correlation(dim_zero_cat(self.preds), dim_zero_cat(self.target), self.method)


def _metric(name: str, num_labels: int) -> Metric:
    binary = num_labels == 2
    if name == "accuracy":
        return BinaryAccuracy() if binary else MulticlassAccuracy(num_labels, average="micro")
    if name == "f1":  # GLUE's F1 is binary F1 of the positive class (MRPC, QQP)
        return BinaryF1Score()
    if name == "mcc":
        return MatthewsCorrCoef(num_labels)
    if name in ("pearson", "spearman"):
        return Correlation("pearson" if name == "pearson" else "spearman")
    raise ConfigError(f"unknown metric {name!r}")


def build_metrics(spec: TaskSpec) -> MetricCollection:
    """Build the task's metric collection.

    Args:
        spec: The task.

    Returns:
        A ``MetricCollection`` updated with ``(preds, target)``: class ids for
        classification, float scores for regression.
    """
    return MetricCollection({name: _metric(name, spec.num_labels) for name in spec.metrics})


def finite_or_none(value: float) -> float | None:
    """Return ``value`` as a float, or None where it is NaN or infinite (JSON-safe)."""
    value = float(value)
    return value if math.isfinite(value) else None


def score(
    spec: TaskSpec, preds: Sequence[float], labels: Sequence[float]
) -> dict[str, float | None]:
    """Score predictions with the task's metrics.

    Args:
        spec: The task.
        preds: Predicted class ids (or scores for regression).
        labels: Gold class ids (or scores).

    Returns:
        Metric name -> value (None where undefined, e.g. correlation of a constant).
    """
    dtype = torch.float32 if spec.is_regression else torch.long
    metrics = build_metrics(spec)
    with torch.no_grad():
        values = metrics(torch.tensor(preds, dtype=dtype), torch.tensor(labels, dtype=dtype))
    return {name: finite_or_none(value) for name, value in values.items()}


def majority_baseline(
    spec: TaskSpec, train_labels: Sequence[float], dev_labels: Sequence[float]
) -> dict[str, object]:
    """Score the constant predictor: the most frequent training class (mean score for STS-B).

    Args:
        spec: The task.
        train_labels: Labels of the training data actually used.
        dev_labels: Gold labels of the evaluation split.

    Returns:
        ``{"strategy", "prediction", "metrics"}``; correlations of a constant are None.
    """
    if spec.is_regression:
        prediction: float = float(sum(train_labels) / len(train_labels))
        strategy = "mean"
    else:
        prediction = Counter(train_labels).most_common(1)[0][0]
        strategy = "majority"
    if spec.is_regression:  # the correlation of a constant predictor is undefined
        metrics: dict[str, float | None] = dict.fromkeys(spec.metrics)
    else:
        metrics = score(spec, [prediction] * len(dev_labels), dev_labels)
    return {"strategy": strategy, "prediction": prediction, "metrics": metrics}
