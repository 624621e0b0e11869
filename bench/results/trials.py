"""The search trials of an experiment as one table (``trials.csv``).

Each setting (task × encoder × head × freezing) of a sweep with ``search=random`` keeps its
trials beside its seeds (:data:`bench.cell.TRIALS_DIR`); every trial wrote
:data:`bench.cell.TRIAL_FILE` with its drawn values, status and selection-slice score. The
table has one row per trial: :data:`bench.results.stats.TRIAL_COLUMNS` plus ``config``
(the trial's drawn values as JSON), ``best_epoch`` and ``wall_time_s``. It feeds expected
validation performance against the number of trials (``stats.evp_from_trials``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from bench.cell import TRIAL_FILE, TRIALS_DIR
from bench.results.stats import TRIAL_COLUMNS

#: ``trials.csv``'s columns.
TRIALS_TABLE_COLUMNS = [*TRIAL_COLUMNS, "config", "best_epoch", "wall_time_s", "trial_dir"]
TRIALS_FILE = "trials.csv"


def _trial_row(path: Path) -> dict[str, Any] | None:
    """One trial's row, or None for an unreadable record (a trial still running)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("cell"), dict):
        return None
    cell, metric = record["cell"], record.get("main_metric")
    if "train_size" not in cell:  # written before the optional axes: from the stored config
        config = record.get("config") if isinstance(record.get("config"), dict) else {}
        cell = {**cell, "train_size": ((config or {}).get("data") or {}).get("train_size")}
    found = record.get("selection")
    selection: dict[str, Any] = found if isinstance(found, dict) else {}
    score = (selection.get("metrics") or {}).get(metric) if record.get("status") == "ok" else None
    return {
        **{k: cell.get(k) for k in TRIAL_COLUMNS if k in cell},
        "trial": record.get("trial"),
        "status": record.get("status"),
        "selection_metric": metric,
        "selection_score": math.nan if score is None else float(score),
        "config": json.dumps(record.get("trial_config"), sort_keys=True),
        "best_epoch": (record.get("best") or {}).get("epoch") or selection.get("best_epoch"),
        "wall_time_s": record.get("wall_time_s"),
        "trial_dir": str(path.parent),
    }


def trials_table(results: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Every stored trial of the settings the results belong to.

    Args:
        results: Collected results (each with ``run_dir``).

    Returns:
        One row per trial, ordered by setting and trial number.
    """
    folders = sorted({Path(r["run_dir"]).parent / TRIALS_DIR for r in results if r.get("run_dir")})
    rows = [
        row
        for folder in folders
        for path in sorted(folder.glob(f"trial=*/{TRIAL_FILE}"))
        if (row := _trial_row(path)) is not None
    ]
    table = pd.DataFrame(rows, columns=TRIALS_TABLE_COLUMNS)
    return table.sort_values(["trial_dir", "trial"], kind="stable").reset_index(drop=True)


def trials_bytes(table: pd.DataFrame) -> bytes:
    """``trials.csv``'s content."""
    return table.to_csv(index=False).encode("utf-8")


def read_trials(out_dir: str | Path) -> pd.DataFrame:
    """``trials.csv`` of a results directory (an empty table when the sweep ran no search)."""
    path = Path(out_dir) / TRIALS_FILE
    if not path.is_file():
        return pd.DataFrame(columns=TRIALS_TABLE_COLUMNS)
    text = [
        c
        for c in TRIALS_TABLE_COLUMNS
        if c not in ("trial", "selection_score", "best_epoch", "wall_time_s")
    ]
    return pd.read_csv(path, dtype=dict.fromkeys(text, "str"))
