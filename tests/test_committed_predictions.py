"""Every committed cell re-scores from its committed predictions, by independent code.

``results/<experiment>/predictions.parquet`` holds each cell's reporting-split predictions
(label strings as written in the data files); ``results.csv`` holds the scores the tables
and READMEs quote. Here each recorded score is computed again from the predictions with
scikit-learn, SciPy and seqeval alone (not :mod:`bench.results.rescore`, which ``collect``
uses), so a reader who trusts neither can check every number.

CoNLL-2003 entity F1 is slow to recompute (seqeval, a few thousand sentences per split): the
default run checks the dev split of one seed of every head, ``-m slow`` every cell and split.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import pearsonr, spearmanr
from seqeval.metrics.v1 import precision_recall_fscore_support
from seqeval.scheme import IOB2
from sklearn.metrics import accuracy_score, matthews_corrcoef
from sklearn.metrics import f1_score as binary_f1

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(
    p.parent.name for p in (ROOT / "results").glob("*/predictions.parquet") if p.is_file()
)
#: What identifies a cell in both files (an axis a file lacks is NaN).
KEY = ["task", "encoder", "head_label", "freeze_label", "seed", "train_size", "order_seed"]
#: Experiments of token tasks: every cell with -m slow, one seed of each head (dev) by default.
TOKEN = {"fair_table7", "fair_table7_probe"}


def _norm(value: object) -> str:
    """A key value as both files spell it alike: NaN as ``-``, ``2000.0`` as ``2000``."""
    return "-" if pd.isna(value) else str(value).removesuffix(".0")  # type: ignore[arg-type]


def _groups(frame: pd.DataFrame) -> dict[tuple[str, ...], pd.DataFrame]:
    """The frame's rows per cell and split, under comparable keys (a missing axis is NaN)."""
    frame = frame.assign(**{c: np.nan for c in KEY if c not in frame})
    grouped = frame.groupby([*KEY, "split"], sort=False, dropna=False)
    return {tuple(_norm(v) for v in key): rows for key, rows in grouped}


def _sequence_scores(task: str, rows: pd.DataFrame) -> dict[str, float]:
    """Scores of a GLUE cell's split, from its label strings (STS-B: floats)."""
    label, pred = rows["label"].astype(str), rows["pred"].astype(str)
    if task == "stsb":
        gold, guess = label.astype(float).to_numpy(), pred.astype(float).to_numpy()
        if np.ptp(guess) == 0:  # a constant prediction correlates with nothing
            return {"pearson": 0.0, "spearman": 0.0}
        return {
            "pearson": float(pearsonr(gold, guess).statistic),
            "spearman": float(spearmanr(gold, guess).statistic),
        }
    scores = {"accuracy": float(accuracy_score(label, pred))}
    if task == "mrpc":
        scores["f1"] = float(binary_f1(label, pred, pos_label="1", zero_division=0.0))
    if task == "cola":
        scores["mcc"] = float(matthews_corrcoef(label, pred))
    return scores


def _token_scores(rows: pd.DataFrame) -> dict[str, float]:
    """Entity scores of a CoNLL cell's split (strict IOB2 spans, seqeval)."""
    rows = rows.sort_values(["example", "token"])
    starts = np.flatnonzero(np.diff(rows["example"].to_numpy())) + 1  # one list a sentence
    gold = [part.tolist() for part in np.split(rows["label"].to_numpy(dtype=object), starts)]
    pred = [part.tolist() for part in np.split(rows["pred"].to_numpy(dtype=object), starts)]
    # strict mode (seqeval.metrics.v1): the spans of f1_score(..., mode="strict"), read once
    precision, recall, f1, _ = precision_recall_fscore_support(
        gold, pred, average="micro", scheme=IOB2, zero_division=0
    )
    return {"f1": float(f1), "precision": float(precision), "recall": float(recall)}


def _cells(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The experiment's predictions and its recorded scores of ok cells."""
    folder = ROOT / "results" / name
    table = pd.read_csv(folder / "results.csv")
    return pd.read_parquet(folder / "predictions.parquet"), table[table["status"] == "ok"]


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in TOKEN else n for n in COMMITTED]
    + [pytest.param(n, id=f"{n}-one-seed") for n in sorted(TOKEN) if n in COMMITTED],
)
def test_every_recorded_score_is_what_the_committed_predictions_give(name, request):
    predictions, table = _cells(name)
    if request.node.callspec.id.endswith("-one-seed"):  # each head's lowest seed, on dev
        table = table[table["seed"] == table.groupby("head_label")["seed"].transform("min")]
        table = table[table["split"] == "dev"]
        predictions = predictions[
            predictions["seed"].isin(set(table["seed"])) & (predictions["split"] == "dev")
        ]
    groups = _groups(predictions)
    cells = _groups(table)
    checked = 0
    for key, recorded in cells.items():
        rows = groups.get(key)
        assert rows is not None, f"{name}: no committed predictions for {key}"
        task = key[0]
        again = _token_scores(rows) if task == "conll2003" else _sequence_scores(task, rows)
        for metric, value in recorded.set_index("metric")["value"].items():
            if metric not in again:  # per-type and conlleval F1: checked by collect only
                continue
            assert again[metric] == pytest.approx(float(value), abs=1e-4), (name, key, metric)
            checked += 1
    # every scored cell of the experiment (or of the sample) was checked, none skipped
    assert checked >= len(cells) > 0
