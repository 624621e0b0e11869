"""Everything a report reads: a results directory (:mod:`bench.results.collect`) or sweep's runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.data.text_lines import read_text
from bench.results import run_records, stats
from bench.results.collect import has_table, read_history, read_results, read_table, tidy
from bench.results.geometry import read_geometry
from bench.results.predictions import predictions_table, read_predictions
from bench.results.references import load_references
from bench.results.rescore import verified
from bench.results.selfcheck_record import read_record


@dataclass
class ReportInputs:
    """The data behind one report.

    The normalised tidy ``table``, per-epoch ``history``, the ``cells``' provenance, the newest
    ``launch``, result files skipped or warned about (``problems``), the published ``refs``,
    the dev ``predictions``, the committed ``selfcheck.json`` and ``geometry.json`` (or None).
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
        FileNotFoundError: If ``path`` holds neither a results table nor any result file.
        DataError: If the results directory's ``selfcheck.json`` is not a self-check record.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no results or runs at {path}")
    folder = path.parent if path.is_file() else path
    launch = run_records.last_launch(run_records.read_launch_log([folder]))
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
        empty = pd.DataFrame(columns=run_records.HISTORY_COLUMNS)
        history = run_records.history_table(results) if results else empty
        table, cells = tidy(results), run_records.provenance_records(results)
        predictions, selfcheck, geometry = predictions_table(frames), None, None
    extra = {"predictions": predictions, "selfcheck": selfcheck, "geometry": geometry}
    table = stats.normalize_table(table)
    return ReportInputs(str(path), table, history, cells, launch, problems, **extra)
