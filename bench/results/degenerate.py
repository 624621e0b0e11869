"""Spot the "F1 = 0" collapse: a cell whose best epoch predicts one class for everything.

A degenerate cell still finishes with status ``ok`` (its score is real), but its result
carries ``degenerate: true`` and the prediction histogram, so the collapse is visible in
the result file, the logs and the report instead of hiding behind a mean.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from bench.data.tasks import TaskSpec, TokenTaskSpec

CONSTANT_ATOL = 1e-6  # regression outputs closer than this are "one value"


def _flat(preds: Sequence[Any]) -> list[Any]:
    """Token tasks hold one list of tags per sentence; flatten them."""
    if preds and isinstance(preds[0], (list, tuple)):
        return [p for sentence in preds for p in sentence]
    return list(preds)


def prediction_summary(
    spec: TaskSpec | TokenTaskSpec, predictions: dict[str, dict[str, list[Any]]]
) -> dict[str, Any]:
    """Summarise the best epoch's predictions on the model-selection split.

    Args:
        spec: The task.
        predictions: Per split, columns ``idx``, ``label``, ``pred`` (tag lists per
            sentence for token tasks); the first split is the one that selects the epoch.

    Returns:
        ``{"split", "degenerate", "histogram"}`` for classification and token tasks
        (predicted label name -> count), ``{"split", "degenerate", "min", "max"}`` for
        regression; ``degenerate`` is true when a single class (or value) is predicted.
    """
    split = next(iter(predictions))
    preds = _flat(predictions[split]["pred"])
    if getattr(spec, "is_regression", False):
        low, high = (min(preds), max(preds)) if preds else (0.0, 0.0)
        return {
            "split": split,
            "degenerate": high - low <= CONSTANT_ATOL,
            "min": float(low),
            "max": float(high),
        }
    names = list(spec.label_names)
    counts = Counter(int(p) for p in preds)
    histogram = {names[i]: counts.get(i, 0) for i in range(len(names))}
    return {"split": split, "degenerate": len(counts) <= 1, "histogram": histogram}
