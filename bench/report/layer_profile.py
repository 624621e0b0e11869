"""Layer choice: the per-layer profile (figure and table) and BERT's Table 7 beside ours."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from bench.report.budget import shown
from bench.report.context import ReportContext
from bench.report.html import Section, embed, frame_table
from bench.report.style import CONSTANT_COLOUR, OKABE_ITO, grid, metric_title
from bench.results.display import points
from bench.results.frames import RANGES
from bench.results.geometry import geometry_rows
from bench.results.layer_profile import SETTING, profile_rows
from bench.results.table7_agreement import agreement, selection_rows

CAPTIONS = (
    "Scores ×100; step: this layer − the one before, with the interval and verdict of its "
    "comparison; geometry of the word states from geometry.json.",
    "Frozen BiLSTM dev F1 ×100 per layer selection beside BERT-base in Devlin et al. (2019), "
    "Table 7; rank 1 = best.",
    "rho: Spearman between our means and the paper's (exact p); seed rho: the mean over pairs "
    "of our seeds; gap: last − second-to-last, its interval and verdict.",
)
SIGNED = ["step", "step low", "step high", "gap", "gap low", "gap high", "paper gap"]
FORMATS: dict[str, str | Callable[[Any], str]] = {"rank": "{:g}", "paper rank": "{:g}"}
FORMATS |= {"rho": "{:.2f}", "p": "{:.2g}", "seed rho": "{:.2f}"}
FORMATS |= dict.fromkeys(["mean", "low", "high", "paper"], points)
FORMATS |= dict.fromkeys(SIGNED, partial(points, signed=True))
FORMATS |= dict.fromkeys(["sentence share", "word to sentence cos", "anisotropy"], "{:.3f}")


def _varying(frame: pd.DataFrame) -> pd.DataFrame:
    drop = [c for c in SETTING[:1] + SETTING[2:] if c in frame and frame[c].nunique() < 2]
    return frame.drop(columns=drop)


def profile_figure(profile: pd.DataFrame) -> Figure:
    """Mean and interval per layer, one panel per setting × head, with the best constant."""
    panels = list(profile.groupby([*SETTING, "head"], sort=False))
    fig, axes = grid(len(panels), columns=2)
    for ax, ((task, encoder, freeze, _, head), g) in zip(axes, panels, strict=True):
        metric, y = str(g["metric"].iloc[0]), 100 * g["mean"]
        ax.errorbar(g["layer"], y, [y - 100 * g["low"], 100 * g["high"] - y], fmt="o-", capsize=3)
        ax.axhline(
            100 * g["best_constant"].iloc[0], ls="--", c=CONSTANT_COLOUR, label="best constant"
        )
        top = RANGES.get(metric, (0.0, 1.0))[1]
        for _, r in g[g["clipped"].astype(bool)].iterrows():  # a clipped end: a triangle
            mark, end = ("^", "high") if r["high"] >= top else ("v", "low")
            ax.plot(r["layer"], 100 * r[end], mark, c=OKABE_ITO[5])
        ax.set(xticks=g["layer"], xlabel="layer (0 = embeddings)", ylabel=metric_title(metric))
        ax.set_title(f"{task} · {encoder} · {head} · {freeze}")
    axes[0].legend(loc="lower right")
    return fig


def profile_view(profile: pd.DataFrame, geometry: dict[str, Any] | None) -> pd.DataFrame:
    """The profile's shown columns, with ``geometry.json``'s numbers where it is the same run."""
    steps = ["step", "step_low", "step_high", "step_verdict", "vs_best"]
    view = profile[[*SETTING, "head", "layer", "mean", "low", "high", "n", *steps]]
    run = (geometry or {}).get("task"), ((geometry or {}).get("encoder") or {}).get("name")
    if geometry and set(zip(profile["task"], profile["encoder"], strict=True)) == {run}:
        view = view.merge(geometry_rows(geometry), on="layer", how="left")
    return view


def layer_section(ctx: ReportContext) -> Section | None:
    """The per-layer profile and Table 7 beside the paper's; None without a layer sweep."""
    table, refs = ctx.inputs.table, ctx.inputs.refs
    profile = profile_rows(table, ctx.scores, ctx.comparisons)
    table7 = selection_rows(table, ctx.scores, refs).drop(columns=["layers", "head_label"])
    if profile.empty and table7.empty:
        return None
    agree = agreement(table, ctx.scores, ctx.comparisons, refs)
    pairs = zip((profile_view(profile, ctx.inputs.geometry), table7, agree), CAPTIONS, strict=True)
    parts = [frame_table(shown(_varying(f)), c, FORMATS) for f, c in pairs if len(f)]
    if not profile.empty:
        caption = "Mean over seeds with its 95% interval; dashed: the best constant; ▲/▼: clipped."
        parts.insert(
            0, embed(profile_figure(profile), "Mean score per layer with intervals", caption)
        )
    return Section("layers", "Layer choice", "\n".join(parts))
