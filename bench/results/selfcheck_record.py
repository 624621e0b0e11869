"""The record of a self-check, ``selfcheck.json`` (``python -m bench.run.selfcheck``), as frames."""

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

RECORD_FILE = "selfcheck.json"  #: The record's file name, in ``--out`` and beside the results.
RECORD_KEYS = ("slice", "finished_at", "split", "cells", "settings", "committed", "today")
#: The record's columns that hold numbers (null, the JSON of NaN, becomes NaN).
NUMBERS = {"committed", "today", "diff", "changed", "n_predictions", "score_diff", "shift"}
NUMBERS |= {"committed_mean", "t_low", "t_high", "ci_low", "ci_high", "today_mean"}
NUMBERS |= {"slice_committed_mean", "slice_today_mean"}


def _error(path: Path, what: str) -> DataError:
    redo = f"python -m bench.run.selfcheck {path.parent} --out DIR, then copy DIR/{path.name}"
    return DataError(f"{path}: {what}; write it again: {redo} to {path}")


def check_record(record: Any, path: Path) -> dict[str, Any]:
    """Check that ``record`` has what the report reads; DataError names the file if not."""
    if not isinstance(record, dict):
        raise _error(path, "not a JSON object")
    if missing := [k for k in RECORD_KEYS if k not in record]:
        raise _error(path, f"not a self-check record: no {', '.join(missing)}")
    if wrong := [k for k in ("slice", "committed", "today") if not isinstance(record[k], dict)]:
        raise _error(path, f"'{wrong[0]}' is not an object")
    for key, columns in (("cells", rep.CELL_COLUMNS), ("settings", rep.SETTING_COLUMNS)):
        rows = record[key]
        if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
            raise _error(path, f"'{key}' must be a non-empty list of objects")
        for number, row in enumerate(rows):
            if lacks := [c for c in columns if c not in row]:
                raise _error(path, f"{key}[{number}] lacks {', '.join(lacks)}")
            for column in sorted(NUMBERS & row.keys()):
                value = row[column]  # null is NaN, but a committed value is never missing
                numeric = isinstance(value, int | float) and not isinstance(value, bool)
                if not numeric and (value is not None or column == "committed"):
                    raise _error(path, f"{key}[{number}].{column} is {value!r}, not a number")
    return record


def read_record(folder: Path) -> dict[str, Any] | None:
    """The checked self-check record in ``folder``, or None without; DataError if not a record."""
    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        return None
    try:
        return check_record(json.loads(read_text(path)), path)
    except json.JSONDecodeError as err:
        where = f"{err.msg} at line {err.lineno}, column {err.colno}"
        raise _error(path, f"not JSON ({where})") from None


def _frame(
    record: dict[str, Any], part: str, table: pd.DataFrame | None, keys: list[str], pairs: dict
) -> pd.DataFrame:
    """A record's ``part`` (null is NaN); ``stale``: a ``pairs`` number differs in ``table``."""
    frame = pd.DataFrame(record[part])
    numbers = sorted(NUMBERS & set(frame.columns))
    frame = frame.assign(**frame[numbers].apply(pd.to_numeric, errors="coerce").astype(float))
    frame["stale"] = False
    if table is not None:
        runs = run_values(table, split=str(record["split"])).groupby(keys)["value"]
        now = runs.agg(["count", "mean"]).reset_index()
        mine = frame[keys].astype(now[keys].dtypes.to_dict()).merge(now, on=keys, how="left")
        for new, old in pairs.items():
            ours, theirs = mine[new].astype(float), frame[old].astype(float).to_numpy()
            frame["stale"] |= ~(((ours - theirs).abs() <= 1e-12) | (ours.isna() & np.isnan(theirs)))
    return frame


def cell_frame(record: dict[str, Any], table: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per re-trained cell: committed and today's value, Δ, ``identical``, ``stale``."""
    cells = _frame(record, "cells", table, RUN_KEYS, {"mean": "committed"})
    atol = float(record.get("identical_atol") or rep.IDENTICAL_ATOL)
    cells["same_score"] = (cells["status"] == "ok") & (cells["diff"].abs() <= atol)
    cells["identical"] = cells["same_score"] & (cells["changed"] == 0)
    cells.insert(0, "cell", [rep.setting_name(c, seed=True) for c in record["cells"]])
    return cells[["cell", *rep.CELL_COLUMNS, "same_score", "stale"]]


def head_frame(record: dict[str, Any], table: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per head and setting: committed mean and intervals beside today's, ``inside``."""
    heads = _frame(record, "settings", table, GROUP_KEYS, {"count": "n", "mean": "committed_mean"})
    heads = heads.reindex(columns=[*rep.SETTING_COLUMNS, "ci_low", "ci_high", "stale"])
    none = [s.get("ci_method") == "none" for s in record["settings"]]  # no BCa interval
    heads.loc[none, ["ci_low", "ci_high"]] = np.nan
    mean = heads["today_mean"]
    in_ci = heads["ci_low"].isna() | mean.between(heads["ci_low"], heads["ci_high"])
    heads["inside"] = mean.between(heads["t_low"], heads["t_high"]) & in_ci
    heads["reproduces"] = heads["inside"] & (heads["failed_seeds"].map(len) == 0)
    heads.insert(0, "setting", [rep.setting_name(s) for s in record["settings"]])
    return heads[["setting", *rep.SETTING_COLUMNS, "ci_low", "ci_high", "inside", "stale"]]


def device_name(hardware: dict[str, Any] | None) -> str:
    """Where a cell trained (its ``hardware``): the GPU, else ``CPU (<its vector kernels>)``."""
    hardware = hardware or {}
    if hardware.get("gpu"):
        return str(hardware["gpu"])
    if hardware.get("cpu_capability"):
        return f"CPU ({hardware['cpu_capability']})"
    return "CPU (kernels not recorded)" if hardware.get("cpu_count") else "not recorded"


def environment(record: dict[str, Any]) -> pd.DataFrame:
    """Per ``item`` (commit, device, libraries): ``committed``, ``today`` and ``same``."""
    committed, today = record["committed"], record["today"]
    git, versions = today.get("git") or {}, committed.get("versions") or {}
    commit = str(git.get("commit") or "not recorded")[:7] + ("+dirty" if git.get("dirty") else "")
    device, libraries = device_name(today.get("hardware")), today.get("versions") or {}
    rows = [("commit", "/".join(str(c)[:7] for c in committed.get("git") or []), commit)]
    rows += [("device", "/".join(committed.get("devices") or []), device)]
    rows += [(k, "/".join(versions.get(k) or []), str(v)) for k, v in libraries.items()]
    frame = pd.DataFrame(rows, columns=["item", "committed", "today"]).replace("", "not recorded")
    return frame.assign(same=frame["committed"] == frame["today"])
