"""The report's matplotlib figures, one function per section.

Each function takes plain data frames (built by :mod:`bench.report.sections`) and a
:class:`~bench.report.style.Palette`, and returns a figure, or None when there is nothing
to draw. Scores arrive in [0, 1] and are drawn ×100.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from bench.report.style import (
    FAILED_COLOUR,
    Palette,
    grid,
    metric_title,
    new_figure,
    ordered,
    ordered_freezes,
    seeds_text,
    task_title,
)
from bench.results.curves import CURVE_KEYS, size_text, split_by_size
from bench.results.stats import NOT_ABOVE, WHOLE_SPLIT
from bench.results.tables import METRIC_NAMES

PANEL_KEYS = ["task", "encoder"]
#: A panel: task, encoder, and the training size where the panel is one size of a curve.
Panel = tuple[str, str, int | None]


def panel_title(task: str, encoder: str, multi_encoder: bool, size: int | None = None) -> str:
    """``SST-2``, ``SST-2 · minilm`` with several encoders, ``SST-2 · 400 examples``."""
    title = f"{task_title(task)} · {encoder}" if multi_encoder else task_title(task)
    return title if size is None else f"{title} · {size_text(size)}"


def heading(
    task: str,
    encoder: str,
    multi_encoder: bool,
    group: pd.DataFrame,
    seeds: str,
    size: int | None = None,
) -> str:
    """Panel title: task (and encoder, size), the metric's name and the number of seeds."""
    metric = str(group["metric"].iloc[0]) if "metric" in group and len(group) else ""
    name = METRIC_NAMES.get(metric, metric)
    return f"{panel_title(task, encoder, multi_encoder, size)} — {name}, {seeds}"


def panels(frame: pd.DataFrame) -> list[tuple[Panel, pd.DataFrame]]:
    """The panels of a figure: one per task and encoder, and per training size where needed.

    A task and encoder whose settings ran at several training sizes (a learning curve,
    :func:`bench.results.curves.sized_settings`) get one panel per size, so no panel mixes
    the sizes of one head; elsewhere the size is None and the panel is as before.

    Args:
        frame: Rows with ``task`` and ``encoder`` (and ``freeze_label``, ``train_size``).

    Returns:
        ``((task, encoder, size), rows)`` pairs in order (sizes ascending).
    """
    return [
        ((task, encoder, size), rows)
        for (task, encoder), size, rows in split_by_size(frame, PANEL_KEYS)
    ]


def _head_legend(
    fig: Figure, palette: Palette, heads: Sequence[str], freezes: Sequence[str] = ()
) -> None:
    handles: list = [Patch(color=palette.colour(h), label=h) for h in heads]
    handles += [
        Line2D(
            [],
            [],
            color="#444",
            marker=palette.marker(f),
            linestyle=palette.linestyle(f),  # type: ignore[arg-type]  # a style string
            label=f,
        )
        for f in freezes
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 8))


def _frame_legend(fig: Figure, palette: Palette, frame: pd.DataFrame) -> None:
    """The legend of the heads and freezing strategies present in ``frame``."""
    _head_legend(
        fig,
        palette,
        [h for h in palette.heads if h in set(frame["head_label"])],
        ordered_freezes(frame["freeze_label"]),
    )


def margin_forest(headlines: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Winner's margin over the runner-up with its simultaneous interval, one row per setting.

    The bars are the intervals shown beside Holm's p in the verdicts: simultaneous 95%
    intervals over the ``n_comparisons`` headline comparisons (Bonferroni, ``sim_low``/
    ``sim_high``), so a bar that clears 0 is always a filled (Holm-significant) dot.

    Args:
        headlines: Columns task, encoder, freeze_label, winner, runner_up, margin,
            sim_low, sim_high, n_comparisons, significant, metric, n_pairs (and
            ``vs_constant``: a row whose best mean does not beat the best constant is
            labelled as having no winner).
        palette: Report palette.
        multi_encoder: Whether to name the encoder in row labels.

    Returns:
        The figure, or None without any two-head setting.
    """
    rows = headlines.dropna(subset=["margin"]).reset_index(drop=True)
    if rows.empty:
        return None
    fig = new_figure(7.5, 1.8 + 0.32 * len(rows))
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1]
    for yi, (_, r) in zip(y, rows.iterrows(), strict=True):
        colour = palette.colour(r["winner"])
        if np.isfinite(r["sim_low"]) and np.isfinite(r["sim_high"]):
            ax.plot([100 * r["sim_low"], 100 * r["sim_high"]], [yi, yi], color=colour, lw=2)
        ax.plot(
            100 * r["margin"],
            yi,
            marker="o",
            ms=7,
            color=colour,
            markerfacecolor=colour if r["significant"] else "white",
            markeredgewidth=2,
        )
    labels = [
        f"{panel_title(r['task'], r['encoder'], multi_encoder)} · "
        f"{r.get('freeze_shown', r['freeze_label'])}: {r['winner']} vs {r['runner_up']}"
        + (" (no winner: ≤ best constant)" if r.get("vs_constant") == NOT_ABOVE else "")
        for _, r in rows.iterrows()
    ]
    ax.set_yticks(y, labels)
    ax.axvline(0, color="#444", lw=0.8)
    ax.set_xlabel("margin over the runner-up (main metric, points ×100)")
    counts = pd.to_numeric(rows["n_comparisons"], errors="coerce")
    m = int(counts.max()) if counts.notna().any() else 0
    bars = (
        f"simultaneous 95% intervals over all m = {m} headline comparisons (Bonferroni)"
        if m > 1
        else "95% t-interval"
    )
    fig.suptitle(
        f"Best head's margin, paired over seeds ({seeds_text(rows['n_pairs'])}),\n{bars}\n"
        f"filled = significant after Holm's correction over the same {m}; hollow = not"
    )
    ax.grid(axis="y", visible=False)
    _head_legend(fig, palette, ordered(rows["winner"], palette.heads))
    return fig


def heads_bars(cells: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Grouped bars per task: x = freezing strategy, one bar per head, 95% CI error bars.

    Args:
        cells: :func:`bench.results.stats.cell_stats` output (main metric, dev).
        palette: Report palette.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure, or None without data.
    """
    cells = cells[cells["n"] > 0]
    if cells.empty:
        return None
    found = panels(cells)
    fig, axes = grid(len(found))
    for ax, ((task, encoder, size), group) in zip(axes, found, strict=True):
        freezes = ordered_freezes(group["freeze_label"])
        heads = [h for h in palette.heads if h in set(group["head_label"])]
        width = 0.8 / max(len(heads), 1)
        for i, head in enumerate(heads):
            rows = group[group["head_label"] == head].set_index("freeze_label")
            xs, means, lows, highs = [], [], [], []
            for j, freeze in enumerate(freezes):
                if freeze not in rows.index:
                    continue
                r = rows.loc[freeze]
                xs.append(j - 0.4 + width * (i + 0.5))
                means.append(100 * r["mean"])
                has_ci = np.isfinite(r["ci_low"])
                lows.append(100 * (r["mean"] - r["ci_low"]) if has_ci else 0.0)
                highs.append(100 * (r["ci_high"] - r["mean"]) if has_ci else 0.0)
            ax.bar(
                xs,
                means,
                width * 0.95,
                color=palette.colour(head),
                label=head,
                yerr=[lows, highs],
                capsize=2,
                error_kw={"lw": 0.9},
            )
        baseline = group["baseline"].dropna()
        if not baseline.empty:
            ax.axhline(100 * baseline.mean(), color="#444", ls="--", lw=0.9)
            ax.annotate(
                "majority class",
                (1, 100 * baseline.mean()),
                xycoords=("axes fraction", "data"),
                ha="right",
                va="bottom",
                fontsize=7,
                color="#444",
            )
        ax.set_xticks(range(len(freezes)), freezes)
        ax.set_xlabel("freezing strategy")
        ax.set_ylabel(f"dev {metric_title(group['metric'].iloc[0])}")
        ax.set_title(heading(task, encoder, multi_encoder, group, seeds_text(group["n"]), size))
        ax.grid(axis="x", visible=False)
    fig.suptitle("Main metric by head and freezing strategy: mean over seeds, 95% bootstrap CI")
    _head_legend(fig, palette, [h for h in palette.heads if h in set(cells["head_label"])])
    return fig


def seed_strips(runs: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Every seed of every cell as a point over a box; failed runs marked.

    Args:
        runs: :func:`bench.results.stats.run_values` output (main metric, dev).
        palette: Report palette.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure, or None without runs.
    """
    if runs.empty:
        return None
    found = panels(runs)
    fig, axes = grid(len(found), columns=2, width=5.2, height=3.2)
    for ax, ((task, encoder, size), group) in zip(axes, found, strict=True):
        settings = [
            (h, f)
            for f in ordered_freezes(group["freeze_label"])
            for h in palette.heads
            if ((group["head_label"] == h) & (group["freeze_label"] == f)).any()
        ]
        values = group["value"].dropna()
        floor = 100 * values.min() if not values.empty else 0.0
        for x, (head, freeze) in enumerate(settings):
            rows = group[(group["head_label"] == head) & (group["freeze_label"] == freeze)]
            rows = rows.sort_values("seed")
            ok = rows["value"].dropna().to_numpy(dtype=float)
            if ok.size > 1:
                ax.boxplot(
                    100 * ok,
                    positions=[x],
                    widths=0.5,
                    showfliers=False,
                    patch_artist=True,
                    boxprops={"facecolor": "#eeeeee", "lw": 0.7},
                    medianprops={"color": "#444"},
                    whiskerprops={"lw": 0.7},
                    capprops={"lw": 0.7},
                )
            offsets = np.linspace(-0.15, 0.15, len(rows)) if len(rows) > 1 else [0.0]
            for dx, (_, r) in zip(offsets, rows.iterrows(), strict=True):
                if np.isnan(r["value"]):  # errored / diverged: no value, drawn on the floor
                    ax.plot(x + dx, floor, marker="v", color=FAILED_COLOUR, ms=7, clip_on=False)
                elif r["failed"]:
                    ax.plot(x + dx, 100 * r["value"], marker="X", color=FAILED_COLOUR, ms=7)
                else:
                    ax.plot(
                        x + dx,
                        100 * r["value"],
                        marker=palette.marker(freeze),
                        ms=5,
                        color=palette.colour(head),
                        markeredgecolor="white",
                        mew=0.5,
                    )
        baseline = group["baseline"].dropna()
        if not baseline.empty:
            ax.axhline(100 * baseline.mean(), color="#444", ls="--", lw=0.9)
        ax.set_xticks(range(len(settings)), [f"{h}\n{f}" for h, f in settings], fontsize=7)
        ax.set_xlabel("head / freezing strategy")
        ax.set_ylabel(f"dev {metric_title(group['metric'].iloc[0])}")
        counts = group.groupby(["head_label", "freeze_label"])["seed"].nunique()
        ax.set_title(heading(task, encoder, multi_encoder, group, seeds_text(counts), size))
        ax.grid(axis="x", visible=False)
    fig.suptitle(
        "Every seed: points = runs; × = failed (at or below the best constant prediction; "
        "the majority baseline where none is recorded); "
        "▼ = crashed or diverged (no score); dashed = majority class"
    )
    _frame_legend(fig, palette, runs)
    return fig


def _evp_panels(
    evp: pd.DataFrame,
    palette: Palette,
    multi_encoder: bool,
    x: str,
    xlabel: str,
    ylabel: str,
) -> Figure:
    """Expected-maximum curves (``x`` against ``expected_max`` ± std), one panel per task."""
    found = panels(evp)
    fig, axes = grid(len(found), columns=2, width=5.2, height=3.2)
    for ax, ((task, encoder, size), group) in zip(axes, found, strict=True):
        for freeze in ordered_freezes(group["freeze_label"]):
            for head in palette.heads:
                rows = group[(group["head_label"] == head) & (group["freeze_label"] == freeze)]
                if len(rows) < 2:
                    continue
                rows = rows.sort_values(x)
                n = rows[x].to_numpy()
                mean = 100 * rows["expected_max"].to_numpy(dtype=float)
                std = 100 * rows["expected_max_std"].to_numpy(dtype=float)
                colour = palette.colour(head)
                ax.fill_between(n, mean - std, mean + std, color=colour, alpha=0.12, lw=0)
                ax.plot(
                    n,
                    mean,
                    color=colour,
                    marker=palette.marker(freeze),
                    ms=4,
                    lw=1.2,
                    ls="-" if freeze == "full" else "--",
                )
        metric = group["metric"].iloc[0] if "metric" in group else group["selection_metric"].iloc[0]
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{ylabel} {metric_title(metric)}")
        ax.set_title(panel_title(task, encoder, multi_encoder, size))
        ax.xaxis.get_major_locator().set_params(integer=True)
    _frame_legend(fig, palette, evp)
    return fig


def evp_curves(evp: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Expected best dev score after n seeds, per head and freezing strategy (Dodge et al.).

    Args:
        evp: :func:`bench.results.stats.expected_validation_performance` output.
        palette: Report palette.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure, or None when no setting has two seeds or more.
    """
    if evp.empty or evp["n_seeds"].max() < 2:
        return None
    fig = _evp_panels(
        evp, palette, multi_encoder, "n_seeds", "seeds tried (n)", "expected best dev"
    )
    fig.suptitle(
        "Expected validation performance: the expected best dev score among n seeds "
        "(lines) ± its standard deviation (bands)"
    )
    return fig


def evp_trial_curves(evp: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Expected best selection score after n search trials, per head (Dodge et al. 2019).

    Args:
        evp: :func:`bench.results.stats.evp_from_trials` output.
        palette: Report palette.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure, or None when no head ran two trials or more.
    """
    if evp.empty or evp["n_trials"].max() < 2:
        return None
    fig = _evp_panels(
        evp, palette, multi_encoder, "n_trials", "trials tried (n)", "expected best selection"
    )
    fig.suptitle(
        "Expected performance against the tuning budget: the expected best selection-slice "
        "score among n trials (lines) ± its standard deviation (bands)"
    )
    return fig


def pareto_mask(cost: Sequence[float], score: Sequence[float]) -> np.ndarray:
    """Points no other point beats on both axes (lower or equal cost, higher score)."""
    c, s = np.asarray(cost, dtype=float), np.asarray(score, dtype=float)
    mask = np.zeros(c.size, dtype=bool)
    best = -np.inf
    for i in np.lexsort((-s, c)):  # by cost, then by score descending
        if np.isfinite(c[i]) and np.isfinite(s[i]) and s[i] > best:
            mask[i] = True
            best = s[i]
    return mask


COST_AXES = [
    ("trainable_params", "trainable parameters (log scale)"),
    ("train_time_s", "training time per run, s (log scale)"),
]


def cost_scatter(costs: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Score against trainable parameters and training time, Pareto front marked.

    Args:
        costs: One row per setting: task, encoder, head_label, freeze_label, metric,
            mean, n, trainable_params, train_time_s, pareto_params, pareto_time.
        palette: Report palette.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure, or None without data.
    """
    costs = costs.dropna(subset=["mean"])
    if costs.empty:
        return None
    found = panels(costs)
    fig, axes = grid(2 * len(found), columns=2, width=4.4, height=3.0)
    for i, ((task, encoder, size), group) in enumerate(found):
        for j, (column, label) in enumerate(COST_AXES):
            ax: Axes = axes[2 * i + j]
            flag = "pareto_params" if column == "trainable_params" else "pareto_time"
            for _, r in group.iterrows():
                ax.plot(
                    r[column],
                    100 * r["mean"],
                    marker=palette.marker(r["freeze_label"]),
                    color=palette.colour(r["head_label"]),
                    ms=7,
                    ls="none",
                    markeredgecolor="black" if r[flag] else "white",
                    mew=1.2,
                )
            front = group[group[flag]].sort_values(column)
            if len(front) > 0:
                ax.step(
                    front[column],
                    100 * front["mean"],
                    where="post",
                    color="#444",
                    lw=1,
                    ls="--",
                    label="Pareto front",
                )
            if (group[column] > 0).all():
                ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel(f"dev {metric_title(group['metric'].iloc[0])}")
            ax.set_title(heading(task, encoder, multi_encoder, group, seeds_text(group["n"]), size))
    fig.suptitle("Cost vs score (mean over seeds); black outline + dashed step = Pareto front")
    _frame_legend(fig, palette, costs)
    return fig


def layer_bars(layers: pd.DataFrame, multi_encoder: bool) -> Figure | None:
    """Score by layer choice (dev and test), with published reference numbers beside.

    Args:
        layers: One row per (task, encoder, group, layer choice, series): columns task,
            encoder, group, choice, series (``dev``, ``test`` or a reference name),
            value (×1, NaN if missing), err_low, err_high, metric, n.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure, or None without layer choices.
    """
    if layers.empty:
        return None
    panels = [(keys, g) for keys, g in layers.groupby(["task", "encoder", "group"], sort=True)]
    fig, axes = grid(len(panels), columns=1, width=10.0, height=3.4)
    series_colours = ["#0072B2", "#56B4E9", "#999999", "#CCCCCC"]
    for ax, ((task, encoder, group_name), group) in zip(axes, panels, strict=True):
        choices = list(dict.fromkeys(group["choice"]))
        series = list(dict.fromkeys(group["series"]))
        width = 0.8 / len(series)
        for i, name in enumerate(series):
            rows = group[group["series"] == name].set_index("choice")
            xs = [c for c in choices if c in rows.index and np.isfinite(rows.loc[c, "value"])]
            pos = [choices.index(c) - 0.4 + width * (i + 0.5) for c in xs]
            vals = [100 * rows.loc[c, "value"] for c in xs]
            err = [
                [100 * rows.loc[c, "err_low"] for c in xs],
                [100 * rows.loc[c, "err_high"] for c in xs],
            ]
            ax.bar(
                pos,
                vals,
                width * 0.95,
                label=name,
                color=series_colours[i % len(series_colours)],
                yerr=np.nan_to_num(err),
                capsize=2,
                error_kw={"lw": 0.8},
            )
        ax.set_xticks(range(len(choices)), choices, fontsize=8)
        ax.set_xlabel("layer choice")
        ax.set_ylabel(metric_title(group["metric"].iloc[0]))
        ours = group[group["series"].str.startswith("ours")]
        title = heading(task, encoder, multi_encoder, group, seeds_text(ours["n"].dropna()))
        ax.set_title(f"{title} · {group_name}; error bars: min–max over seeds")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(axis="x", visible=False)
    fig.suptitle("Score by layer choice: ours (dev, test) beside published numbers")
    return fig


def learning_curves(history: pd.DataFrame, palette: Palette, multi_encoder: bool) -> Figure | None:
    """Dev main metric per epoch: mean over seeds per setting, band = min–max over seeds.

    Args:
        history: Per-epoch rows of the main metric on dev (task, encoder, head_label,
            freeze_label, seed, epoch, value, metric).
        palette: Report palette.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure, or None without history.
    """
    if history.empty:
        return None
    found = panels(history)
    fig, axes = grid(len(found))
    for ax, ((task, encoder, size), group) in zip(axes, found, strict=True):
        for (head, freeze), rows in group.groupby(["head_label", "freeze_label"], sort=True):
            curve = rows.groupby("epoch")["value"].agg(["mean", "min", "max"]).sort_index()
            epochs = curve.index.to_numpy(dtype=float) + 1  # epochs shown 1-based
            colour = palette.colour(head)
            ax.plot(
                epochs,
                100 * curve["mean"],
                color=colour,
                ls=palette.linestyle(freeze),
                marker=palette.marker(freeze),
                ms=4,
            )
            ax.fill_between(
                epochs, 100 * curve["min"], 100 * curve["max"], color=colour, alpha=0.12, lw=0
            )
        seeds = group.groupby(["head_label", "freeze_label"])["seed"].nunique()
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"dev {metric_title(group['metric'].iloc[0])}")
        ax.set_title(heading(task, encoder, multi_encoder, group, seeds_text(seeds), size))
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(
        "Learning curves: dev main metric after each epoch (line = mean, band = min–max over seeds)"
    )
    _frame_legend(fig, palette, history)
    return fig


def size_curves(
    points: pd.DataFrame, leaders: pd.DataFrame, palette: Palette, multi_encoder: bool
) -> Figure | None:
    """Score against training size (log x) per head, one panel per learning curve.

    Args:
        points: :func:`bench.results.curves.curve_points` rows.
        leaders: :func:`bench.results.curves.curve_leaders` rows of the same table.
        palette: Report palette.
        multi_encoder: Whether to name the encoder in panel titles.

    Returns:
        The figure (line = mean over seeds, band = 95% Student-t interval; a vertical line
        where the leading head changes: solid and starred when the new leader is
        significantly ahead there, dotted and "n.s." otherwise), or None without a curve.
    """
    points = points[(points["n"] > 0) & (points["train_size"] != WHOLE_SPLIT)]
    if points.empty:
        return None
    curves = list(points.groupby(CURVE_KEYS, sort=True))
    fig, axes = grid(len(curves), columns=2, width=5.2, height=3.4)
    for ax, ((task, encoder, freeze), group) in zip(axes, curves, strict=True):
        for head in [h for h in palette.heads if h in set(group["head_label"])]:
            rows = group[group["head_label"] == head].sort_values("train_size")
            x = rows["train_size"].to_numpy(dtype=float)
            colour = palette.colour(head)
            ax.plot(x, 100 * rows["mean"], color=colour, marker="o", ms=4, lw=1.4, label=head)
            band = rows[rows["t_low"].notna()]
            ax.fill_between(
                band["train_size"].to_numpy(dtype=float),
                100 * band["t_low"].to_numpy(dtype=float),
                100 * band["t_high"].to_numpy(dtype=float),
                color=colour,
                alpha=0.15,
                lw=0,
            )
        mine = leaders[
            (leaders["task"] == task)
            & (leaders["encoder"] == encoder)
            & (leaders["freeze_label"] == freeze)
            & (leaders["train_size"] != WHOLE_SPLIT)
        ]
        previous = mine["train_size"].shift(1)
        for (_, r), before in zip(mine.iterrows(), previous, strict=True):
            if not r["changed"] or pd.isna(before):
                continue
            sure = bool(r["change_significant"])
            x = float(np.sqrt(before * r["train_size"]))  # between the two sizes (log axis)
            ax.axvline(x, color="#444", lw=1.0 if sure else 0.8, ls="-" if sure else ":")
            ax.annotate(
                f"{r['leader']} leads ({r['change_tier'] if sure else 'n.s.'})",
                (x, 0.02),
                xycoords=("data", "axes fraction"),
                rotation=90,
                ha="right",
                va="bottom",
                fontsize=7,
                color="#444",
            )
        sizes = sorted(group["train_size"].unique())
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{s:,}" for s in sizes], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("training examples (log scale)")
        ax.set_ylabel(f"dev {metric_title(group['metric'].iloc[0])}")
        where = panel_title(task, encoder, multi_encoder)
        counts = group["n"]
        ax.set_title(f"{where} · {freeze} — {seeds_text(counts)}")
    fig.suptitle(
        "Score by training size: mean over seeds, 95% t-interval (bands)\nvertical line: "
        "the lead changes (solid: significant, Holm in the curve; dotted: n.s.)"
    )
    _head_legend(fig, palette, [h for h in palette.heads if h in set(points["head_label"])])
    return fig


def compute_bars(times: pd.DataFrame, palette: Palette) -> Figure | None:
    """Where the compute went: training minutes per task × freezing, stacked by head.

    Args:
        times: One row per run: task, encoder, head_label, freeze_label, train_time_s.
        palette: Report palette.

    Returns:
        The figure, or None without times.
    """
    times = times.dropna(subset=["train_time_s"])
    if times.empty:
        return None
    groups = sorted(
        {
            (t, e, f)
            for t, e, f in zip(times["task"], times["encoder"], times["freeze_label"], strict=True)
        }
    )
    labels = [
        f"{task_title(t)}\n{f}" + (f"\n{e}" if times["encoder"].nunique() > 1 else "")
        for t, e, f in groups
    ]
    fig = new_figure(max(5.0, 0.55 * len(groups) + 1.5), 3.4)
    ax = fig.add_subplot()
    bottom = np.zeros(len(groups))
    for head in [h for h in palette.heads if h in set(times["head_label"])]:
        rows = times[times["head_label"] == head]
        minutes = np.array(
            [
                rows[(rows["task"] == t) & (rows["encoder"] == e) & (rows["freeze_label"] == f)][
                    "train_time_s"
                ].sum()
                / 60
                for t, e, f in groups
            ]
        )
        ax.bar(range(len(groups)), minutes, bottom=bottom, color=palette.colour(head), label=head)
        bottom += minutes
    ax.set_xticks(range(len(groups)), labels, fontsize=7)
    ax.set_ylabel("training time, all seeds (min)")
    ax.set_xlabel("task / freezing strategy")
    ax.set_title(
        f"Compute per task and freezing strategy: {bottom.sum():.0f} min of training in all"
    )
    ax.grid(axis="x", visible=False)
    ax.legend(loc="upper left")
    return fig
