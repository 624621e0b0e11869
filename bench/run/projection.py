"""What a launch will cost: process-hours per setting × head, projected from measured runs.

A *run* is one training: a seed's cell or one search trial. Its measured cost is its wall time
(a cell's ``wall_time_s``; a search's ``search.train_time_s`` over its trials), read from
``cells.json`` records and ``result.json`` files: the sweep's own finished cells and every
``cells.json`` beside its ``results_dir`` (the committed results). A setting × head's runs are
projected at the mean seconds of the runs measured for it (task, encoder, freezing, head)
on the device the launch uses (``hardware.gpu``; the CPU where none): at its own training
size and ``max_epochs`` where measured there, else from the nearest measured size × epochs,
scaled by training examples × epochs. One measured nowhere on that device is named, never
guessed. ``python -m bench -m ... --dry-run`` prints it (:func:`print_projection`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from bench.cell import RESULT_FILE
from bench.data.location import count_examples
from bench.data.tasks import get_task
from bench.results.adequacy import setting_of
from bench.results.collect import CELLS_FILE
from bench.run.plan import PlannedCell
from bench.run.search import stored_trials

#: What a measurement must share with a planned run (besides its device).
KEY = ["task", "encoder", "freeze_label", "head_label"]
CPU = "CPU"
_SIZE = ["train_size", "max_epochs"]


def planned_row(cfg: DictConfig) -> dict[str, Any]:
    """A composed cell's cost key: setting, head, epochs, device and its task's whole split.

    ``train_size`` is 0 for the whole training split, as in the frames; ``whole`` is the
    local training file's examples (0 where unknown: the Hub), for scaling; ``device`` is
    ``trainer.accelerator`` (resolved by :func:`print_projection`).
    """
    data_dir = OmegaConf.select(cfg, "data.dir", default=None)
    return {
        "task": str(cfg.task.name),
        "encoder": str(cfg.encoder.name),
        "freeze_label": str(cfg.freeze.label),
        "head_label": str(cfg.head.label),
        "train_size": int(OmegaConf.select(cfg, "data.train_size", default=None) or 0),
        "max_epochs": OmegaConf.select(cfg, "trainer.max_epochs", default=None),
        "device": str(OmegaConf.select(cfg, "trainer.accelerator", default="auto")),
        "whole": count_examples(data_dir, get_task(str(cfg.task.name))) or 0,
        "results_dir": str(OmegaConf.select(cfg, "results_dir", default="") or ""),
    }


def this_device() -> str:
    """The device a cell that may use a GPU trains on here: the first GPU's name, or the CPU."""
    from bench.run.provenance import hardware  # torch: the dry run's checks loaded it already

    return str(hardware()["gpu"] or CPU)


def measured(records: Iterable[Mapping[str, Any]], source: str) -> pd.DataFrame:
    """One row per measured run of ``ok`` records: key, device, size, epochs, ``seconds``.

    Args:
        records: ``cells.json`` records or ``result.json`` contents.
        source: What they are named by in the projection (a results folder's name).
    """
    rows = []
    for record in records:
        if record.get("status") != "ok":
            continue
        config, found = record.get("config") or {}, record.get("search") or {}
        where = setting_of(record) | {
            "head_label": str((record.get("cell") or {}).get("head_label")),
            "device": (record.get("hardware") or {}).get("gpu") or CPU,
            "max_epochs": (config.get("trainer") or {}).get("max_epochs"),
            "source": source,
        }
        seconds = [record.get("wall_time_s")]
        if found.get("scores") and found.get("train_time_s") is not None:  # a trial's mean
            seconds += [float(found["train_time_s"]) / len(found["scores"])]
        rows += [where | {"seconds": float(s)} for s in seconds if isinstance(s, int | float)]
    columns = [*KEY, "device", *_SIZE, "source", "seconds"]
    return pd.DataFrame(rows, columns=columns)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return None


def measurements(cells: list[PlannedCell], results_dir: str | Path | None) -> pd.DataFrame:
    """The runs measured for a plan: its finished cells, and the results beside ``results_dir``.

    Args:
        cells: The plan (its ``done`` cells' ``result.json`` are read).
        results_dir: The sweep's results directory: every ``cells.json`` in its parent's
            folders is read (``results/*/cells.json``), named by its folder.
    """
    own = [_json(c.run_dir / RESULT_FILE) for c in cells if c.state.state == "done"]
    frames = [measured([r for r in own if isinstance(r, dict)], "this sweep")]
    root = Path(results_dir).parent if results_dir else None
    for path in sorted(root.glob(f"*/{CELLS_FILE}")) if root and root.is_dir() else []:
        records = _json(path)
        if isinstance(records, list):
            frames.append(measured([r for r in records if isinstance(r, dict)], path.parent.name))
    return pd.concat(frames, ignore_index=True)


def unstored_trials(cells: list[PlannedCell]) -> list[int]:
    """Per cell that will run, the search trials a launch trains for it.

    Its search's trials (:attr:`PlannedCell.trials`) whose ``trial.json`` is not stored yet,
    counted once per trials folder (a setting's seeds may share one). Nothing is read but
    file names: a dry run writes nothing.
    """
    seen: set[Path] = set()
    found = []
    for cell in cells:
        folder = cell.trials_dir
        if folder is None or folder in seen:
            found.append(0)
            continue
        seen.add(folder)
        found.append(cell.trials - stored_trials(folder, cell.trials))
    return found


def _basis(
    candidates: pd.DataFrame, size: int, epochs: Any, whole: int
) -> tuple[float, str] | None:
    """Seconds per run at ``size`` × ``epochs``, and where they were measured; None: nowhere.

    The mean of the runs measured at that size and epoch limit (runs cost their number ×
    their mean); else of those at the nearest measured training examples × epochs (0
    examples: the ``whole`` split), scaled.
    """
    groups = candidates.groupby(_SIZE)
    found = groups["seconds"].mean().reset_index()
    found["sources"] = groups["source"].agg(lambda s: ", ".join(sorted(set(s)))).to_numpy()
    found["work"] = found["train_size"].replace(0, whole) * found["max_epochs"]
    work = (size or whole) * epochs if isinstance(epochs, int) else 0
    exact = found[(found["train_size"] == size) & (found["max_epochs"] == epochs)]
    if len(exact):
        row, scale = exact.iloc[0], 1.0
    elif work and (found["work"] > 0).any():
        scaled = found[found["work"] > 0]
        row = scaled.loc[(scaled["work"] / work).map(math.log).abs().idxmin()]
        scale = work / row["work"]
    else:
        return None
    at = f"{row['sources']} ({row['train_size'] or 'all'} ex × {row['max_epochs']} ep"
    return float(row["seconds"]) * scale, at + (
        f", scaled ×{scale:.3g})" if len(exact) == 0 else ")"
    )


def project(planned: pd.DataFrame, measured_runs: pd.DataFrame) -> pd.DataFrame:
    """Per setting × head of ``planned``: ``runs``, ``s_per_run``, ``hours`` and ``measured``.

    Args:
        planned: One row per cell that will run (:func:`planned_row`, ``device`` resolved,
            plus ``runs``: the cell and its pending trials).
        measured_runs: :func:`measured` rows.

    Returns:
        ``s_per_run`` and ``hours`` are NaN, and ``measured`` says so, where nothing was
        measured for the setting × head on its device.
    """
    rows = []
    keys = [*KEY, *_SIZE, "device"]
    for values, group in planned.groupby(keys, dropna=False, sort=False):
        where = dict(zip(keys, values, strict=True))
        same = (measured_runs[[*KEY, "device"]] == pd.Series(where)[[*KEY, "device"]]).all(axis=1)
        size, epochs, whole = where["train_size"], where["max_epochs"], group["whole"].iloc[0]
        found = _basis(measured_runs[same], size, epochs, int(whole))
        seconds, basis = found or (math.nan, f"no measurement on {where['device']}")
        runs = int(group["runs"].sum())
        rows.append(where | {"runs": runs, "s_per_run": seconds, "hours": runs * seconds / 3600})
        rows[-1]["measured"] = basis
    return pd.DataFrame(rows, columns=[*keys, "runs", "s_per_run", "hours", "measured"])


def projection_lines(frame: pd.DataFrame) -> list[str]:
    """The table (one row per setting × head) and one line with the total process-hours."""
    if frame.empty:
        return []
    known = frame[frame["hours"].notna()]
    missing = frame[frame["hours"].isna()]
    total = (
        f"cost: {known['hours'].sum():.2f} process-hours projected for {known['runs'].sum()} "
        f"of {frame['runs'].sum()} runs (seeds and search trials)"
    )
    if len(missing):
        total += f"; {missing['runs'].sum()} runs of {len(missing)} setting × head not measured"
    shown = frame.drop(columns="device").rename(columns=lambda c: c.replace("_", " "))
    formats = {"s per run": "{:,.0f}".format, "hours": "{:.2f}".format}
    table = shown.to_string(index=False, formatters=formats, na_rep="–")
    return [
        f"cost per setting × head (device: {', '.join(frame['device'].unique())}):",
        table,
        total,
    ]


def print_projection(cells: list[PlannedCell], cfgs: list[DictConfig]) -> None:
    """Print what the cells that will run cost: a table per setting × head, and the total.

    Args:
        cells: The plan, in order.
        cfgs: The composed config of each cell that will run, in the plan's order (what the
            dry run's check was given).
    """
    running = [c for c in cells if c.will_run]
    if not running or len(running) != len(cfgs):
        return
    frame = pd.DataFrame([planned_row(cfg) for cfg in cfgs])
    frame["runs"] = [1 + n for n in unstored_trials(running)]
    frame = frame[[not c.problem for c in running]]
    if frame.empty:
        return
    here = this_device() if (frame["device"] != "cpu").any() else CPU
    frame["device"] = frame["device"].map(lambda d: CPU if d == "cpu" else here)
    found = measurements(cells, frame["results_dir"].iloc[0])
    print("\n".join(projection_lines(project(frame, found))))
