"""How much of the newest launch's preset grid (:func:`bench.axes.sweep.expand`) has a result."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from bench.axes.sweep import expand
from bench.errors import ConfigError
from bench.report.budget import shown
from bench.report.context import ReportContext
from bench.report.html import Section, frame_table
from bench.results import stats
from bench.results.studies import preset_path

#: Sweep keys that identify a cell in the results table: sweep key -> table column.
CELL_KEYS = {"data.train_size": "train_size", "head.layers": "layers"} | {
    k: k for k in ("task", "encoder", "freeze", "head", "seed", "order_seed")
}
#: Sweep keys that vary within a setting (its heads and their runs).
WITHIN = ("head", "head.layers", "seed", "order_seed")


def _grid(preset: Path) -> pd.DataFrame:
    """Every job of a preset's sweep, one column per swept key (empty: it sweeps nothing)."""
    sweeper = OmegaConf.select(OmegaConf.load(preset), "hydra.sweeper", default=None) or {}
    params = OmegaConf.to_container(sweeper.get("params") or OmegaConf.create())
    grids = [OmegaConf.to_container(g) for g in sweeper.get("grids") or []]
    jobs = expand(OverridesParser.create(), params or None, grids, []) if sweeper else []  # type: ignore[arg-type]
    return pd.DataFrame([dict(kv.split("=", 1) for kv in job) for job in jobs])


def swept_values(preset: Path) -> dict[str, list[str]]:
    """Per swept key, every value the preset's whole grid gives it."""
    return {key: list(values.dropna().unique()) for key, values in _grid(preset).items()}


def _value(key: str, value: object) -> str | None:
    """A sweep or table value in one spelling (None: one the table cannot hold)."""
    if key == "head.layers":  # the table's label of one layer or of a named selection
        parsed = yaml.safe_load(str(value))
        parsed = parsed[0] if isinstance(parsed, list) and len(parsed) == 1 else parsed
        return None if isinstance(parsed, list) else str(parsed)
    if key not in ("seed", "order_seed", "data.train_size"):
        return str(value)
    try:
        return str(int(float(str(value)))) if pd.notna(value) else str(stats.WHOLE_SPLIT)
    except ValueError:
        return str(stats.WHOLE_SPLIT) if value == "null" else None


def _spelled(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.apply(lambda c: c.map(lambda v: _value(str(c.name), v))).drop_duplicates()


def preset_cells(preset: Path) -> pd.DataFrame | None:
    """Every cell of a preset's grid, spelled as the table's (None: cannot be told apart there)."""
    try:
        raw = _grid(preset)
    except ConfigError:  # a sweep no launch could run either (an interval)
        return None
    raw = raw[[k for k in CELL_KEYS if k in raw]]
    cells = _spelled(raw)
    whole = len(raw) and not raw.isna().any(axis=None) and not cells.isna().any(axis=None)
    return cells if whole and len(cells) == len(raw) else None


def grid_progress(
    table: pd.DataFrame, command: str, conf_dir: Path | None = None
) -> pd.DataFrame | None:
    """Per setting of the launch's preset: cells ``planned``, ``done``, heads ``short`` of them."""
    preset = preset_path(command, conf_dir)
    grid = preset_cells(preset) if preset is not None else None
    if preset is None or grid is None or any(CELL_KEYS[k] not in table for k in grid):
        return None
    keys, heads = list(grid), [k for k in ("head", "head.layers") if k in grid]
    ran = _spelled(table[[CELL_KEYS[k] for k in keys]].set_axis(keys, axis=1))
    grid["done"] = grid.merge(ran, how="left", indicator=True)["_merge"].eq("both").to_numpy()
    grid["label"] = grid[heads].agg("-".join, axis=1) if heads else ""
    if heads:  # the results' label of a head that ran (``pooler-random``)
        named = table[[CELL_KEYS[k] for k in heads]].set_axis(heads, axis=1)
        labels = _spelled(named.assign(to=table["head_label"])).drop_duplicates(heads, keep=False)
        grid = grid.merge(labels, how="left", on=heads)
        grid["label"] = grid["to"].fillna(grid["label"])
    setting = ["experiment", *(k for k in keys if k not in WITHIN)]
    per_head = grid.assign(experiment=preset.stem).groupby([*setting, "label"], sort=False)
    per_head = per_head["done"].agg(["size", "sum"])
    per_head["short"] = [f"{h} {d}/{n}".strip() for (*_, h), n, d in per_head.itertuples()]
    per_head.loc[per_head["sum"] >= per_head["size"], "short"] = ""
    out = per_head.groupby(setting, sort=False).agg(
        planned=("size", "sum"),
        done=("sum", "sum"),
        short=("short", lambda s: ", ".join(filter(None, s))),
    )
    return out.reset_index().rename(columns=CELL_KEYS)


def grid_section(ctx: ReportContext) -> Section | None:
    """Planned against done cells per setting; None when the preset's grid is complete."""
    progress = grid_progress(ctx.inputs.table, str(ctx.inputs.launch.get("command") or ""))
    if progress is None or (progress["done"] >= progress["planned"]).all():
        return None
    caption = (
        f"Partial experiment: {progress['done'].sum()} of the {progress['planned'].sum()} cells "
        "of its preset have a result; the verdicts cover only what ran."
    )
    progress = progress.astype({"train_size": int}) if "train_size" in progress else progress
    return Section("progress", "Grid progress", frame_table(shown(progress), caption))
