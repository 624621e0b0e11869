"""Everything a report reads: the tidy table, per-epoch history, per-cell provenance.

A report is built from a results directory written by :mod:`bench.results.collect`
(``results.parquet``/``.csv`` + ``history.csv``, ``cells.json``, ``launches.jsonl``) or
straight from a multirun directory of ``result.json`` files. A results directory may also
hold the record of a self-check (``selfcheck.json``, :mod:`bench.results.selfcheck_record`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.data.text_lines import read_text
from bench.results import stats
from bench.results.collect import read_history, read_results, read_table, tidy
from bench.results.geometry import read_geometry
from bench.results.predictions import predictions_table, read_predictions
from bench.results.references import load_references
from bench.results.rescore import verified
from bench.results.run_records import (
    HISTORY_COLUMNS,
    history_table,
    last_launch,
    provenance_records,
    read_launch_log,
)
from bench.results.selfcheck_record import read_record
from bench.results.trials import TRIALS_TABLE_COLUMNS, read_trials, trials_table


@dataclass
class ReportInputs:
    """The data behind one report.

    Attributes:
        source: Where it came from (shown in the provenance section).
        table: Normalised tidy results table (one row per cell × split × metric).
        history: Per-epoch metrics (:data:`bench.results.run_records.HISTORY_COLUMNS`).
        cells: Per-cell provenance records.
        launch: Summary of the newest launch (command, time, cells skipped).
        problems: Result files skipped (unreadable, malformed, of a newer schema),
            duplicates, and results kept with a warning (no ``config_hash``).
        refs: Published reference numbers.
        predictions: Every cell's reporting-split predictions
            (:data:`bench.results.predictions.PREDICTION_COLUMNS`); empty when none.
        trials: One row per search trial (:data:`bench.results.trials.TRIALS_TABLE_COLUMNS`);
            empty when the sweep ran no search.
        selfcheck: The committed self-check record beside the results table
            (:func:`bench.results.selfcheck_record.read_record`), or None.
        geometry: The committed ``geometry.json`` beside the results table
            (:func:`bench.results.geometry.read_geometry`), or None.
    """

    source: str
    table: pd.DataFrame
    history: pd.DataFrame
    cells: list[dict[str, Any]]
    launch: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    refs: pd.DataFrame = field(default_factory=load_references)
    trials: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=TRIALS_TABLE_COLUMNS))
    predictions: pd.DataFrame = field(default_factory=lambda: predictions_table([]))
    selfcheck: dict[str, Any] | None = None
    geometry: dict[str, Any] | None = None


def load_inputs(path: str | Path) -> ReportInputs:
    """Load a results directory (or table file) or a multirun directory.

    Args:
        path: ``results/<name>`` (or its ``results.parquet``/``.csv``), or a sweep
            directory holding ``result.json`` files.

    Returns:
        The report inputs.

    Raises:
        FileNotFoundError: If ``path`` does not exist or holds neither a results table
            nor any result file.
        DataError: If the results directory's ``selfcheck.json`` is not a self-check record.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results or runs at {path}")
    folder = path.parent if path.is_file() else path
    has_table = path.is_file() or any(
        (path / name).is_file() for name in ("results.parquet", "results.csv")
    )
    if has_table:
        cells_file = folder / "cells.json"
        cells = json.loads(read_text(cells_file)) if cells_file.is_file() else []
        return ReportInputs(
            source=str(path),
            table=stats.normalize_table(read_table(path)),
            history=read_history(folder),
            cells=cells,
            launch=last_launch(read_launch_log([folder])),
            problems=_unhashed(cells, cells_file),
            trials=read_trials(folder),
            predictions=read_predictions(folder),
            selfcheck=read_record(folder),
            geometry=read_geometry(folder),
        )
    results, problems = read_results([path])
    if not results and not problems:
        raise FileNotFoundError(f"{path} holds no results table and no result.json files")
    results, frames, refused = verified(results)
    problems += refused
    history = history_table(results) if results else pd.DataFrame(columns=HISTORY_COLUMNS)
    return ReportInputs(
        source=str(path),
        table=stats.normalize_table(tidy(results)),
        history=history,
        cells=provenance_records(results),
        launch=last_launch(read_launch_log([path])),
        problems=problems,
        trials=trials_table(results),
        predictions=predictions_table(frames),
    )


def _unhashed(cells: list[dict[str, Any]], cells_file: Path) -> list[str]:
    """One line per cell of ``cells.json`` without a config hash (an older or hand-made result)."""
    return [
        f"{cells_file}: cell {cell.get('run_dir')}: no 'config_hash' (an older or hand-made "
        "result): kept, but resume cannot tell whether it matches the current config"
        for cell in cells
        if isinstance(cell, dict) and not cell.get("config_hash")
    ]
