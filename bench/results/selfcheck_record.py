"""The committed record of a self-check: ``results/<experiment>/selfcheck.json``.

``python -m bench.run.selfcheck results/<experiment> --out DIR`` writes ``DIR/selfcheck.json``:
the comparison (:meth:`bench.results.reproduction.Reproduction.records`: both tables and the
verdict) with the command's slice, when it finished, the commits and library versions on
both sides and today's CPU kernels. Copied beside the results it re-checked, the HTML report
shows it (:mod:`bench.report.selfcheck`) and the README's Findings give it one sentence.

This module reads and checks such a record (:func:`read_record`), summarises it
(:func:`summarize`), and tells whether the results beside it still hold the values it was
compared with (:func:`stale_lines`): a record is a snapshot, and cells committed after it
can move a head's mean and intervals. Torch-free, like the rest of :mod:`bench.results`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bench.data.text_lines import read_text
from bench.errors import DataError
from bench.results.reproduction import (
    CELL_COLUMNS,
    SETTING_COLUMNS,
    cell_name,
    interval_name,
    setting_name,
)
from bench.results.stats import GROUP_KEYS, RUN_KEYS, cell_stats, normalize_table, run_values

#: The record's file name, in ``--out`` and beside the committed results.
RECORD_FILE = "selfcheck.json"
#: The keys every record has.
RECORD_KEYS = (
    "experiment",
    "slice",
    "finished_at",
    "split",
    "ok",
    "verdict",
    "confidence",
    "cells",
    "settings",
    "committed",
    "today",
)
#: A committed value and the record's copy of it agree this closely (JSON keeps every digit).
_SAME = 1e-12
#: The statistics of a setting the record copied from the committed results.
_SETTING_STATS = ("committed_mean", "t_low", "t_high", "ci_low", "ci_high")
_STAT_COLUMNS = {"committed_mean": "mean"}
#: The axes of a run's key that are text (the others are whole numbers).
_TEXT_KEYS = {"task", "encoder", "head_label", "freeze_label"}


def _redo(path: Path) -> str:
    """How to write a record again (named in every error)."""
    return (
        f"write it again: python -m bench.run.selfcheck {path.parent} --out DIR, then copy "
        f"DIR/{RECORD_FILE} to {path}"
    )


def _check_rows(path: Path, record: dict[str, Any], key: str, columns: list[str]) -> None:
    """``record[key]`` must be a non-empty list of objects that have ``columns``."""
    rows = record[key]
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path}: '{key}' must be a non-empty list; {_redo(path)}")
    for number, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{path}: {key}[{number}] is not an object; {_redo(path)}")
        missing = [c for c in columns if c not in row]
        if missing:
            raise DataError(f"{path}: {key}[{number}] lacks {', '.join(missing)}; {_redo(path)}")


def check_record(record: Any, path: Path) -> dict[str, Any]:
    """Check that ``record`` has what the report and the Findings read.

    Args:
        record: The parsed JSON.
        path: Its file, for messages.

    Returns:
        The record.

    Raises:
        DataError: Naming the file, what is missing or malformed, and how to write it again.
    """
    if not isinstance(record, dict):
        raise DataError(f"{path}: not a JSON object; {_redo(path)}")
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise DataError(f"{path}: not a self-check record: no {', '.join(missing)}; {_redo(path)}")
    _check_rows(path, record, "cells", CELL_COLUMNS)
    _check_rows(path, record, "settings", SETTING_COLUMNS)
    for number, cell in enumerate(record["cells"]):
        for key in ("committed", "today", "diff"):
            value = cell[key]
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise DataError(
                    f"{path}: cells[{number}].{key} is {value!r}, not a number; {_redo(path)}"
                )
        if not isinstance(cell["committed"], int | float):
            raise DataError(f"{path}: cells[{number}].committed is missing; {_redo(path)}")
    for key in ("slice", "committed", "today"):
        if not isinstance(record[key], dict):
            raise DataError(f"{path}: '{key}' is not an object; {_redo(path)}")
    return record


def read_record(folder: Path) -> dict[str, Any] | None:
    """The self-check record beside a results directory's table, if there is one.

    Args:
        folder: ``results/<experiment>``.

    Returns:
        The record, or None when ``folder`` has no :data:`RECORD_FILE`.

    Raises:
        DataError: When the file is not valid UTF-8 JSON or not a self-check record (the
            message names the file).
    """
    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(
            f"{path}: not JSON ({err.msg} at line {err.lineno}, column {err.colno}); {_redo(path)}"
        ) from None
    return check_record(record, path)


def command(record: dict[str, Any]) -> str:
    """The command that made the record (its ``--out`` left out: the file was copied)."""
    name = (record.get("slice") or {}).get("name", "default")
    parts = ["python -m bench.run.selfcheck", str(record["experiment"])]
    if name != "default":
        parts.append(f"--slice {name}")
    if record.get("cache") == "reused":
        parts.append("--reuse-cache")
    return " ".join(parts)


def version_changes(record: dict[str, Any]) -> list[str]:
    """The libraries whose version today differs from the committed cells' (``torch a → b``).

    Args:
        record: A self-check record (its ``committed`` and ``today`` versions).

    Returns:
        One ``name committed → today`` per changed library; empty when all are as committed.
    """
    committed = (record.get("committed") or {}).get("versions") or {}
    today = (record.get("today") or {}).get("versions") or {}
    return [
        f"{name} {'/'.join(committed.get(name, ['none']))} → {version}"
        for name, version in today.items()
        if committed.get(name) != [str(version)]
    ]


def _number(value: Any) -> float:
    """A record's number as a float (None, the JSON of NaN, becomes NaN)."""
    return math.nan if value is None else float(value)


def predictions_identical(cell: dict[str, Any]) -> bool | None:
    """Whether a re-run cell's per-example predictions are the committed ones.

    Args:
        cell: A record's ``cells`` row (``changed``: predictions that differ, null when
            the committed predictions were not compared).

    Returns:
        True when none changed, False when some did, None when they were not compared.
    """
    changed = _number(cell.get("changed"))
    return None if math.isnan(changed) else changed == 0


def is_identical(cell: dict[str, Any]) -> bool:
    """Whether a re-run cell is identical: finished, same score, same predictions.

    Its score must be the committed one within the record's ``identical_atol``, and none
    of its predictions may have changed. The record's own ``identical`` compares the score
    alone: two predictions that swap labels leave an accuracy where it was.

    Args:
        cell: A record's ``cells`` row.

    Returns:
        Whether the cell is identical; False when its predictions were not compared.
    """
    return (
        cell["status"] == "ok" and bool(cell["identical"]) and predictions_identical(cell) is True
    )


@dataclass(frozen=True)
class Summary:
    """What one sentence says about a record.

    Attributes:
        n_cells: Re-run cells.
        n_identical: Those identical to the committed ones: the same score and the same
            predictions (:func:`is_identical`).
        same_score: Cells (record rows) with the committed score whose predictions changed
            or were not compared.
        n_failed: Those that did not finish ``ok``.
        largest: The cell (record row) whose value moved most, or None when none moved.
        largest_setting: The setting (record row) of ``largest``, or None.
        largest_moves: That setting's re-run cells as ``(seed, Δ)``, by seed (the moves
            its mean today folds into all its seeds).
        n_settings: Heads (settings) compared.
        outside: Settings whose mean today left an interval or lost a seed (record rows).
        largest_shift: The largest absolute shift of a head's mean today (NaN if none).
        intervals: The intervals checked, in words: ``95% t and BCa``.
    """

    n_cells: int
    n_identical: int
    same_score: list[dict[str, Any]]
    n_failed: int
    largest: dict[str, Any] | None
    largest_setting: dict[str, Any] | None
    largest_moves: list[tuple[int, float]]
    n_settings: int
    outside: list[dict[str, Any]]
    largest_shift: float
    intervals: str


def summarize(record: dict[str, Any]) -> Summary:
    """Count a record's identical cells, find its largest move, and its settings that moved.

    Args:
        record: A checked record (:func:`read_record`).

    Returns:
        The summary.
    """
    cells, settings = record["cells"], record["settings"]
    moved = [
        c
        for c in cells
        if c["status"] == "ok" and not c["identical"] and not math.isnan(_number(c["diff"]))
    ]
    largest = max(moved, key=lambda c: abs(_number(c["diff"]))) if moved else None
    home, moves = None, []
    if largest is not None:
        key = _key(largest, GROUP_KEYS)
        home = next((s for s in settings if _key(s, GROUP_KEYS) == key), None)
        moves = sorted(
            (int(c["seed"]), _number(c["diff"]))
            for c in cells
            if _key(c, GROUP_KEYS) == key and c["status"] == "ok"
        )
    shifts = [abs(_number(s["shift"])) for s in settings]
    finite = [s for s in shifts if not math.isnan(s)]
    methods = sorted({interval_name(str(s["ci_method"])) for s in settings} - {""})
    return Summary(
        n_cells=len(cells),
        n_identical=sum(is_identical(c) for c in cells),
        same_score=[
            c for c in cells if c["status"] == "ok" and c["identical"] and not is_identical(c)
        ],
        n_failed=sum(c["status"] != "ok" for c in cells),
        largest=largest,
        largest_setting=home,
        largest_moves=moves,
        n_settings=len(settings),
        outside=[s for s in settings if not s["reproduces"]],
        largest_shift=max(finite) if finite else math.nan,
        intervals=f"{float(record['confidence']):.0%} " + " and ".join(["t", *methods]),
    )


def _differs(ours: Any, theirs: Any) -> bool:
    """Whether two recorded numbers differ (two missing values agree)."""
    a, b = _number(ours), _number(theirs)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) != math.isnan(b)
    return abs(a - b) > _SAME


def stale_lines(record: dict[str, Any], table: pd.DataFrame) -> list[str]:
    """Where the committed results no longer hold the values the record compared with.

    Each re-run cell's committed value, and each setting's seed count, mean and intervals,
    recomputed from ``table`` as the check computed them
    (:func:`bench.results.stats.cell_stats` on the reporting split's main metric).

    Args:
        record: A checked record (:func:`read_record`).
        table: The tidy results table beside it.

    Returns:
        One line per difference; empty when the record is current.
    """
    split = str(record["split"])
    table = normalize_table(table)
    runs = run_values(table, split=split)
    values = {tuple(_key(r, RUN_KEYS)): float(r["value"]) for r in runs.to_dict("records")}
    out = []
    for cell in record["cells"]:
        key = tuple(_key(cell, RUN_KEYS))
        if key not in values:
            out.append(f"{cell_name(cell)}: not in the results table any more")
        elif _differs(values[key], cell["committed"]):
            out.append(
                f"{cell_name(cell)}: committed {values[key]:.6f}, the check compared with "
                f"{_number(cell['committed']):.6f}"
            )
    wanted = {tuple(_key(s, GROUP_KEYS)) for s in record["settings"]}
    mine = [tuple(_key(r, GROUP_KEYS)) in wanted for r in table[GROUP_KEYS].to_dict("records")]
    computed = cell_stats(table[mine], split=split).to_dict("records")
    stats = {tuple(_key(r, GROUP_KEYS)): r for r in computed}
    for setting in record["settings"]:
        stat = stats.get(tuple(_key(setting, GROUP_KEYS)))
        if stat is None:
            out.append(f"{setting_name(setting)}: not in the results table any more")
            continue
        if int(stat["n"]) != int(setting["n"]):
            out.append(
                f"{setting_name(setting)}: {int(stat['n'])} seeds committed, the check "
                f"compared with {int(setting['n'])}"
            )
        changed = [k for k in _SETTING_STATS if _differs(stat[_STAT_COLUMNS.get(k, k)], setting[k])]
        if changed and int(stat["n"]) == int(setting["n"]):
            out.append(f"{setting_name(setting)}: {', '.join(changed)} changed since the check")
    return out


def _key(row: dict[str, Any], keys: list[str]) -> list[Any]:
    """A row's key: text axes as text, numeric axes as whole numbers."""
    return [str(row[k]) if k in _TEXT_KEYS else int(row[k]) for k in keys]


def device_name(hardware: dict[str, Any] | None) -> str:
    """Where a cell trained, from its recorded ``hardware``: the GPU, else the CPU's kernels.

    Returns:
        ``NVIDIA H200``, ``CPU (AVX512)``; ``CPU (kernels not recorded)`` for a cell that
        recorded its machine (no GPU) but predates the CPU's vector kernels in the record;
        ``not recorded`` for one that recorded no hardware at all.
    """
    hardware = hardware or {}
    if hardware.get("gpu"):
        return str(hardware["gpu"])
    kernels = hardware.get("cpu_capability")
    if kernels:
        return f"CPU ({kernels})"
    return "CPU (kernels not recorded)" if hardware.get("cpu_count") else "not recorded"


def devices_text(record: dict[str, Any]) -> str:
    """Today's device beside the committed cells' (older records did not keep theirs)."""
    today = device_name((record.get("today") or {}).get("hardware"))
    devices = [d for d in (record.get("committed") or {}).get("devices") or [] if d]
    if not devices or devices == ["not recorded"]:
        return f"today on {today} (the committed cells do not record their hardware)"
    return f"today on {today}; the committed cells on {', '.join(devices)}"
