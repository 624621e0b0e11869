"""The report's calibration section (:mod:`bench.results.calibration`): ECE, reliability."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from bench.report.context import ReportContext
from bench.report.html import Section, embed, frame_table
from bench.report.style import Palette, grid, task_title
from bench.results import calibration as cal
from bench.results.stats import WHOLE_SPLIT

OPTIONAL = {"encoder": "encoder", "train_size": "train size", "split": "split"}  #: If they vary.
PANEL_KEYS = ["task", "encoder", "freeze_label", "train_size", "split"]  #: A panel pair each.


def report_rows(frame: pd.DataFrame, palette: Palette) -> pd.DataFrame:
    """Rows in report order (task, encoder, freezing, size, head); whole split as size 0."""
    orders = {"head_label": palette.heads, "freeze_label": palette.freezes}
    rank = {k: {v: i for i, v in enumerate(order)} for k, order in orders.items()}
    frame = frame.assign(train_size=frame["train_size"].fillna(WHOLE_SPLIT).astype(int))
    keys = [k for k in [*PANEL_KEYS, "head_label"] if k in frame]
    return frame.sort_values(keys, key=lambda c: c.map(rank[c.name]) if c.name in rank else c)


def setting_columns(frame: pd.DataFrame) -> dict[str, str]:
    """Task, the optional setting columns that vary in ``frame``, freezing and head."""
    varying = {k: v for k, v in OPTIONAL.items() if k in frame and frame[k].nunique() > 1}
    return {"task": "task", **varying, "freeze_label": "freeze", "head_label": "head"}


def size_text(size: object) -> str:
    """A training size, ``all`` for the whole training split."""
    return "all" if size == WHOLE_SPLIT else f"{int(size):,}"  # type: ignore[call-overload]


SETTING_FORMATS: dict[str, Any] = {"task": task_title, "train size": size_text}  #: By header.


def reliability_figure(points: pd.DataFrame, palette: Palette) -> Figure:
    """Accuracy against confidence per head, before and after temperature scaling (largest size)."""
    points = report_rows(points, palette)
    size = points["train_size"].replace(WHOLE_SPLIT, np.inf)
    points = points[size == size.groupby([points[k] for k in PANEL_KEYS[:3]]).transform("max")]
    panels = list(points.groupby(PANEL_KEYS, sort=False))
    fig, axes = grid(2 * len(panels), columns=2, width=3.8, height=3.3)
    for i, ((task, encoder, freeze, train_size, split), panel) in enumerate(panels):
        for ax, scaled in zip(axes[2 * i : 2 * i + 2], (False, True), strict=True):
            ax.plot([0, 1], [0, 1], color="#888", lw=0.8, ls="--")
            for head, curve in panel[panel["scaled"] == scaled].groupby("head_label", sort=False):
                colour = palette.colour(str(head))
                ax.plot(curve["confidence"], curve["accuracy"], "o-", ms=3, lw=1.2, color=colour)
            ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy")
            where = f"{task_title(task)} · {encoder} · {freeze} · train {size_text(train_size)}"
            when = "after temperature scaling" if scaled else "as trained"
            ax.set_title(f"{where} · {split}\n{when}")
    heads = [h for h in palette.heads if h in set(points["head_label"])]
    handles = [Patch(color=palette.colour(h), label=h) for h in heads]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6))
    return fig


def calibration_section(ctx: ReportContext) -> Section | None:
    """ECE per setting and head before and after temperature scaling, reliability; or None."""
    runs, bins = cal.calibration_tables(ctx.inputs.predictions)
    if runs.empty:
        return None
    summary = report_rows(cal.calibration_summary(runs), ctx.palette)
    names = setting_columns(summary) | {"seeds": "seeds", "accuracy_mean": "acc. (%)"}
    names |= {"ece_mean": "ECE (%)", "ece_ts_mean": "ECE after TS (%)", "temperature_mean": "T"}
    percent = {h: "{:.1f}" for h in ("acc. (%)", "ECE (%)", "ECE after TS (%)")}
    shown = summary[list(names)].rename(columns=names)
    shown[list(percent)] = shown[list(percent)] * 100
    caption = (
        f"Means over seeds. ECE: {cal.N_BINS} equal-width confidence bins; T: temperature fitted "
        "on the selection slice (– where a run has none)."
    )
    table = frame_table(shown, caption, SETTING_FORMATS | percent | {"T": "{:.2f}"})
    figure = embed(
        reliability_figure(cal.pooled_reliability(bins), ctx.palette),
        "Reliability diagrams per head, before and after temperature scaling",
        f"Accuracy against mean confidence in {cal.N_BINS} bins, seeds pooled; points below "
        "the dashed diagonal are overconfident.",
    )
    return Section("calibration", "Calibration", f"{table}\n{figure}")
