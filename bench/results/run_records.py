"""``history.csv``, ``cells.json`` (provenance) and ``launches.jsonl``, beside ``results.csv``."""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from bench.atomic import append_json_line
from bench.axes.optional import AXIS_COLUMNS
from bench.cell import CELL_COLUMNS
from bench.clock import utc_now
from bench.data.text_lines import read_text

_ROW = ["epoch", "step", "split", "metric", "value", "train_loss"]
HISTORY_COLUMNS = [*CELL_COLUMNS, *AXIS_COLUMNS, *_ROW]
LAUNCH_LOG = "launches.jsonl"
PROVENANCE_KEYS = (  # noqa: SIM905 (as a list literal: 19 lines)
    "status reason degenerate config_hash main_metric config encoder_info git versions "
    "hardware train_time_s wall_time_s finished_at params peak_memory run_dir search"
).split()


def history_table(results: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Per-epoch metrics of every cell as a tidy table, columns :data:`HISTORY_COLUMNS`."""
    rows = []
    for res in results:
        cell = [res["cell"].get(k) for k in [*CELL_COLUMNS, *AXIS_COLUMNS]]
        for entry in res.get("history") or []:
            at = [entry.get("epoch"), entry.get("step")]
            for split, metrics in entry.items():
                if isinstance(metrics, dict):  # not epoch, step, train_loss
                    rows += [
                        [*cell, *at, split, m, v, entry.get("train_loss")]
                        for m, v in metrics.items()
                    ]
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS)


def provenance_records(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cell's ``cells.json`` record: :data:`PROVENANCE_KEYS`, ``selection`` without ids."""
    records = []
    for res in results:
        selection = res.get("selection")
        if isinstance(selection, dict):
            selection = {k: v for k, v in selection.items() if k != "ids"}
        extra = {k: res[k] for k in ("lockstep", "phases_s") if res.get(k)}
        keys = {k: res.get(k) for k in PROVENANCE_KEYS}
        records.append({"cell": dict(res["cell"]), **keys, "selection": selection, **extra})
    return records


def log_launch_event(sweep_dir: str | Path, event: str, **fields: Any) -> None:
    """Append one ``event`` record (``launch`` or ``skip``) to ``<sweep_dir>/launches.jsonl``."""
    append_json_line(Path(sweep_dir) / LAUNCH_LOG, {"event": event, "time": utc_now(), **fields})


def read_launch_log(sweep_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The launch records of ``sweep_dirs``, oldest first (no log: from ``multirun.yaml``)."""
    records = []
    for root in map(Path, sweep_dirs):
        path = root / LAUNCH_LOG if root.is_dir() else root
        if path.is_file():
            for line in read_text(path, errors="replace").splitlines():
                with contextlib.suppress(json.JSONDecodeError):  # a line cut by a crash
                    record = json.loads(line)
                    if isinstance(record, dict) and "event" in record:
                        records.append(record)
        elif (hydra := root / "multirun.yaml").is_file():
            try:
                overrides = list(OmegaConf.load(hydra).hydra.overrides.task)
            except Exception:  # an unreadable file just means "not recorded"
                continue
            command = shlex.join(["python", "-m", "bench", "-m", *map(str, overrides)])
            at = utc_now(hydra.stat().st_mtime)
            records.append({"event": "launch", "time": at, "command": command, "from": hydra.name})
    return sorted(records, key=lambda r: str(r.get("time")))


def last_launch(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest launch's command and time, skips since, launches, and every cell planned."""
    starts = [i for i, r in enumerate(records) if r["event"] == "launch"]
    lists = [records[i]["planned"] for i in starts if isinstance(records[i].get("planned"), list)]
    newest, after = (records[starts[-1]], records[starts[-1] :]) if starts else ({}, [])
    return {
        "command": newest.get("command"),
        "time": newest.get("time"),
        "skipped": sum(r["event"] == "skip" for r in after),
        "launches": len(starts),
        "planned": sorted({str(path) for planned in lists for path in planned}),
    }
