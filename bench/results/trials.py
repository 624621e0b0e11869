"""An experiment's search trials, one row per :data:`bench.cell.TRIAL_FILE`: ``trials.csv``.

:data:`TRIALS_TABLE_COLUMNS` (``config``: drawn values as JSON); ``stats.evp_from_trials`` reads it.
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

TRIALS_TABLE_COLUMNS = [*TRIAL_COLUMNS, "config", "best_epoch", "wall_time_s", "trial_dir"]
TRIALS_FILE = "trials.csv"
_NUMBERS = ("trial", "selection_score", "best_epoch", "wall_time_s")


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
        **{k: cell[k] for k in TRIAL_COLUMNS if k in cell},
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
    """One row per stored trial of the results' settings, ordered by setting and trial."""
    folders = sorted({Path(r["run_dir"]).parent / TRIALS_DIR for r in results if r.get("run_dir")})
    paths = [p for folder in folders for p in sorted(folder.glob(f"trial=*/{TRIAL_FILE}"))]
    table = pd.DataFrame([r for p in paths if (r := _trial_row(p))], columns=TRIALS_TABLE_COLUMNS)
    return table.sort_values(["trial_dir", "trial"], kind="stable").reset_index(drop=True)


def trials_bytes(table: pd.DataFrame) -> bytes:
    """``trials.csv``'s content."""
    return table.to_csv(index=False).encode("utf-8")


def read_trials(out_dir: str | Path) -> pd.DataFrame:
    """``trials.csv`` of a results directory (an empty table when the sweep ran no search)."""
    path = Path(out_dir) / TRIALS_FILE
    if not path.is_file():
        return pd.DataFrame(columns=TRIALS_TABLE_COLUMNS)
    return pd.read_csv(path, dtype={c: "str" for c in TRIALS_TABLE_COLUMNS if c not in _NUMBERS})
