"""Spot the "F1 = 0" collapse: a cell whose best epoch predicts one class for everything.

A degenerate cell still finishes ``ok`` (its score is real), but its result carries
``degenerate: true`` and the prediction histogram, so the collapse shows in the result
file, the logs and the report instead of hiding behind a mean.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.data.tasks import TaskSpec, TokenTaskSpec

CONSTANT_ATOL = 1e-6  # regression outputs closer than this are "one value"


def prediction_summary(
    spec: TaskSpec | TokenTaskSpec, predictions: dict[str, dict[str, list[Any]]]
) -> dict[str, Any]:
    """Summarise the best epoch's predictions on the model-selection split.

    Args:
        spec: The task.
        predictions: Per split, columns ``idx``, ``label``, ``pred`` (tag lists per
            sentence for token tasks); the first split is the one that selects the epoch.

    Returns:
        ``split``, ``degenerate`` (one class or value predicted) and ``histogram`` (label
        name -> count), or for regression ``min`` and ``max``.
    """
    split = next(iter(predictions))
    preds = list(predictions[split]["pred"])
    if preds and isinstance(preds[0], (list, tuple)):  # token tasks: tags per sentence
        preds = [p for sentence in preds for p in sentence]
    if getattr(spec, "is_regression", False):
        low, high = (float(min(preds)), float(max(preds))) if preds else (0.0, 0.0)
        return {"split": split, "degenerate": high - low <= CONSTANT_ATOL, "min": low, "max": high}
    counts = Counter(int(p) for p in preds)
    histogram = {name: counts.get(i, 0) for i, name in enumerate(spec.label_names)}
    return {"split": split, "degenerate": len(counts) <= 1, "histogram": histogram}
