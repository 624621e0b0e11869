"""The record of a self-check, ``selfcheck.json`` (``python -m bench.run.selfcheck``), as frames.

Given the results table beside the record, :func:`cell_frame` and :func:`head_frame` mark as
``stale`` the rows it no longer matches (a record is a snapshot; later cells move a mean).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.data.text_lines import read_text
from bench.errors import DataError
from bench.results import reproduction as rep
from bench.results.stats import GROUP_KEYS, RUN_KEYS, run_values

#: The record's file name, in ``--out`` and beside the committed results.
RECORD_FILE = "selfcheck.json"
#: The keys the report reads (every record has them).
RECORD_KEYS = ("slice", "finished_at", "split", "cells", "settings", "committed", "today")
#: A committed value and the record's copy of it agree this closely (JSON keeps every digit).
_SAME = 1e-12
#: The record's columns that hold numbers (null, the JSON of NaN, becomes NaN).
_NUMBERS = {"committed", "today", "diff", "changed", "n_predictions", "score_diff", "shift"}
_NUMBERS |= {"committed_mean", "t_low", "t_high", "ci_low", "ci_high", "today_mean"}
_NUMBERS |= {"slice_committed_mean", "slice_today_mean"}


def _error(path: Path, what: str) -> DataError:
    """The error for a bad record: the file, what is wrong, and how to write it again."""
    redo = f"python -m bench.run.selfcheck {path.parent} --out DIR, then copy DIR/{path.name}"
    return DataError(f"{path}: {what}; write it again: {redo} to {path}")


def check_record(record: Any, path: Path) -> dict[str, Any]:
    """Check that ``record`` has what the report reads; DataError names the file if not."""
    if not isinstance(record, dict):
        raise _error(path, "not a JSON object")
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise _error(path, f"not a self-check record: no {', '.join(missing)}")
    for key in ("slice", "committed", "today"):
        if not isinstance(record[key], dict):
            raise _error(path, f"'{key}' is not an object")
    for key, columns in (("cells", rep.CELL_COLUMNS), ("settings", rep.SETTING_COLUMNS)):
        rows = record[key]
        if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
            raise _error(path, f"'{key}' must be a non-empty list of objects")
        for number, row in enumerate(rows):
            lacks = [c for c in columns if c not in row]
            if lacks:
                raise _error(path, f"{key}[{number}] lacks {', '.join(lacks)}")
            for column in sorted(_NUMBERS & row.keys()):
                value = row[column]
                if value is None and column != "committed":
                    continue
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise _error(path, f"{key}[{number}].{column} is {value!r}, not a number")
    return record


def read_record(folder: Path) -> dict[str, Any] | None:
    """The checked self-check record in ``folder``, or None when it has none.

    Raises:
        DataError: When the file is not UTF-8 JSON or not a self-check record.
    """
    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        where = f"{err.msg} at line {err.lineno}, column {err.colno}"
        raise _error(path, f"not JSON ({where})") from None
    return check_record(record, path)


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A record's rows as a frame, its numbers as floats (null becomes NaN)."""
    frame = pd.DataFrame(rows)
    numbers = sorted(_NUMBERS & set(frame.columns))
    return frame.assign(**frame[numbers].apply(pd.to_numeric, errors="coerce").astype(float))


def _stale(frame: pd.DataFrame, now: pd.DataFrame, pairs: dict[str, str]) -> np.ndarray:
    """Where ``now`` (the results table's numbers, by its other columns) differs from ``frame``."""
    keys = [c for c in now.columns if c not in pairs]
    mine = frame[keys].astype(now[keys].dtypes.to_dict()).merge(now, on=keys, how="left")
    differs = np.zeros(len(frame), dtype=bool)
    for new, old in pairs.items():
        ours, theirs = mine[new].astype(float), frame[old].astype(float).to_numpy()
        differs |= ~(((ours - theirs).abs() <= _SAME) | (ours.isna() & np.isnan(theirs)))
    return differs


def cell_frame(record: dict[str, Any], table: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per re-trained cell: committed and today's value, Δ, predictions changed.

    Columns: ``cell`` (its path), :data:`CELL_COLUMNS`, ``same_score`` (finished, within
    the record's ``identical_atol``), ``identical`` (the same score and, compared, no
    prediction changed: two swapped predictions leave an accuracy as it was) and ``stale``
    (``table``, when given, holds another committed value, or none).
    """
    cells = _frame(record["cells"])
    atol = float(record.get("identical_atol") or rep.IDENTICAL_ATOL)
    cells["same_score"] = (cells["status"] == "ok") & (cells["diff"].abs() <= atol)
    cells["identical"] = cells["same_score"] & (cells["changed"] == 0)
    cells["stale"] = False
    if table is not None:
        runs = run_values(table, split=str(record["split"]))
        cells["stale"] = _stale(cells, runs[[*RUN_KEYS, "value"]], {"value": "committed"})
    cells.insert(0, "cell", [rep.cell_name(c) for c in record["cells"]])
    return cells[["cell", *rep.CELL_COLUMNS, "same_score", "stale"]]


def head_frame(record: dict[str, Any], table: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per head and setting: committed mean and interval beside today's mean.

    Columns: ``setting`` (its path), :data:`SETTING_COLUMNS` (the committed t interval is
    ``t_low``/``t_high``), ``ci_low``/``ci_high`` (the committed BCa interval of older
    records, else NaN), ``inside`` (today's mean within the t interval and, where recorded,
    the BCa one), ``reproduces`` (inside, and no re-run seed failed) and ``stale``
    (``table``, when given, gives another seed count or committed mean).
    """
    heads = _frame(record["settings"]).reindex(columns=[*rep.SETTING_COLUMNS, "ci_low", "ci_high"])
    if "ci_method" in record["settings"][0]:
        none = [s.get("ci_method") == "none" for s in record["settings"]]
        heads.loc[none, ["ci_low", "ci_high"]] = np.nan
    mean = heads["today_mean"]
    in_ci = heads["ci_low"].isna() | mean.between(heads["ci_low"], heads["ci_high"])
    heads["inside"] = mean.between(heads["t_low"], heads["t_high"]) & in_ci
    heads["reproduces"] = heads["inside"] & (heads["failed_seeds"].map(len) == 0)
    heads["stale"] = False
    if table is not None:
        runs = run_values(table, split=str(record["split"])).groupby(GROUP_KEYS)["value"]
        now = runs.agg(["count", "mean"]).reset_index()
        heads["stale"] = _stale(heads, now, {"count": "n", "mean": "committed_mean"})
    heads.insert(0, "setting", [rep.setting_name(s) for s in record["settings"]])
    return heads


def device_name(hardware: dict[str, Any] | None) -> str:
    """Where a cell trained, from its recorded ``hardware``: the GPU, else the CPU's kernels.

    ``CPU (kernels not recorded)`` for a cell that recorded its machine but not its CPU's
    vector kernels; ``not recorded`` for one that recorded no hardware.
    """
    hardware = hardware or {}
    if hardware.get("gpu"):
        return str(hardware["gpu"])
    if hardware.get("cpu_capability"):
        return f"CPU ({hardware['cpu_capability']})"
    return "CPU (kernels not recorded)" if hardware.get("cpu_count") else "not recorded"


def environment(record: dict[str, Any]) -> pd.DataFrame:
    """The commit, device and library versions of the committed cells beside today's.

    One row per ``item`` (``commit``, ``device``, then each library of today's side):
    ``committed`` (``/``-joined over the committed cells), ``today`` and ``same``.
    """
    committed, today = record["committed"], record["today"]
    git, versions = today.get("git") or {}, committed.get("versions") or {}
    commit = str(git.get("commit") or "not recorded")[:7] + ("+dirty" if git.get("dirty") else "")
    rows = [
        ("commit", "/".join(str(c)[:7] for c in committed.get("git") or []), commit),
        ("device", "/".join(committed.get("devices") or []), device_name(today.get("hardware"))),
        *(
            (name, "/".join(versions.get(name) or []), str(version))
            for name, version in (today.get("versions") or {}).items()
        ),
    ]
    frame = pd.DataFrame(rows, columns=["item", "committed", "today"]).replace("", "not recorded")
    return frame.assign(same=frame["committed"] == frame["today"])
