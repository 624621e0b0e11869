"""Sections: seed spread, cost vs score, learning curves by epoch and by training size."""

from __future__ import annotations

from typing import Any

import pandas as pd

import bench.report.figures as figures
from bench.report.context import ReportContext
from bench.report.html import Section, embed, frame_table
from bench.report.style import sort_settings, task_title
from bench.results import stats
from bench.results.curves import CURVE_KEYS, size_text, sized_settings, split_by_size
from bench.results.display import points
from bench.results.frames import oriented

GROUP, SETTING = stats.GROUP_KEYS, stats.SETTING_KEYS
Formats = dict[str, Any]  # per column: a format string or a function of the value
LEADER_COLUMNS = "head_a mean_a beats_all head_b mean_b estimate low high verdict p_holm"
LEADER_NAMES = "Best,Mean,Beats all,Runner-up,Runner-up mean,Difference,Low,High,Verdict,p (Holm)"
LEADER = dict(zip(LEADER_COLUMNS.split(), LEADER_NAMES.split(","), strict=True))
COST_NAMES = ["Mean", "Parameters", "Train s", "Front: parameters", "Front: time"]


def _table(ctx: ReportContext, frame: pd.DataFrame, caption: str, formats: Formats) -> str:
    """A frame with its setting keys (and head) shown as Task, Encoder, Freeze, Head."""
    frame = sort_settings(frame)
    shown = pd.DataFrame({"Task": frame["task"].map(task_title)}, index=frame.index)
    if ctx.multi_encoder:
        shown["Encoder"] = frame["encoder"]
    keys = frame[SETTING].itertuples(index=False)  # the training size where a curve ran
    shown["Freeze"] = [
        f"{f}, {size_text(s)}" if (t, e, f) in ctx.sized else str(f) for t, e, f, s in keys
    ]
    if "head_label" in frame:
        shown["Head"] = frame["head_label"]
    out = pd.concat([shown, frame.drop(columns=[c for c in GROUP if c in frame])], axis=1)
    return frame_table(out, caption, formats)


def _yes(flag: object) -> str:
    return "yes" if flag else ""


SPREAD_FORMATS: Formats = dict.fromkeys(["Min", "Median", "Max", "SD"], points)
COST_FORMATS: Formats = {"Mean": points, "Parameters": "{:,.0f}", "Train s": "{:.1f}"}
COST_FORMATS |= dict.fromkeys(["Front: parameters", "Front: time"], _yes)
LEADER_FORMATS: Formats = {"p (Holm)": "{:.2g}", "Beats all": _yes}
LEADER_FORMATS |= dict.fromkeys(["Mean", "Runner-up mean", "Difference", "Low", "High"], points)
LEADER_CAPTION = "Best head at each size against the runner-up (dev, ×100; the verdict's interval)."


def _reasons(reasons: pd.Series) -> str:
    return ", ".join(f"{n} {r}" for r, n in reasons[reasons != ""].value_counts().items())


def spread_section(ctx: ReportContext) -> Section | None:
    """Every run per head and setting, the spread over seeds, and the expected best of n."""
    runs = ctx.runs
    if runs.empty:
        return None
    spread = runs.groupby(GROUP).agg(
        Runs=("value", "size"),
        Failed=("failed", "sum"),
        Why=("fail_reason", _reasons),
        **{c.title(): ("value", c) for c in ("min", "median", "max")},
        SD=("value", "std"),
    )
    parts = [
        embed(
            figures.seed_strips(runs, ctx.palette, ctx.multi_encoder),
            "Every run's dev score per head and setting",
            f"Every run on dev ({int(runs['failed'].sum())} of {len(runs)} failed: ×, or ▼ "
            "without a score); grey dashed: the best constant.",
        ),
        _table(ctx, spread.reset_index(), "Dev scores over seeds (×100).", SPREAD_FORMATS),
    ]
    evp = stats.expected_validation_performance(ctx.inputs.table)
    if evp["n_seeds"].max() > 1:
        evp = evp[evp["n_seeds"].isin((1, 3, 5, 10))]
        sd = (100 * evp["expected_max_std"]).map(" ± {:.2f}".format)
        wide = evp.assign(cell=evp["expected_max"].map(points) + sd).pivot(
            index=GROUP, columns="n_seeds", values="cell"
        )
        seen = runs.groupby(GROUP)["value"].agg(Seeds="count", best="max")
        wide = seen[["Seeds"]].join(wide.rename(columns=lambda n: f"n = {n}").fillna(""))
        wide["Best seen"] = seen["best"]
        caption = "Expected best dev score (×100) of n seeds ± its SD (Dodge et al. 2019)."
        parts.append(_table(ctx, wide.reset_index(), caption, {"Best seen": points}))
    return Section("seed-spread", "Seed spread", "\n".join(parts))


def cost_section(ctx: ReportContext) -> Section | None:
    """Mean score against trainable parameters and training time, with the Pareto front."""
    per_run = ctx.inputs.table.drop_duplicates(subset=stats.RUN_KEYS)
    costs = per_run.groupby(GROUP)[list(figures.COST_AXES)].mean().reset_index()
    frame = ctx.scores.merge(costs, on=GROUP).dropna(subset=["mean"])
    if frame[list(figures.COST_AXES)].isna().all().all():
        return None
    flags = [f"pareto_{c}" for c in figures.COST_AXES]
    for column, flag in zip(figures.COST_AXES, flags, strict=True):
        frame[flag] = False
        for _, _, rows in split_by_size(frame, ["task", "encoder"]):
            frame.loc[rows.index, flag] = figures.pareto_mask(rows[column], rows["mean"])
    front = frame[frame[flags].any(axis=1)]
    names = dict(zip(["mean", *figures.COST_AXES, *flags], COST_NAMES, strict=True))
    table = front[[*GROUP, *names]].rename(columns=names)
    caption = "Heads no other of the task beats at equal or lower cost (dev, ×100)."
    parts = [
        embed(
            figures.cost_scatter(frame, ctx.palette, ctx.multi_encoder),
            "Mean dev score against trainable parameters and training time",
            "Mean dev score per head against its cost; black edge and dashed step: the Pareto "
            "front; grey dashed: the best constant.",
        ),
        _table(ctx, table, caption, COST_FORMATS),
    ]
    return Section("cost", "Cost vs score", "\n".join(parts))


def curves_section(ctx: ReportContext) -> Section | None:
    """Each head's main metric after each epoch (``history.csv``), per setting."""
    main = ctx.scores.drop_duplicates("task").set_index("task")["metric"]
    history = ctx.inputs.history
    history = history[history["metric"] == history["task"].map(main)] if len(history) else history
    if history.empty:
        return None
    split = "select" if (history["split"] == "select").any() else str(history["split"].iloc[0])
    history = stats.fill_axes(history[history["split"] == split], ("train_size",))
    history = history.assign(epoch=history["epoch"].astype(int) + 1)
    curve = history.groupby([*GROUP, "epoch"])["value"].agg(mean="mean", low="min", high="max")
    curve = curve.reset_index().assign(metric=lambda f: f["task"].map(main))
    wide = curve.pivot(index=GROUP, columns="epoch", values="mean").add_prefix("Epoch ")
    where = {"select": "the selection slice held out from train (not dev)"}.get(split, split)
    caption = f"Mean main metric on {where} after each epoch (×100)."
    parts = [
        embed(
            figures.curves(curve, ctx.palette, ctx.multi_encoder, "epoch"),
            f"Main metric on {split} after each epoch, per head and setting",
            f"Main metric on {where} after each epoch: line = mean over seeds, band = min–max.",
        ),
        _table(ctx, wide.reset_index(), caption, dict.fromkeys(wide.columns, points)),
    ]
    return Section("curves", "Learning curves by epoch", "\n".join(parts))


def training_size_section(ctx: ReportContext) -> Section | None:
    """Score against training size per head, and the best head at each size."""
    sized = sized_settings(ctx.scores)
    if not sized:
        return None
    keep = [tuple(map(str, k)) in sized for k in ctx.scores[CURVE_KEYS].itertuples(index=False)]
    sized_scores = ctx.scores[keep]
    best = sized_scores[sized_scores["best"]]
    found = [oriented(ctx.comparisons, head) for head in best["head_label"].unique()]
    mine = best[[*SETTING, "head_label", "beats_all"]].rename(columns={"head_label": "head_a"})
    vs = pd.concat(found or [ctx.comparisons.iloc[:0]]).merge(mine, on=[*SETTING, "head_a"])
    table = vs.sort_values("mean_b", ascending=False).drop_duplicates(SETTING)
    table = table[[*SETTING, *LEADER]].rename(columns=LEADER)
    curve = sized_scores[sized_scores["train_size"] != stats.WHOLE_SPLIT]
    parts = [
        embed(
            figures.curves(curve, ctx.palette, ctx.multi_encoder, "train_size", CURVE_KEYS),
            "Dev score against training size per head, one panel per learning curve",
            "Mean dev score and its 95% interval per training size; black edge: the best head "
            "at that size; grey dashed: the best constant.",
        ),
        _table(ctx, table, LEADER_CAPTION, LEADER_FORMATS),
    ]
    return Section("training-size", "Score by training size", "\n".join(parts))
