"""The report's variance section: initialisation against batch order, per head setting."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from bench.report.calibration import SETTING_FORMATS, report_rows, setting_columns, size_text
from bench.report.context import ReportContext
from bench.report.html import Section, embed, frame_table
from bench.report.style import Palette, grid, task_title
from bench.results.variance import ALPHA, variance_table

COMPONENTS = [("share_init", "initialisation (seed)", "#0072B2")]
COMPONENTS += [("share_order", "batch order (order_seed)", "#E69F00")]
COMPONENTS += [("share_resid", "residual (interaction)", "#BBBBBB")]
SHOWN = {"grid": "seeds × orders", "mean": "mean", "sd_init": "SD init", "sd_order": "SD order"}
SHOWN |= {"sd_resid": "SD resid.", "share_init": "init %", "share_order": "order %"}
SHOWN |= {"share_resid": "resid. %", "p_init": "p init", "p_order": "p order"}
SHOWN |= {"failures": "failed", "failure_origin": "failures from"}


def shares_figure(frame: pd.DataFrame, palette: Palette) -> Figure:
    """Stacked bars of each head's variance shares (``frame``: report order), a panel a setting."""
    settings = list(frame.groupby(["task", "encoder", "freeze_label", "train_size"], sort=False))
    fig, axes = grid(len(settings), 2, 4.2, 0.9 + 0.35 * frame["head_label"].nunique())
    for ax, ((task, encoder, freeze, size), group) in zip(axes, settings, strict=True):
        left = np.zeros(len(group))
        for column, _, colour in COMPONENTS:
            values = 100 * group[column].fillna(0.0).to_numpy()
            ax.barh(group["head_label"], values, left=left, color=colour, height=0.6)
            left += values
        ax.set(xlim=(0, 100), xlabel="share of the score variance (%)")
        ax.set_title(f"{task_title(task)} · {encoder} · {freeze} · train {size_text(size)}")
        ax.invert_yaxis()
    handles = [Patch(color=colour, label=label) for _, label, colour in COMPONENTS]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    return fig


def variance_section(ctx: ReportContext) -> Section | None:
    """Each crossed head setting's variance components, a table and a figure; None without."""
    frame = variance_table(ctx.inputs.table)
    if frame.empty:
        return None
    frame = report_rows(frame, ctx.palette)
    frame["grid"] = frame["n_init"].astype(str) + "×" + frame["n_order"].astype(str)
    names = setting_columns(frame) | SHOWN
    shown = frame[list(names)].rename(columns=names)
    scaled = ["mean", "SD init", "SD order", "SD resid.", "init %", "order %", "resid. %"]
    shown[scaled] = shown[scaled] * 100
    formats: dict[str, Any] = {c: "{:.2f}" for c in scaled[1:4]} | {c: "{:.0f}" for c in scaled[4:]}
    formats |= SETTING_FORMATS | {"mean": "{:.1f}", "p init": "{:.2g}", "p order": "{:.2g}"}
    caption = (
        "Main metric ×100 on dev. Components: two-way random-effects ANOVA of seeds × order seeds; "
        f"p: its F tests; failures from: the same tests of the failure indicator (α={ALPHA})."
    )
    figure = embed(
        shares_figure(frame, ctx.palette),
        "Stacked bars: each head's variance shares, initialisation, order, residual",
        "Shares of each head's score variance: initialisation, batch order and residual.",
    )
    body = f"{frame_table(shown, caption, formats)}\n{figure}"
    return Section("variance", "Where the variance comes from", body)
