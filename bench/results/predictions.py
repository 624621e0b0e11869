"""Per-example predictions of every cell, as one table anyone can re-score.

Each cell's run directory holds its reporting-split predictions, written when it finished
(``predictions_<split>.csv`` for GLUE: ``idx,label,pred`` with class ids or STS-B scores;
``predictions_<split>.txt`` for CoNLL: ``word gold pred`` lines, a blank line after each
sentence, sentences in data order). :func:`predictions_table` turns the cells of an
experiment into ``predictions.parquet``, one row per example (CoNLL: per token):

- the cell's coordinates :data:`bench.cell.CELL_COLUMNS` and ``config_hash``;
- ``split`` (``dev``; CoNLL ``dev`` and ``test``; MNLI ``dev_mismatched``);
- ``example``: the 0-based data row of the split's local file, header excluded (the Hub's
  row order when loaded from the Hub); CoNLL: the 0-based sentence, ``-DOCSTART-`` lines
  excluded, and ``token``, the 0-based word in it (-1 for sentence tasks);
- ``label`` and ``pred`` as text: the label as written in the data files (SST-2 ``0``/``1``,
  RTE ``entailment``/``not_entailment``, CoNLL IOB2 tags); STS-B scores as decimal text
  (``float(label)`` gives the score back).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from bench.cell import CELL_COLUMNS
from bench.data.tasks import ALL_TASKS, TaskSpec, TokenTaskSpec
from bench.data.text_lines import read_text
from bench.errors import DataError

#: The columns of ``predictions.parquet``.
PREDICTION_COLUMNS = [*CELL_COLUMNS, "config_hash", "split", "example", "token", "label", "pred"]
PREDICTIONS_FILE = "predictions.parquet"


def _raw_names(spec: TaskSpec) -> list[str]:
    """Class id → the label as written in the TSV files (``0``/``1`` or the name itself)."""
    raw = {name: text for text, name in spec.tsv_label_map.items()}
    return [raw.get(name, name) for name in spec.label_names]


def _glue_rows(path: Path, spec: TaskSpec) -> list[tuple[int, int, str, str]]:
    """``(example, token, label, pred)`` rows of one ``predictions_<split>.csv``."""
    names = None if spec.is_regression else _raw_names(spec)
    rows = []
    reader = csv.DictReader(io.StringIO(read_text(path)))
    if reader.fieldnames != ["idx", "label", "pred"]:
        raise DataError(f"{path}: expected the header idx,label,pred, found {reader.fieldnames}")
    for line, row in enumerate(reader, start=2):
        try:
            example = int(row["idx"])
            if names is None:
                label, pred = repr(float(row["label"])), repr(float(row["pred"]))
            else:
                label, pred = names[int(row["label"])], names[int(row["pred"])]
        except (TypeError, ValueError, IndexError) as err:
            raise DataError(f"{path}:{line}: unreadable prediction row ({err})") from None
        rows.append((example, -1, label, pred))
    return rows


def _conll_rows(path: Path, spec: TokenTaskSpec) -> list[tuple[int, int, str, str]]:
    """``(sentence, token, gold, pred)`` rows of one ``predictions_<split>.txt``."""
    tags = set(spec.label_names)
    rows: list[tuple[int, int, str, str]] = []
    sentence, token = 0, 0
    for line, text in enumerate(read_text(path).split("\n"), start=1):
        if not text.strip():
            if token:
                sentence, token = sentence + 1, 0
            continue
        parts = text.split(" ")
        if len(parts) != 3 or parts[1] not in tags or parts[2] not in tags:
            raise DataError(f"{path}:{line}: expected 'word gold pred' with IOB2 tags")
        rows.append((sentence, token, parts[1], parts[2]))
        token += 1
    return rows


def prediction_files(run_dir: str | Path, task: str) -> dict[str, Path]:
    """The cell's prediction file per reporting split (empty when it wrote none)."""
    spec = ALL_TASKS[task]
    suffix = ".txt" if isinstance(spec, TokenTaskSpec) else ".csv"
    return {
        split: Path(run_dir) / f"predictions_{split}{suffix}"
        for split in spec.dev
        if (Path(run_dir) / f"predictions_{split}{suffix}").is_file()
    }


def cell_predictions(result: dict[str, Any]) -> pd.DataFrame:
    """One cell's predictions as rows of :data:`PREDICTION_COLUMNS`.

    Args:
        result: A collected result (with ``run_dir``, ``cell``, ``config_hash``).

    Returns:
        The cell's rows, every reporting split it wrote.

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
    frames = []
    for split, path in files.items():
        rows = (
            _conll_rows(path, spec) if isinstance(spec, TokenTaskSpec) else _glue_rows(path, spec)
        )
        frame = pd.DataFrame(rows, columns=["example", "token", "label", "pred"])
        frame.insert(0, "split", split)
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    for column in reversed([*CELL_COLUMNS, "config_hash"]):
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
    return pd.read_parquet(path)
