"""An experiment's search trials, one row per :data:`bench.cell.TRIAL_FILE`: ``trials.csv``.

:data:`TRIALS_TABLE_COLUMNS` (``config``: drawn values as JSON); ``stats.evp_from_trials`` reads it.

Results whose search declares its tie rule (``result["search"]["tie_rule"]``) add
:data:`SEARCH_COLUMNS`: ``selected`` (the search chose this trial), ``tie_rule``, ``tied``
(this trial shared the best selection score with another: a tie the rule broke),
``stopped_early``. Tables of older
results keep their columns (and bytes). Under ``search.pairing: seed`` a setting's trials
live per seed (``trials/seed=<n>/trial=<k>``) and ``seed`` is filled; else it is empty.
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
#: Columns added when the results' searches record their tie rule (module docstring).
SEARCH_COLUMNS = ["seed", "selected", "tie_rule", "tied", "stopped_early"]
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
        "stopped_early": selection.get("stopped_early"),
    }


def _searches(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each search folder's record, from the cells that declare a tie rule (by folder)."""
    found = {}
    for result in results:
        search = result.get("search") if isinstance(result.get("search"), dict) else None
        if search and search.get("tie_rule") and result.get("run_dir"):
            folder = Path(result["run_dir"]).parent / TRIALS_DIR
            if search.get("pairing") == "seed":
                folder = folder / f"seed={search.get('seed')}"
            found[str(folder)] = search
    return found


def trials_table(results: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per stored trial of the results' settings, ordered by setting and trial."""
    results = list(results)
    folders = sorted({Path(r["run_dir"]).parent / TRIALS_DIR for r in results if r.get("run_dir")})
    paths = [
        p
        for folder in folders
        for pattern in (f"trial=*/{TRIAL_FILE}", f"seed=*/trial=*/{TRIAL_FILE}")
        for p in sorted(folder.glob(pattern))
    ]
    searches = _searches(results)
    columns = [*TRIALS_TABLE_COLUMNS, *(SEARCH_COLUMNS if searches else [])]
    rows = [r for p in paths if (r := _trial_row(p))]
    for row in rows:
        search = searches.get(str(Path(row["trial_dir"]).parent))
        if search is not None:
            tied = [int(k) for k in search.get("tied") or []]
            row.update(
                seed=search.get("seed") if search.get("pairing") == "seed" else None,
                selected=row["trial"] == search.get("selected"),
                tie_rule=search["tie_rule"],
                tied=len(tied) > 1 and row["trial"] in tied,
            )
    table = pd.DataFrame(rows, columns=columns)
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
