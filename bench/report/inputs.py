"""Everything a report reads: a results directory (:mod:`bench.results.collect`) or sweep's runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.data.text_lines import read_text
from bench.results import stats
from bench.results.collect import has_table, read_history, read_results, read_table, tidy
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


@dataclass
class ReportInputs:
    """The data behind one report.

    Attributes:
        source: Where it came from (shown in the provenance section).
        table: Normalised tidy results table (one row per cell × split × metric).
        history: Per-epoch metrics (:data:`bench.results.run_records.HISTORY_COLUMNS`).
        cells: Per-cell provenance records.
        launch: Summary of the newest launch (command, time, cells skipped).
        problems: Result files skipped or kept with a warning (no ``config_hash``).
        refs: Published reference numbers.
        predictions: Every cell's reporting-split predictions (empty when none).
        selfcheck: The committed ``selfcheck.json`` beside the results table, or None.
        geometry: The committed ``geometry.json`` beside the results table, or None.
    """

    source: str
    table: pd.DataFrame
    history: pd.DataFrame
    cells: list[dict[str, Any]]
    launch: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    refs: pd.DataFrame = field(default_factory=load_references)
    predictions: pd.DataFrame = field(default_factory=lambda: predictions_table([]))
    selfcheck: dict[str, Any] | None = None
    geometry: dict[str, Any] | None = None


def load_inputs(path: str | Path) -> ReportInputs:
    """Load a results directory (or its table file) or a multirun directory of result files.

    Raises:
        FileNotFoundError: If ``path`` does not exist or holds neither a results table
            nor any result file.
        DataError: If the results directory's ``selfcheck.json`` is not a self-check record.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results or runs at {path}")
    folder = path.parent if path.is_file() else path
    launch = last_launch(read_launch_log([folder]))
    if path.is_file() or has_table(path):
        known = folder / "cells.json"
        cells = json.loads(read_text(known)) if known.is_file() else []
        problems = [
            f"{known}: cell {cell.get('run_dir')}: no 'config_hash' (an older or hand-made "
            "result): kept, but resume cannot tell whether it matches the current config"
            for cell in cells
            if isinstance(cell, dict) and not cell.get("config_hash")
        ]
        table, history = read_table(path), read_history(folder)
        predictions, selfcheck, geometry = (
            f(folder) for f in (read_predictions, read_record, read_geometry)
        )
    else:
        results, problems = read_results([path])
        if not results and not problems:
            raise FileNotFoundError(f"{path} holds no results table and no result.json files")
        results, frames, refused = verified(results)
        problems += refused
        history = history_table(results) if results else pd.DataFrame(columns=HISTORY_COLUMNS)
        table, cells, predictions = (
            tidy(results),
            provenance_records(results),
            predictions_table(frames),
        )
        selfcheck = geometry = None
    table = stats.normalize_table(table)
    extra = {"predictions": predictions, "selfcheck": selfcheck, "geometry": geometry}
    return ReportInputs(str(path), table, history, cells, launch, problems, **extra)
