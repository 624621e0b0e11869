"""The last section, provenance: source, command, statuses, code, libraries, hardware, configs."""

from __future__ import annotations

import json

import pandas as pd

from bench.report.context import ReportContext
from bench.report.html import Section, details, frame_table
from bench.results import stats

CELL = ["task", "encoder", "head_label", "freeze_label", "train_size", "seed", "order_seed"]


def part(flat: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """The columns of ``pd.json_normalize(cells)`` under one key, named without it."""
    return flat.filter(regex=f"^{prefix}\\.").rename(columns=lambda c: c.split(".", 1)[1])


def counted(frame: pd.DataFrame) -> pd.DataFrame:
    """The distinct rows of a frame with the number of cells of each."""
    return frame.value_counts(sort=False).rename("cells").reset_index() if frame.size else frame


def provenance_section(ctx: ReportContext) -> Section:
    """Where the numbers come from: always the last section."""
    inputs, launch = ctx.inputs, ctx.inputs.launch
    runs = inputs.table.drop_duplicates(subset=[*stats.RUN_KEYS, "layers"])
    cells = pd.json_normalize([c for c in inputs.cells if isinstance(c, dict)])
    summary = {
        "source": inputs.source,
        "command (newest launch)": launch.get("command") or "not recorded",
        "launched at": launch.get("time") or "–",
        "launches recorded": launch.get("launches", 0),
        "cells": len(runs),
        "training hours": f"{runs['train_time_s'].sum(skipna=True) / 3600:.2f}",
        "wall hours": f"{cells.get('wall_time_s', pd.Series()).sum() / 3600:.2f}",
    }
    status = runs["status"].fillna("unknown").value_counts()
    status["skipped (newest launch)"] = int(launch.get("skipped") or 0)
    status["result file problems"] = len(inputs.problems)
    flat = cells.map(lambda v: v if isinstance(v, str) else json.dumps(v, default=str))
    versions = part(flat, "versions").melt(var_name="library", value_name="version")
    tables = [
        (pd.Series(summary).rename_axis("item").reset_index(name="value"), ""),
        (status.rename_axis("status").reset_index(name="cells"), "Cells by status."),
        (pd.DataFrame({"result file problem": inputs.problems}), "Result files not read."),
        (runs.loc[runs["status"] != "ok", [*stats.RUN_KEYS, "status", "reason"]], "Not finished."),
        (counted(part(flat, "git")), "Code version."),
        (counted(versions[versions["version"] != "NaN"]), "Library versions."),
        (counted(part(flat, "hardware")), "Machines."),
    ]
    parts = [frame_table(frame, caption) for frame, caption in tables if len(frame)]
    if len(cells):
        config = part(flat, "config")
        one = config.nunique() == 1
        ids = part(cells, "cell").reindex(columns=CELL).assign(status=cells.get("status"))
        ids = ids.assign(hash=cells.get("config_hash", pd.Series()).str[:12])
        shared = frame_table(
            config.loc[:, one].iloc[0].rename_axis("key").reset_index(name="value")
        )
        varying = frame_table(ids.join(config.loc[:, ~one], rsuffix=" (config)").sort_values(CELL))
        parts.append(
            details(f"Configuration shared by all {len(cells)} cells ({one.sum()} keys)", shared)
        )
        parts.append(details(f"Per-cell configuration: the {(~one).sum()} keys that vary", varying))
    return Section("provenance", "Provenance", "\n".join(parts))
