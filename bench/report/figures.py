"""The report's figures (None without data); scores are drawn ×100."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator, NullFormatter

from bench.report.style import CONSTANT_COLOUR as GREY
from bench.report.style import FAILED_COLOUR as RED
from bench.report.style import Palette, metric_title, new_figure, ordered, sort_settings, task_title
from bench.results.curves import sized_settings, split_by_size
from bench.results.frames import RANGES
from bench.results.stats import SETTING_KEYS

Panels = list[tuple[str, pd.DataFrame]]
COST_AXES = {"trainable_params": "trainable parameters", "train_time_s": "training s per run"}


def title(task: str, encoder: str, multi_encoder: bool, *rest: str) -> str:
    """``SST-2 frozen 500`` (the encoder too where several), as the answer table names it."""
    words = [task_title(task), encoder if multi_encoder else "", *rest]
    return " ".join(w for w in words if w)


def setting_panels(frame: pd.DataFrame, multi: bool, keys: list[str] = SETTING_KEYS) -> Panels:
    """One ``(title, rows)`` per value of ``keys`` in report order; sizes named where sized."""
    sized = sized_settings(frame)
    out = []
    for key in sort_settings(frame[keys].drop_duplicates()).itertuples(index=False, name=None):
        k = dict(zip(keys, key, strict=True))
        rows = frame[np.logical_and.reduce([frame[c] == v for c, v in k.items()])]
        curve = (str(k["task"]), str(k["encoder"]), str(k["freeze_label"]))
        size = f"{k['train_size']:,}" if "train_size" in k and curve in sized else ""
        out.append((title(k["task"], k["encoder"], multi, k["freeze_label"], size), rows))
    return out


def _grid(
    panels: Panels, columns: int, width: float, height: float, heads: Sequence[str] = ()
) -> tuple[Figure, list[tuple[Axes, pd.DataFrame]]]:
    """Titled panels in rows of ``columns`` (inches each); with ``heads``, one y row per head."""
    cols = max(1, min(columns, len(panels)))
    rows = -(-len(panels) // cols)
    pad = (0.85, 0.2) if heads else (0.3, 0.5)  # inches for the head names, or the legend
    fig = new_figure(width * cols + pad[0], height * rows + pad[1])
    axes = fig.subplots(rows, cols, squeeze=False, sharey=bool(heads)).ravel()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax, (name, frame) in zip(axes, panels, strict=False):
        lines = name.split("\n")  # wrapped to the panel (about 16 characters an inch at 7 pt)
        ax.set_title("\n".join(textwrap.fill(t, int(width * 16)) for t in lines), fontsize=7)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
        if heads:  # scores along x, the heads down y (shared: labels on the left column)
            ax.set_xlabel(metric_title(frame["metric"].iloc[0]), fontsize=7)
            ax.grid(axis="y", visible=False)
    if heads:
        axes[0].set_yticks(range(len(heads)), heads)
        axes[0].set_ylim(len(heads) - 0.5, -0.5)
    return fig, list(zip(axes, (rows for _, rows in panels), strict=False))


def _legend(fig: Figure, palette: Palette, frame: pd.DataFrame, markers: bool = False) -> None:
    heads = ordered(frame["head_label"], palette.heads)
    handles = [Line2D([], [], color=palette.colour(h), marker="o", label=h) for h in heads]
    for f in ordered(frame["freeze_label"], palette.freezes) if markers else ():
        handles.append(Line2D([], [], color="#444", marker=palette.marker(f), ls="none", label=f))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 7))


def _constant(ax: Axes, rows: pd.DataFrame, key: str = "best_constant", on_y: bool = False) -> None:
    value = pd.to_numeric(rows[key], errors="coerce").mean()
    if np.isfinite(value):
        (ax.axhline if on_y else ax.axvline)(100 * value, color=GREY, ls="--", lw=0.9)


def scores_plot(scores: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Each head's mean (dot) and 95% interval (bar) per setting of ``scores``."""
    scores = scores.dropna(subset=["mean"])
    if scores.empty:
        return None
    heads = ordered(scores["head_label"], palette.heads)
    panels = setting_panels(scores, multi_encoder)
    columns = 4 if len(panels) <= 12 else 5  # about 510 px wide: beside the answer table
    fig, axes = _grid(panels, columns, 4.45 / columns, 0.6 + 0.15 * len(heads), heads)
    for ax, rows in axes:
        for r in rows.itertuples():
            y, colour = heads.index(str(r.head_label)), palette.colour(str(r.head_label))
            ax.plot([100 * r.low, 100 * r.high], [y, y], color=colour, lw=1.6)
            fill, edge = colour if r.beats_constant else "white", "black" if r.best else colour
            ax.plot(100 * r.mean, y, "o", ms=5, color=colour, mfc=fill, mec=edge, mew=1.2)
            bounds = RANGES.get(str(r.metric), (0.0, 1.0))
            for end, bound, mark in zip((r.low, r.high), bounds, "<>", strict=True):
                if r.clipped and np.isclose(end, bound):
                    ax.plot(100 * end, y, mark, ms=5, color=colour)
        _constant(ax, rows)
    return fig


def seed_strips(runs: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Every run (``run_values`` rows) per head and setting; ×: failed, ▼: no score."""
    if runs.empty:
        return None
    heads = ordered(runs["head_label"], palette.heads)
    panels = setting_panels(runs, multi_encoder)
    fig, axes = _grid(panels, 7, 1.5, 0.95 + 0.25 * len(heads), heads)
    for ax, rows in axes:
        for head, group in rows.groupby("head_label"):
            y, colour = heads.index(str(head)), palette.colour(str(head))
            spread = np.linspace(-0.25, 0.25, len(group)) if len(group) > 1 else np.zeros(1)
            for dy, r in zip(spread, group.sort_values("seed").itertuples(), strict=True):
                if pd.isna(r.value):
                    edge = ax.get_yaxis_transform()  # x in axes units: the left edge
                    ax.plot(0, y + dy, "v", ms=5, color=RED, transform=edge, clip_on=False)
                else:
                    mark, c = ("X", RED) if r.failed else ("o", colour)
                    ax.plot(100 * r.value, y + dy, mark, ms=4, color=c, mec="white", mew=0.4)
        _constant(ax, rows, "threshold")
    return fig


def pareto_mask(cost: pd.Series, score: pd.Series) -> np.ndarray:
    """Points no other point beats on both axes (lower or equal cost, higher score)."""
    c, s = cost.to_numpy(dtype=float), score.to_numpy(dtype=float)
    mask, best = np.zeros(c.size, dtype=bool), -np.inf
    for i in np.lexsort((-s, c)):  # by cost, then by score descending
        if np.isfinite(c[i]) and np.isfinite(s[i]) and s[i] > best:
            mask[i], best = True, s[i]
    return mask


def cost_scatter(costs: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Mean score against each of :data:`COST_AXES` per task, with ``pareto_<column>`` fronts."""
    costs = costs.dropna(subset=["mean"])
    if costs.empty:
        return None
    panels = [
        (title(t, e, multi_encoder, "" if size is None else f"{size:,}") + f"\n{label}", rows)
        for (t, e), size, rows in split_by_size(costs, ["task", "encoder"])
        for label in COST_AXES.values()
    ]
    fig, axes = _grid(panels, 4, 2.4, 2.1)
    for i, (ax, rows) in enumerate(axes):
        column = list(COST_AXES)[i % 2]
        for f, g in rows.groupby("freeze_label"):
            edge = ["black" if p else "white" for p in g[f"pareto_{column}"]]
            c, m = [palette.colour(h) for h in g["head_label"]], palette.marker(str(f))
            ax.scatter(g[column], 100 * g["mean"], 36, c=c, marker=m, edgecolors=edge)
        front = rows[rows[f"pareto_{column}"]].sort_values(column)
        ax.step(front[column], 100 * front["mean"], where="post", color="#444", lw=0.8, ls="--")
        _constant(ax, rows, on_y=True)
        if (rows[column] > 0).all() and rows[column].max() >= 10 * rows[column].min():
            ax.set_xscale("log")  # a decade or more: labels at the decades only
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(metric_title(rows["metric"].iloc[0]), fontsize=7)
    _legend(fig, palette, costs, markers=True)
    return fig


def curves(
    frame: pd.DataFrame, palette: Palette, multi_encoder: bool, x: str, keys: list = SETTING_KEYS
) -> Figure | None:
    """Per head, ``mean`` (band: ``low``–``high``) against ``x``; a panel per ``keys``."""
    frame = frame.dropna(subset=["mean"])
    if frame.empty:
        return None
    fig, axes = _grid(setting_panels(frame, multi_encoder, keys), 4, 2.6, 2.1)
    for ax, rows in axes:
        for head, r in rows.sort_values(x).groupby("head_label"):
            colour = palette.colour(str(head))
            ax.plot(r[x], 100 * r["mean"], color=colour, marker="o", ms=3, lw=1.2)
            ax.fill_between(r[x], 100 * r["low"], 100 * r["high"], color=colour, alpha=0.15, lw=0)
            best = r[r["best"].astype(bool)] if "best" in r else r.iloc[:0]
            ax.plot(best[x], 100 * best["mean"], "o", ms=5, color=colour, mec="black", ls="none")
        if "best_constant" in rows:
            c = rows.groupby(x)["best_constant"].mean().dropna()
            ax.plot(c.index, 100 * c, color=GREY, ls="--", lw=0.9)
        ax.set_ylabel(metric_title(rows["metric"].iloc[0]), fontsize=7)
        if x == "train_size":  # the sizes that ran, on a log axis
            sizes = sorted(rows[x].unique())
            ax.set_xscale("log")
            ax.set_xticks(sizes, [f"{v:,}" for v in sizes], fontsize=6)
            ax.minorticks_off()
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("training examples (log)" if x == "train_size" else x, fontsize=7)
    _legend(fig, palette, frame)
    return fig
