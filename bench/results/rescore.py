"""Re-score a cell from its predictions (scikit-learn, SciPy, seqeval); see docs/protocol.md."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bench.cell import SUPERSEDED_DIR
from bench.data.ner_metrics import entity_scores
from bench.data.selection import SELECTION_SPLIT
from bench.data.tasks import ALL_TASKS, TaskSpec, TokenTaskSpec
from bench.errors import DataError
from bench.results.predictions import (
    PREDICTIONS_SCHEMA,
    cell_predictions,
    label_texts,
    missing_predictions,
)

#: Recorded vs re-scored: float32 agrees to ~1e-5; one SST-2 prediction of 872 moves 1.1e-3.
TOLERANCE = 1e-4
#: Metrics undefined for a constant input (SciPy: NaN); older results recorded 0 for them.
CORRELATIONS = frozenset({"pearson", "spearman"})
#: How to get back a cell whose predictions are gone (bench.run.resume trains it again).
_RETRAIN = (
    "restore the file, or launch its sweep again: that trains the cell again and keeps "
    f"this result in {SUPERSEDED_DIR}/"
)


def rescore(spec: TaskSpec | TokenTaskSpec, rows: pd.DataFrame) -> dict[str, Any]:
    """Every metric of a task from one cell's rows of one split (None or NaN: undefined)."""
    if isinstance(spec, TokenTaskSpec):  # entity scores, seqeval strict IOB2
        grouped = rows.sort_values(["example", "token"], kind="stable").groupby("example")
        gold, pred = (grouped[c].apply(list).tolist() for c in ("label", "pred"))
        entities = entity_scores(gold, pred, spec.entity_types)
        return {m: entities.get(m) for m in spec.metrics}
    if spec.is_regression:
        y, p = rows["label"].astype(float).to_numpy(), rows["pred"].astype(float).to_numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConstantInputWarning)  # an expected outcome
            return {"pearson": float(pearsonr(y, p)[0]), "spearman": float(spearmanr(y, p)[0])}
    y, p = rows["label"].astype(str).to_numpy(), rows["pred"].astype(str).to_numpy()
    scores = {"accuracy": accuracy_score(y, p), "mcc": matthews_corrcoef(y, p)}
    if len(spec.label_names) == 2:  # the positive class is class id 1
        scores["f1"] = f1_score(y, p, pos_label=label_texts(spec)[1], zero_division=0)
    return {m: float(scores.get(m, math.nan)) for m in spec.metrics}


def _agrees(metric: str, recorded: float | None, again: float | None, constant: bool) -> bool:
    """Whether both are undefined, within :data:`TOLERANCE`, or a legacy 0 of a constant."""
    undefined = again is None or math.isnan(again)
    if recorded is None or math.isnan(recorded):
        return undefined
    if undefined:
        return metric in CORRELATIONS and constant and abs(recorded) <= TOLERANCE
    return abs(recorded - again) <= TOLERANCE  # type: ignore[operator]


def mismatches(result: dict[str, Any], predictions: pd.DataFrame) -> list[str]:
    """One message per metric recorded in an ``ok`` result that its predictions do not give."""
    spec = ALL_TASKS[str(result["cell"]["task"])]
    recorded = dict((result.get("best") or {}).get("metrics") or {})
    selection = result.get("selection") or {}
    metrics = selection.get("metrics") if selection.get("split") == SELECTION_SPLIT else None
    if isinstance(metrics, dict) and (predictions["split"] == SELECTION_SPLIT).any():
        recorded[SELECTION_SPLIT] = metrics  # the cell wrote the slice's rows
    problems = []
    for split, values in recorded.items():
        rows = predictions[predictions["split"] == split]
        if rows.empty:
            problems.append(f"{split}: no predictions")
            continue
        again = rescore(spec, rows)
        constant = bool(getattr(spec, "is_regression", False)) and any(
            np.ptp(rows[c].astype(float).to_numpy()) == 0 for c in ("pred", "label")
        )
        for metric, value in values.items():
            new = again.get(metric)
            if metric in again and not _agrees(metric, value, new, constant):
                problems.append(f"{split} {metric}: recorded {value}, predictions give {new}")
    return problems


def verified(
    results: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[pd.DataFrame], list[str]]:
    """Kept results, their predictions, and one message per refused or unchecked cell.

    An ``ok`` result is refused when a metric does not re-score or (from schema
    :data:`PREDICTIONS_SCHEMA` on) its predictions are missing, unreadable, or do not
    predict each example of their split once.
    """
    kept, frames, problems = [], [], []
    for result in results:
        if result.get("status") != "ok":
            kept.append(result)
            continue
        where = result["run_dir"]
        try:
            predictions = cell_predictions(result)
        except DataError as err:
            if int(result.get("schema", 1)) < PREDICTIONS_SCHEMA:
                problems.append(f"{where}: not re-scored (a schema-1 result): {err}")
                kept.append(result)
            elif missing_predictions(result, Path(where)):
                problems.append(f"{where}: refused: {err}: it cannot be re-scored; {_RETRAIN}")
            else:
                problems.append(f"{where}: refused: {err}")
            continue
        if wrong := mismatches(result, predictions):
            why = f"its predictions do not re-score ({'; '.join(wrong)})"
            problems.append(f"{where}: refused: {why}")
            continue
        kept.append(result)
        frames.append(predictions)
    return kept, frames, problems
