"""Re-score a cell from its predictions and compare with the metric it recorded.

A committed number is only as good as the predictions behind it: :func:`rescore` recomputes
every metric of the task from ``predictions.parquet``-shaped rows with scikit-learn, SciPy
and seqeval (not the torchmetrics code that produced the recorded value during training),
and :func:`mismatches` lists the metrics that disagree. ``bench.results.collect`` refuses a
cell with any mismatch.

Tolerance: the recorded values were computed by torchmetrics in float32 on the same
predictions, so they agree to about 1e-6 for counts-based metrics (accuracy, F1, MCC) and
to about 1e-5 for correlations of float32 scores (about 1e-12 since training computes them
in float64, :class:`bench.model.metrics.Correlation`); :data:`TOLERANCE` (1e-4) leaves room
for that and nothing else: one changed prediction out of 872 SST-2 examples moves accuracy by
1.1e-3.

Undefined metrics agree: a correlation of constant predictions (or constant labels) is
undefined, recorded as None by training and NaN from SciPy, and that cell is kept (its
undefined main metric makes it a failed run in :mod:`bench.results.stats`), not refused.
Results recorded before training did so hold Spearman 0.0 there (torchmetrics'
epsilon-guarded value); :func:`agrees` accepts a recorded 0 (within :data:`TOLERANCE`)
for a correlation that SciPy finds undefined because the predictions or labels are
constant, and nothing else.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bench.data.ner_metrics import entity_scores
from bench.data.selection import SELECTION_SPLIT
from bench.data.tasks import ALL_TASKS, TaskSpec, TokenTaskSpec
from bench.errors import DataError
from bench.results.predictions import cell_predictions

#: Absolute difference allowed between a recorded and a re-scored metric.
TOLERANCE = 1e-4
#: Metrics undefined for a constant input (SciPy: NaN); older results recorded 0 for them.
CORRELATIONS = frozenset({"pearson", "spearman"})


def _positive(spec: TaskSpec) -> str:
    """The positive class of a binary F1 as written in the files (class id 1)."""
    raw = {name: text for text, name in spec.tsv_label_map.items()}
    return raw.get(spec.label_names[1], spec.label_names[1])


def sequence_scores(spec: TaskSpec, label: pd.Series, pred: pd.Series) -> dict[str, float]:
    """The task's metrics from label/pred text columns of a GLUE split."""
    if spec.is_regression:  # NaN where undefined: constant predictions or labels
        y, p = label.astype(float).to_numpy(), pred.astype(float).to_numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConstantInputWarning)  # an expected outcome
            return {"pearson": float(pearsonr(y, p)[0]), "spearman": float(spearmanr(y, p)[0])}
    y, p = label.astype(str).to_numpy(), pred.astype(str).to_numpy()
    scores = {
        "accuracy": float(accuracy_score(y, p)),
        "f1": float(f1_score(y, p, pos_label=_positive(spec), average="binary", zero_division=0))
        if len(spec.label_names) == 2
        else math.nan,
        "mcc": float(matthews_corrcoef(y, p)),
    }
    return {m: scores[m] for m in spec.metrics}


def token_scores(spec: TokenTaskSpec, rows: pd.DataFrame) -> dict[str, float | None]:
    """Entity-level scores (seqeval, strict IOB2) from the token rows of a CoNLL split."""
    ordered = rows.sort_values(["example", "token"], kind="stable")
    gold = ordered.groupby("example", sort=True)["label"].apply(list).tolist()
    pred = ordered.groupby("example", sort=True)["pred"].apply(list).tolist()
    scores = entity_scores(gold, pred, spec.entity_types)
    return {m: scores.get(m) for m in spec.metrics}


def rescore(task: str, rows: pd.DataFrame) -> dict[str, float | None]:
    """Every metric of ``task`` from one cell's rows of one split."""
    spec = ALL_TASKS[task]
    if isinstance(spec, TokenTaskSpec):
        return token_scores(spec, rows)
    return dict(sequence_scores(spec, rows["label"], rows["pred"]))


def constant_input(rows: pd.DataFrame) -> bool:
    """Whether a regression split's predictions or labels are one value (as SciPy checks).

    Args:
        rows: One split's rows of an STS-B-like cell (``label`` and ``pred`` as score text).

    Returns:
        True when every ``pred``, or every ``label``, is the same number.
    """
    for column in ("pred", "label"):
        values = rows[column].astype(float).to_numpy()
        if values.size and bool((values == values[0]).all()):
            return True
    return False


def agrees(metric: str, recorded: float | None, again: float | None, constant: bool) -> bool:
    """Whether a recorded metric and its re-scored value agree.

    Args:
        metric: The metric's name.
        recorded: The value the result recorded (None: undefined).
        again: The value re-scored from the predictions (None or NaN: undefined).
        constant: Whether the split's predictions or labels are constant
            (:func:`constant_input`; False for classification and token tasks).

    Returns:
        True when both are undefined, when both are numbers within :data:`TOLERANCE`, or
        when an older result recorded 0 for a correlation that is undefined because the
        input is constant; False otherwise (a number against an undefined value).
    """
    if again is None or math.isnan(again):
        if recorded is None or math.isnan(recorded):
            return True
        return metric in CORRELATIONS and constant and abs(recorded) <= TOLERANCE
    if recorded is None or math.isnan(recorded):
        return False
    return bool(np.isclose(recorded, again, atol=TOLERANCE, rtol=0))


def _recorded(result: dict[str, Any], predictions: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Recorded metrics per split: reporting splits, and the selection slice where it has rows."""
    recorded = dict((result.get("best") or {}).get("metrics") or {})
    selection = result.get("selection") or {}
    if (
        selection.get("split") == SELECTION_SPLIT
        and isinstance(selection.get("metrics"), dict)
        and (predictions["split"] == SELECTION_SPLIT).any()
    ):
        recorded[SELECTION_SPLIT] = selection["metrics"]
    return recorded


def mismatches(result: dict[str, Any], predictions: pd.DataFrame) -> list[str]:
    """Metrics recorded in ``result`` that its predictions do not reproduce.

    The reporting splits' metrics (``result["best"]``) and, where the cell wrote the
    selection slice's predictions, the selected epoch's selection scores
    (``result["selection"]["metrics"]``).

    Args:
        result: A collected ``ok`` result.
        predictions: That cell's rows (:func:`bench.results.predictions.cell_predictions`).

    Returns:
        One message per disagreeing metric (empty: the cell re-scores); metrics undefined
        on both sides agree (:func:`agrees`).
    """
    task = str(result["cell"]["task"])
    regression = bool(getattr(ALL_TASKS.get(task), "is_regression", False))
    problems = []
    for split, recorded in _recorded(result, predictions).items():
        rows = predictions[predictions["split"] == split]
        if rows.empty:
            problems.append(f"{split}: no predictions")
            continue
        again = rescore(task, rows)
        constant = regression and constant_input(rows)
        for metric, value in recorded.items():
            if metric not in again:
                continue  # a metric of the record that predictions cannot give (none today)
            new = again[metric]
            if not agrees(metric, value, new, constant):
                problems.append(f"{split} {metric}: recorded {value}, predictions give {new}")
    return problems


#: Results of this schema and later always wrote their predictions, so they must re-score.
PREDICTIONS_SCHEMA = 2


def verified(
    results: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[pd.DataFrame], list[str]]:
    """Keep the results whose predictions reproduce their metrics; name the others.

    An ``ok`` result of schema :data:`PREDICTIONS_SCHEMA` or later is refused when a
    prediction file is missing or unreadable, or a recorded metric does not re-score.
    Older results (schema 1, made before predictions were part of the result) are kept
    when they have no prediction files, with a note that they were not re-scored; cells
    that failed have no predictions to check.

    Args:
        results: Collected results (:func:`bench.results.collect.read_results`).

    Returns:
        ``(kept results, their prediction frames, one message per refused or unchecked cell)``.
    """
    kept, frames, problems = [], [], []
    for result in results:
        if result.get("status") != "ok":
            kept.append(result)
            continue
        legacy = int(result.get("schema", 1)) < PREDICTIONS_SCHEMA
        try:
            predictions = cell_predictions(result)
        except DataError as err:
            if legacy:
                problems.append(f"{result['run_dir']}: not re-scored (a schema-1 result): {err}")
                kept.append(result)
            else:
                problems.append(f"{result['run_dir']}: refused: {err}")
            continue
        wrong = mismatches(result, predictions)
        if wrong:
            problems.append(
                f"{result['run_dir']}: refused: its predictions do not re-score "
                f"({'; '.join(wrong)})"
            )
            continue
        kept.append(result)
        frames.append(predictions)
    return kept, frames, problems
