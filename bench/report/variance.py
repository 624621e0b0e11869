"""The report's variance section: initialisation against batch order, per head setting.

The numbers and their definitions are :mod:`bench.results.variance`; the section appears
only where some head's runs cross seeds with order seeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from bench.report.calibration import SETTING_FORMATS, report_rows, setting_columns, size_text
from bench.report.html import Section, figure, frame_table
from bench.report.style import Palette, grid, svg_data_uri, task_title
from bench.results.variance import ALPHA, variance_table

if TYPE_CHECKING:
    from bench.report.context import ReportContext

#: The components in the order drawn: column, legend label, colour.
COMPONENTS = (
    ("share_init", "initialisation (seed)", "#0072B2"),
    ("share_order", "batch order (order_seed)", "#E69F00"),
    ("share_resid", "residual (interaction)", "#BBBBBB"),
)
#: The table's columns after the setting's, with their headers.
SHOWN = {
    "grid": "seeds × orders",
    "mean": "mean",
    "sd_init": "SD init",
    "sd_order": "SD order",
    "sd_resid": "SD resid.",
    "share_init": "init %",
    "share_order": "order %",
    "share_resid": "resid. %",
    "p_init": "p init",
    "p_order": "p order",
    "failures": "failed",
    "failure_origin": "failures from",
}


def shares_figure(frame: pd.DataFrame, palette: Palette) -> Figure:
    """Stacked bars of each head's variance shares, one panel per setting.

    Args:
        frame: :func:`~bench.results.variance.variance_table` rows in report order.
        palette: Report palette.
    """
    settings = list(frame.groupby(["task", "encoder", "freeze_label", "train_size"], sort=False))
    height = 0.9 + 0.35 * frame["head_label"].nunique()
    fig, axes = grid(len(settings), columns=2, width=4.2, height=height)
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
    """Each crossed head setting's variance components, as a table and a figure of shares.

    Returns:
        The section, or None when no head's runs cross seeds with order seeds.
    """
    frame = variance_table(ctx.inputs.table)
    if frame.empty:
        return None
    frame = report_rows(frame, ctx.palette)
    frame["grid"] = [f"{i}×{j}" for i, j in zip(frame["n_init"], frame["n_order"], strict=True)]
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
    uri = svg_data_uri(shares_figure(frame, ctx.palette))
    alt = "Stacked bars: each head's variance shares, initialisation, order, residual"
    shares = "Shares of each head's score variance: initialisation, batch order and residual."
    body = [frame_table(shown, caption, formats), figure(uri, alt, shares)]
    return Section("variance", "Where the variance comes from", "\n".join(body))
