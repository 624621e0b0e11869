"""Spot the "F1 = 0" collapse: a cell whose best epoch predicts one class (still ``ok``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.data.tasks import TaskSpec, TokenTaskSpec

CONSTANT_ATOL = 1e-6  # regression outputs closer than this are "one value"


def prediction_summary(
    spec: TaskSpec | TokenTaskSpec, predictions: dict[str, dict[str, list[Any]]]
) -> dict[str, Any]:
    """The first split's ``degenerate`` flag and ``histogram`` (regression: ``min``, ``max``)."""
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
