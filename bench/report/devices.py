"""Where each head trained, shown where devices or library versions differ (``cells.json``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from bench.report.budget import SETTING, setting_of, shown
from bench.report.context import ReportContext
from bench.report.html import Section, frame_table
from bench.results.selfcheck_record import device_name

WHERE = ["device", "torch", "transformers"]


def seed_ranges(seeds: Iterable[Any]) -> str:
    """Seeds as runs of consecutive numbers: ``1-5,7``."""
    values = np.unique([int(s) for s in seeds if pd.notna(s)])
    runs = np.split(values, np.flatnonzero(np.diff(values) != 1) + 1) if values.size else []
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def device_frame(cells: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Per setting × head × device and versions: the seeds of its finished cells there."""
    rows = [
        setting_of(r)
        | {k: (r.get("cell") or {}).get(k) for k in ("head_label", "seed")}
        | {"device": device_name(r.get("hardware"))}
        | {lib: str((r.get("versions") or {}).get(lib, "–")) for lib in WHERE[1:]}
        for r in cells
        if isinstance(r, dict) and r.get("status", "ok") == "ok"
    ]
    frame = pd.DataFrame(rows, columns=[*SETTING, "head_label", "seed", *WHERE])
    grouped = frame.groupby([*SETTING, "head_label", *WHERE], dropna=False)["seed"]
    return grouped.agg(seeds=seed_ranges, runs="size").reset_index()


def devices_section(ctx: ReportContext) -> Section | None:
    """Mixed settings head by head (else each setting's device); None: one device ran all."""
    frame = device_frame(ctx.inputs.cells)
    if len(frame[WHERE].drop_duplicates()) < 2:
        return None
    mixed = frame.groupby(SETTING)[WHERE].transform("nunique").gt(1).any(axis=1)
    n, k = len(frame[SETTING].drop_duplicates()), len(frame.loc[mixed, SETTING].drop_duplicates())
    if not k:
        frame = frame.groupby([*SETTING, *WHERE])["runs"].sum().reset_index()
    caption = f"{k} of {n} settings trained their heads on different devices or versions."
    return Section("devices", "Devices", frame_table(shown(frame[mixed] if k else frame), caption))
