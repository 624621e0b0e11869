"""Per-example predictions of every cell, as one table anyone can re-score.

Each cell's run directory holds its reporting-split predictions, written when it finished
(``predictions_<split>.csv`` for GLUE: ``idx,label,pred`` with class ids or STS-B scores;
``predictions_<split>.txt`` for CoNLL: ``word gold pred`` lines, a blank line after each
sentence, sentences in data order). GLUE classification files made since calibration was
added carry one more column per class, ``prob_0 ... prob_<C-1>``: the softmax of the
selected model's logits, in class-id order (the task's ``label_names``); older files without
them are read as before. Under ``selection=heldout`` a GLUE cell also writes
``predictions_select.csv``, the selection slice at the selected epoch (``idx`` is the row of
the train file), which temperature scaling is fitted on (:mod:`bench.results.calibration`).

:func:`predictions_table` turns the cells of an experiment into ``predictions.parquet``, one
row per example (CoNLL: per token):

- the cell's coordinates :data:`bench.cell.CELL_COLUMNS` and ``config_hash``;
- ``split`` (``dev``; CoNLL ``dev`` and ``test``; MNLI ``dev_mismatched``; ``select`` for
  the selection slice, which is not a reporting split: filter on ``split`` to re-score);
- ``example``: the 0-based data row of the split's local file, header excluded (the Hub's
  row order when loaded from the Hub; ``select``: the row of the train file); CoNLL: the
  0-based sentence, ``-DOCSTART-`` lines excluded, and ``token``, the 0-based word in it
  (-1 for sentence tasks);
- ``label`` and ``pred`` as text: the label as written in the data files (SST-2 ``0``/``1``,
  RTE ``entailment``/``not_entailment``, CoNLL IOB2 tags); STS-B scores as decimal text
  (``float(label)`` gives the score back);
- ``probs``: the class probabilities as a list of floats in class-id order
  (:func:`label_texts` gives each class's label text), or null where the cell stored none
  (STS-B regression, CoNLL token tasks, files from before probabilities were stored).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from bench.axes.optional import AXIS_COLUMNS
from bench.cell import CELL_COLUMNS
from bench.data.selection import SELECTION_SPLIT
from bench.data.tasks import ALL_TASKS, TaskSpec, TokenTaskSpec
from bench.data.text_lines import GZIP_SUFFIX, read_text
from bench.errors import DataError

#: The columns of ``predictions.parquet``.
PREDICTION_COLUMNS = [
    *CELL_COLUMNS,
    *AXIS_COLUMNS,
    "config_hash",
    "split",
    "example",
    "token",
    "label",
    "pred",
    "probs",
]
PREDICTIONS_FILE = "predictions.parquet"
#: How far a row's probabilities may sum from 1 (float64 softmax sums to 1 within 1e-15).
PROB_SUM_TOLERANCE = 1e-6
_BASE_HEADER = ["idx", "label", "pred"]

#: One prediction row: example, token, label, pred, class probabilities (or None).
Row = tuple[int, int, str, str, list[float] | None]


def label_texts(spec: TaskSpec) -> list[str]:
    """Class id → the label as written in the TSV files (``0``/``1`` or the name itself).

    Args:
        spec: A classification task.

    Returns:
        The label text of every class, in class-id order (the order of ``probs``).
    """
    raw = {name: text for text, name in spec.tsv_label_map.items()}
    return [raw.get(name, name) for name in spec.label_names]


def _probabilities(row: dict[str, str], classes: int, pred: int) -> list[float]:
    """A row's ``prob_k`` columns, checked: finite, in [0, 1], summing to 1, argmax = pred."""
    probs = [float(row[f"prob_{k}"]) for k in range(classes)]
    if not all(math.isfinite(p) and 0.0 <= p <= 1.0 for p in probs):
        raise ValueError(f"probabilities must be finite and in [0, 1], found {probs}")
    if abs(math.fsum(probs) - 1.0) > PROB_SUM_TOLERANCE:
        raise ValueError(f"probabilities sum to {math.fsum(probs)!r}, not 1")
    if max(range(classes), key=lambda k: (probs[k], -k)) != pred:
        raise ValueError(f"the most probable class is not pred={pred} ({probs})")
    return probs


def _glue_rows(path: Path, spec: TaskSpec) -> list[Row]:
    """``(example, token, label, pred, probs)`` rows of one ``predictions_<split>.csv``."""
    names = None if spec.is_regression else label_texts(spec)
    with_probs = [*_BASE_HEADER, *(f"prob_{k}" for k in range(len(names or [])))]
    rows: list[Row] = []
    reader = csv.DictReader(io.StringIO(read_text(path)))
    if reader.fieldnames not in (_BASE_HEADER, with_probs):
        expected = " or ".join(dict.fromkeys([",".join(_BASE_HEADER), ",".join(with_probs)]))
        raise DataError(f"{path}: expected the header {expected}, found {reader.fieldnames}")
    stored = reader.fieldnames == with_probs and names is not None
    for line, row in enumerate(reader, start=2):
        try:
            example = int(row["idx"])
            probs = None
            if names is None:
                label, pred = repr(float(row["label"])), repr(float(row["pred"]))
            else:
                label, pred = names[int(row["label"])], names[int(row["pred"])]
                if stored:
                    probs = _probabilities(row, len(names), int(row["pred"]))
        except (TypeError, ValueError, IndexError) as err:
            raise DataError(f"{path}:{line}: unreadable prediction row ({err})") from None
        rows.append((example, -1, label, pred, probs))
    return rows


def _conll_rows(path: Path, spec: TokenTaskSpec) -> list[Row]:
    """``(sentence, token, gold, pred)`` rows of one ``predictions_<split>.txt``."""
    tags = set(spec.label_names)
    rows: list[Row] = []
    sentence, token = 0, 0
    for line, text in enumerate(read_text(path).split("\n"), start=1):
        if not text.strip():
            if token:
                sentence, token = sentence + 1, 0
            continue
        parts = text.split(" ")
        if len(parts) != 3 or parts[1] not in tags or parts[2] not in tags:
            raise DataError(f"{path}:{line}: expected 'word gold pred' with IOB2 tags")
        rows.append((sentence, token, parts[1], parts[2], None))
        token += 1
    return rows


def stored_file(path: Path) -> Path | None:
    """``path`` as a cell wrote it, else its compressed form ``path.gz``, else None.

    Cells write plain files; committed run directories keep them gzip-compressed
    (:mod:`bench.results.compress`). Where both exist the plain file is the newer copy.
    """
    if path.is_file():
        return path
    packed = path.with_name(path.name + GZIP_SUFFIX)
    return packed if packed.is_file() else None


def prediction_files(run_dir: str | Path, task: str) -> dict[str, Path]:
    """The cell's prediction file per reporting split (empty when it wrote none)."""
    spec = ALL_TASKS[task]
    suffix = ".txt" if isinstance(spec, TokenTaskSpec) else ".csv"
    found = {
        split: stored_file(Path(run_dir) / f"predictions_{split}{suffix}") for split in spec.dev
    }
    return {split: path for split, path in found.items() if path is not None}


def selection_file(run_dir: str | Path, task: str) -> Path | None:
    """The cell's ``predictions_select.csv`` (GLUE under ``selection=heldout``), if it wrote one."""
    if isinstance(ALL_TASKS[task], TokenTaskSpec):
        return None
    return stored_file(Path(run_dir) / f"predictions_{SELECTION_SPLIT}.csv")


def cell_predictions(result: dict[str, Any]) -> pd.DataFrame:
    """One cell's predictions as rows of :data:`PREDICTION_COLUMNS`.

    Args:
        result: A collected result (with ``run_dir``, ``cell``, ``config_hash``).

    Returns:
        The cell's rows, every reporting split it wrote, then the selection slice's
        (``split == "select"``) when it wrote one.

    Raises:
        DataError: When the task is unknown, the cell wrote no prediction file for a split
            its result scores, or a file is unreadable.
    """
    cell = result["cell"]
    spec = ALL_TASKS.get(str(cell.get("task")))
    if spec is None:
        raise DataError(f"{result.get('run_dir')}: unknown task {cell.get('task')!r}")
    files = prediction_files(result["run_dir"], spec.name)
    scored = list((result.get("best") or {}).get("metrics") or {})
    missing = [s for s in scored if s not in files]
    if missing:
        raise DataError(
            f"{result['run_dir']}: no predictions for {', '.join(missing)} "
            f"(looked for predictions_<split>.{'txt' if spec.kind == 'token' else 'csv'})"
        )
    if not files:
        raise DataError(
            f"{result['run_dir']}: no prediction files "
            f"(looked for predictions_<split>.{'txt' if spec.kind == 'token' else 'csv'})"
        )
    selecting = selection_file(result["run_dir"], spec.name)
    if selecting is not None:
        files = {**files, SELECTION_SPLIT: selecting}
    frames = []
    for split, path in files.items():
        rows = (
            _conll_rows(path, spec) if isinstance(spec, TokenTaskSpec) else _glue_rows(path, spec)
        )
        frame = pd.DataFrame(rows, columns=["example", "token", "label", "pred", "probs"])
        frame.insert(0, "split", split)
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    for column in reversed([*CELL_COLUMNS, *AXIS_COLUMNS, "config_hash"]):
        value = result.get("config_hash") if column == "config_hash" else cell.get(column)
        out.insert(0, column, value)
    return out[PREDICTION_COLUMNS]


def predictions_table(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """The experiment's table: every cell's rows, typed for Parquet."""
    parts = [f for f in frames if not f.empty]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in PREDICTION_COLUMNS})
    table = pd.concat(parts, ignore_index=True)
    return table.astype(
        {
            "layers": "str",
            "seed": "Int64",
            **dict.fromkeys(AXIS_COLUMNS, "Int64"),
            "example": "int64",
            "token": "int64",
            "label": "str",
            "pred": "str",
        }
    )


def predictions_bytes(table: pd.DataFrame) -> bytes:
    """``predictions.parquet``'s content."""
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False)
    return buffer.getvalue()


def read_predictions(out_dir: str | Path) -> pd.DataFrame:
    """``predictions.parquet`` of a results directory (empty table when there is none)."""
    path = Path(out_dir) / PREDICTIONS_FILE
    if not path.is_file():
        return predictions_table([])
    table = pd.read_parquet(path)
    if "probs" not in table:  # written before probabilities were stored
        table["probs"] = None
    for column in AXIS_COLUMNS:  # written before the optional axes
        if column not in table:
            table[column] = pd.Series(pd.NA, index=table.index, dtype="Int64")
    return table[PREDICTION_COLUMNS]
