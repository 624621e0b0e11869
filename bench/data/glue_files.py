"""Strict reader for GLUE task files in the layout of GLUE's download script.

Every row is checked: the column count must match the header (or the fixed layout of
header-less files), the text must be non-empty UTF-8 and the label must be a known
name. Any violation raises :class:`~bench.errors.DataError` naming the file and line,
so a shifted column can never turn silently into wrong science.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.data.tasks import TaskSpec
from bench.data.text_lines import excerpt, read_lines
from bench.errors import DataError, MissingDataError

_COLA_COLUMNS = 4  # source code, label, original mark, sentence


def glue_file(data_dir: str | Path, spec: TaskSpec, filename: str) -> Path:
    """Path of one task file in GLUE's download layout, checked to exist.

    Args:
        data_dir: Root data directory (holding ``glue/``).
        spec: The task.
        filename: File name such as ``train.tsv``.

    Returns:
        The path ``<data_dir>/glue/<TASK>/<filename>``.

    Raises:
        MissingDataError: If the directory or the file does not exist (an environmental
            failure: the next launch retries the cell once the path is fixed).
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise MissingDataError(f"data directory {root} (data.dir / HEADBENCH_DATA) does not exist")
    path = root / "glue" / spec.glue_dir / filename
    if not path.is_file():
        raise MissingDataError(
            f"{path} not found: task {spec.name!r} expects GLUE's download layout "
            f"<data.dir>/glue/{spec.glue_dir}/{filename}"
        )
    return path


def _decode_lines(path: Path) -> list[str]:
    """The file's lines, without the blank lines at its end (pandas and ``csv`` skip them)."""
    lines = [text for _, text in read_lines(path)]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _column_index(path: Path, header: list[str], column: str | int) -> int:
    if isinstance(column, int):
        return column
    try:
        return header.index(column)
    except ValueError:
        raise DataError(
            f"{path}:1: header has no column {column!r}; found columns: {excerpt(header)}"
        ) from None


def read_glue_tsv(path: str | Path, spec: TaskSpec) -> dict[str, list[Any]]:
    """Read one labelled GLUE TSV into columns named as on the Hugging Face Hub.

    Args:
        path: The TSV file.
        spec: The task, which gives the column layout and the label names.

    Returns:
        Columns ``idx`` (row number from 0), the task's text fields and ``label``
        (label id by name, or a float score for regression).

    Raises:
        DataError: On a wrong column count, an empty text, a non-UTF-8 byte or an
            unknown label; the message names the file and the line.
    """
    path = Path(path)
    lines = _decode_lines(path)
    if spec.has_header:
        if not lines:
            raise DataError(f"{path}: empty file, expected a header line")
        header = lines[0].split("\t")
        n_columns, first_line = len(header), 2
        body = lines[1:]
    else:
        header, n_columns, first_line, body = [], _COLA_COLUMNS, 1, lines
    text_index = {f: _column_index(path, header, c) for f, c in spec.tsv_columns.items()}
    label_index = _column_index(path, header, spec.tsv_label_column)
    columns: dict[str, list[Any]] = {"idx": [], **{f: [] for f in spec.text_fields}, "label": []}
    label_ids = {name: i for i, name in enumerate(spec.label_names)}
    for offset, line in enumerate(body):
        number = first_line + offset
        if not line.strip():
            raise DataError(
                f"{path}:{number}: blank line between rows (only trailing ones are skipped)"
            )
        cells = line.split("\t")
        if len(cells) != n_columns:
            raise DataError(
                f"{path}:{number}: expected {n_columns} tab-separated columns, found {len(cells)}"
            )
        for field_name, index in text_index.items():
            text = cells[index].strip()
            if not text:
                raise DataError(f"{path}:{number}: empty text in column {field_name!r}")
            columns[field_name].append(text)
        columns["label"].append(_parse_label(path, number, cells[label_index], spec, label_ids))
        columns["idx"].append(offset)
    if not columns["idx"]:
        raise DataError(f"{path}: no data rows")
    return columns


def _parse_label(
    path: Path, number: int, raw: str, spec: TaskSpec, label_ids: dict[str, int]
) -> int | float:
    raw = raw.strip()
    if spec.is_regression:
        try:
            score = float(raw)
        except ValueError:
            raise DataError(f"{path}:{number}: score {excerpt(raw)} is not a number") from None
        if not math.isfinite(score):  # float() accepts "nan" and "inf": never a label
            raise DataError(f"{path}:{number}: score {excerpt(raw)} is not a finite number")
        return score
    name = spec.tsv_label_map.get(raw, raw)
    if name not in label_ids:
        valid = sorted(set(spec.tsv_label_map) | set(spec.label_names))
        raise DataError(f"{path}:{number}: unknown label {excerpt(raw)}; valid labels: {valid}")
    return label_ids[name]
