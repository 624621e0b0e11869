"""What a sweep leaves besides scores: per-epoch history, per-cell provenance, launch log.

:mod:`bench.results.collect` writes these beside ``results.csv`` so that a results directory
alone is enough to build a report (learning curves, configs, versions, compute time):

* ``history.csv``: one row per cell × epoch × split × metric (plus ``train_loss``);
* ``cells.json``: per cell its status, config hash, resolved config, git commit, library
  versions, hardware, times and parameter counts;
* ``launches.jsonl`` (in the sweep directory, appended while a sweep runs): one record
  per launch (``launch``: the command) and per skipped cell (``skip``), so a report can
  say how many cells the last launch skipped because they were already done.
"""

from __future__ import annotations

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

HISTORY_COLUMNS = [
    *CELL_COLUMNS,
    *AXIS_COLUMNS,
    "epoch",
    "step",
    "split",
    "metric",
    "value",
    "train_loss",
]
LAUNCH_LOG = "launches.jsonl"
PROVENANCE_KEYS = (
    "status",
    "reason",
    "degenerate",
    "config_hash",
    "main_metric",
    "config",
    "encoder_info",
    "git",
    "versions",
    "hardware",
    "train_time_s",
    "wall_time_s",
    "finished_at",
    "params",
    "peak_memory",
    "run_dir",
)


def history_table(results: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Per-epoch metrics of every cell as a tidy table.

    Args:
        results: Parsed ``result.json`` contents.

    Returns:
        Columns :data:`HISTORY_COLUMNS`; cells without history contribute no rows.
    """
    rows = []
    for res in results:
        cell = {k: res["cell"].get(k) for k in [*CELL_COLUMNS, *AXIS_COLUMNS]}
        for entry in res.get("history") or []:
            for split, metrics in entry.items():
                if not isinstance(metrics, dict):
                    continue  # epoch, step, train_loss
                for metric, value in metrics.items():
                    rows.append(
                        {
                            **cell,
                            "epoch": entry.get("epoch"),
                            "step": entry.get("step"),
                            "split": split,
                            "metric": metric,
                            "value": value,
                            "train_loss": entry.get("train_loss"),
                        }
                    )
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS)


def provenance_records(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-cell provenance: the cell plus :data:`PROVENANCE_KEYS` of its result.

    Also what chose the cell's configuration and epoch: ``search`` (the result's search
    record, None without a search) and ``selection`` (its selection record without the
    slice's example ids, which stay in ``result.json``). A cell trained in a lock-step group
    also keeps its ``lockstep`` record (group size, device, how its wall time was counted),
    and a cell that recorded them its ``phases_s`` (where its wall time went).
    """
    return [
        {
            "cell": dict(res["cell"]),
            **{k: res.get(k) for k in PROVENANCE_KEYS},
            "search": res.get("search"),
            "selection": _without_ids(res.get("selection")),
            **({"lockstep": res["lockstep"]} if res.get("lockstep") else {}),
            **({"phases_s": res["phases_s"]} if res.get("phases_s") else {}),
        }
        for res in results
    ]


def _without_ids(selection: Any) -> Any:
    if not isinstance(selection, dict):
        return selection
    return {k: v for k, v in selection.items() if k != "ids"}


def log_launch_event(sweep_dir: str | Path, event: str, **fields: Any) -> None:
    """Append one JSON line to ``<sweep_dir>/launches.jsonl``.

    One short ``O_APPEND`` write per record, so records of concurrent cell processes do
    not interleave on a local or POSIX shared filesystem.

    Args:
        sweep_dir: The sweep directory.
        event: ``launch`` (fields: ``command``) or ``skip`` (fields: ``cell_path``,
            ``state``).
        **fields: The record's fields.
    """
    append_json_line(Path(sweep_dir) / LAUNCH_LOG, {"event": event, "time": utc_now(), **fields})


def read_launch_log(sweep_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """All launch-log records under the given sweep directories, oldest first.

    Unreadable lines (a record cut by a crash) are skipped.
    """
    records = []
    for root in map(Path, sweep_dirs):
        path = root / LAUNCH_LOG if root.is_dir() else root
        if not path.is_file():
            records += _hydra_launch(root)
            continue
        for line in read_text(path, errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "event" in record:
                records.append(record)
    return sorted(records, key=lambda r: str(r.get("time")))


def _hydra_launch(sweep_dir: Path) -> list[dict[str, Any]]:
    """A launch record rebuilt from Hydra's ``multirun.yaml`` (sweeps without a launch log)."""
    path = sweep_dir / "multirun.yaml"
    if not path.is_file():
        return []
    try:
        overrides = list(OmegaConf.load(path).hydra.overrides.task)
    except Exception:  # an unreadable file just means "not recorded"
        return []
    command = " ".join(["python -m bench -m", *(shlex.quote(str(o)) for o in overrides)])
    time = utc_now(path.stat().st_mtime)
    return [{"event": "launch", "time": time, "command": command, "from": "multirun.yaml"}]


def last_launch(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Summarise the newest launch: its command, time and the cells it skipped.

    Args:
        records: Launch-log records, oldest first.

    Returns:
        ``{"command", "time", "skipped", "launches", "planned"}`` (``command``/``time``
        None when no launch record exists; ``skipped`` counts skip records after the newest
        launch; ``planned``: every cell path any launch planned, sorted; launches logged
        before launches recorded their plan add none).
    """
    launches = [i for i, r in enumerate(records) if r["event"] == "launch"]
    planned = sorted(
        {
            str(path)
            for r in records
            if r["event"] == "launch" and isinstance(r.get("planned"), list)
            for path in r["planned"]
        }
    )
    if not launches:
        return {"command": None, "time": None, "skipped": 0, "launches": 0, "planned": planned}
    start = launches[-1]
    skipped = sum(1 for r in records[start:] if r["event"] == "skip")
    newest = records[start]
    return {
        "command": newest.get("command"),
        "time": newest.get("time"),
        "skipped": skipped,
        "launches": len(launches),
        "planned": planned,
    }
