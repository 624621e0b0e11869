"""Per-example predictions of every cell as one table (docs/protocol.md, "Predictions ...")."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from bench.axes.optional import AXIS_COLUMNS
from bench.cell import CELL_COLUMNS
from bench.data.selection import SELECTION_SPLIT
from bench.data.tasks import ALL_TASKS, TaskSpec, TokenTaskSpec
from bench.data.text_lines import GZIP_SUFFIX, read_text
from bench.errors import DataError

_KEYS = [*CELL_COLUMNS, *AXIS_COLUMNS, "config_hash"]
_ROW = ["example", "token", "label", "pred", "probs"]
#: The columns of ``predictions.parquet``.
PREDICTION_COLUMNS = [*_KEYS, "split", *_ROW]
PREDICTIONS_FILE = "predictions.parquet"
#: Results of this schema and later always wrote their predictions, so they must re-score.
PREDICTIONS_SCHEMA = 2
_SUM_TOLERANCE = 1e-6  # float64 softmax sums to 1 within 1e-15
_HEADER = ["idx", "label", "pred"]

#: One prediction row: example, token, label, pred, class probabilities (or None).
Row = tuple[int, int, str, str, list[float] | None]


def label_texts(spec: TaskSpec) -> list[str]:
    """Class id → the label as written in the TSV files (``0``/``1`` or the name itself)."""
    raw = {name: text for text, name in spec.tsv_label_map.items()}
    return [raw.get(name, name) for name in spec.label_names]


def _probabilities(row: dict[str, str], classes: int, pred: int) -> list[float]:
    """A row's ``prob_k`` columns, checked: finite, in [0, 1], summing to 1, argmax = pred."""
    probs = [float(row[f"prob_{k}"]) for k in range(classes)]
    if not all(math.isfinite(p) and 0.0 <= p <= 1.0 for p in probs):
        raise ValueError(f"probabilities must be finite and in [0, 1], found {probs}")
    if abs(math.fsum(probs) - 1.0) > _SUM_TOLERANCE:
        raise ValueError(f"probabilities sum to {math.fsum(probs)!r}, not 1")
    if max(range(classes), key=lambda k: (probs[k], -k)) != pred:
        raise ValueError(f"the most probable class is not pred={pred} ({probs})")
    return probs


def _glue_rows(path: Path, spec: TaskSpec) -> list[Row]:
    names = None if spec.is_regression else label_texts(spec)
    with_probs = [*_HEADER, *(f"prob_{k}" for k in range(len(names or [])))]
    reader = csv.DictReader(io.StringIO(read_text(path)))
    if reader.fieldnames not in (_HEADER, with_probs):
        expected = " or ".join(dict.fromkeys([",".join(_HEADER), ",".join(with_probs)]))
        raise DataError(f"{path}: expected the header {expected}, found {reader.fieldnames}")
    stored = reader.fieldnames == with_probs and names is not None
    rows: list[Row] = []
    for line, row in enumerate(reader, start=2):
        try:
            example, probs = int(row["idx"]), None
            if names is None:
                label, pred = repr(float(row["label"])), repr(float(row["pred"]))
            else:
                label, pred = names[int(row["label"])], names[int(row["pred"])]
                probs = _probabilities(row, len(names), int(row["pred"])) if stored else None
        except (TypeError, ValueError, IndexError) as err:
            raise DataError(f"{path}:{line}: unreadable prediction row ({err})") from None
        rows.append((example, -1, label, pred, probs))
    return rows


def _conll_rows(path: Path, spec: TokenTaskSpec) -> list[Row]:
    tags = set(spec.label_names)
    rows: list[Row] = []
    sentence, token = 0, 0
    for line, text in enumerate(read_text(path).split("\n"), start=1):
        if not text.strip():
            sentence, token = (sentence + 1, 0) if token else (sentence, token)
            continue
        parts = text.split(" ")
        if len(parts) != 3 or parts[1] not in tags or parts[2] not in tags:
            raise DataError(f"{path}:{line}: expected 'word gold pred' with IOB2 tags")
        rows.append((sentence, token, parts[1], parts[2], None))
        token += 1
    return rows


def stored_file(path: Path) -> Path | None:
    """``path`` as a cell wrote it (the newer copy), else ``path.gz`` (committed), else None."""
    if path.is_file():
        return path
    packed = path.with_name(path.name + GZIP_SUFFIX)
    return packed if packed.is_file() else None


def missing_predictions(result: dict[str, Any], run_dir: Path) -> dict[str, str]:
    """Split → file name, of each split ``result`` scored whose predictions ``run_dir`` lacks."""
    token = isinstance(ALL_TASKS.get(str(result["cell"].get("task"))), TokenTaskSpec)
    scored = (result.get("best") or {}).get("metrics") or {}
    names = {s: f"predictions_{s}{'.txt' if token else '.csv'}" for s in scored}
    return {split: name for split, name in names.items() if stored_file(run_dir / name) is None}


def _once_each(path: Path, split: str, rows: pd.DataFrame, result: dict[str, Any]) -> None:
    """Refuse ``rows`` unless each example is predicted once, as many as the result recorded.

    Raises:
        DataError: Naming the file, the split, its rows and examples and the recorded size.
    """
    size = ((result.get("data") or {}).get("n_dev") or {}).get(split)  # None: not recorded
    examples = rows["example"].nunique()
    if not rows.duplicated(["example", "token"]).any() and size in (None, examples):
        return
    where = f"data.n_dev.{split}={size} in result.json" if size is not None else "no size recorded"
    raise DataError(
        f"{path}: {len(rows)} rows for {examples} distinct examples of split '{split}' "
        f"({where}): each example must be predicted once"
    )


def cell_predictions(result: dict[str, Any]) -> pd.DataFrame:
    """One collected cell's predictions (every split, then ``select``), :data:`PREDICTION_COLUMNS`.

    Raises:
        DataError: For an unknown task, a scored split without predictions, an unreadable file,
            or a file that does not predict each example of its split once (:func:`_once_each`).
    """
    cell, run_dir = result["cell"], Path(result["run_dir"])
    spec = ALL_TASKS.get(str(cell.get("task")))
    if spec is None:
        raise DataError(f"{result.get('run_dir')}: unknown task {cell.get('task')!r}")
    token = isinstance(spec, TokenTaskSpec)
    suffix = ".txt" if token else ".csv"
    found = {s: stored_file(run_dir / f"predictions_{s}{suffix}") for s in spec.dev}
    files = {split: path for split, path in found.items() if path is not None}
    missing = missing_predictions(result, run_dir)
    if missing or not files:
        what = f"no predictions for {', '.join(missing)}" if missing else "no prediction files"
        looked = ", ".join(missing.values()) or f"predictions_<split>{suffix}"
        raise DataError(f"{result['run_dir']}: {what} (looked for {looked})")
    selecting = None if token else stored_file(run_dir / f"predictions_{SELECTION_SPLIT}.csv")
    if selecting is not None:
        files[SELECTION_SPLIT] = selecting
    read: Callable[[Path, Any], list[Row]] = _conll_rows if token else _glue_rows
    frames = []
    for split, path in files.items():
        frames.append(pd.DataFrame(read(path, spec), columns=_ROW).assign(split=split))
        _once_each(path, split, frames[-1], result)
    out = pd.concat(frames, ignore_index=True)
    keys = {**{c: cell.get(c) for c in _KEYS}, "config_hash": result.get("config_hash")}
    return out.assign(**keys)[PREDICTION_COLUMNS]


def predictions_table(frames: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """The experiment's table: every cell's rows, typed for Parquet."""
    parts = [f for f in frames if not f.empty]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in PREDICTION_COLUMNS})
    types = {"layers": "str", "seed": "Int64", **dict.fromkeys(AXIS_COLUMNS, "Int64")}
    text = {"example": "int64", "token": "int64", "label": "str", "pred": "str"}
    return pd.concat(parts, ignore_index=True).astype({**types, **text})


def predictions_bytes(table: pd.DataFrame) -> bytes:
    """``predictions.parquet``'s content."""
    return table.to_parquet(index=False)


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
