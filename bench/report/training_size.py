"""The learning-curve section: score against training size, and where the lead changes.

Present only when a setting (task × encoder × freezing strategy) ran at two or more
training sizes. The numbers are :func:`bench.results.curves.curve_points` (each point is
the report's cell of that size: mean over seeds, Student-t and bootstrap intervals) and
:func:`bench.results.curves.curve_leaders` (the leader per size; a change of lead is
called significant only where the new leader is significantly ahead at that size).
"""

from __future__ import annotations

import pandas as pd

import bench.report.figures as figures
from bench.report.budget import cell_budget
from bench.report.context import (
    ReportContext,
    constant_cell,
    points,
    pvalue,
    short_metric,
)
from bench.report.headline import headline_comparisons
from bench.report.html import Section, figure, paragraph, table
from bench.report.style import svg_data_uri, task_title
from bench.results import stats
from bench.results.curves import (
    change_verdict,
    changes_text,
    leaders_of,
    points_of,
    size_key,
    size_text,
    with_headline,
)
from bench.results.tables import interval_text

TITLE = "3. Score by training size (learning curves)"


def _where(ctx: ReportContext, r: pd.Series) -> str:
    return task_title(r["task"]) + (f" ({r['encoder']})" if ctx.multi_encoder else "")


def _headline_verdict(r: pd.Series, prefix: str) -> str:
    """The headline family's verdict of a curve comparison (``**``, ``n.s.``; ``–``: none)."""
    p = r.get(f"{prefix}_p_holm_all")
    if p is None or pd.isna(p):
        return "–"
    verdict = stats.significance_tier(float(p))
    if verdict != stats.NOT_SIGNIFICANT and not r[f"{prefix}_significant_all"]:
        verdict += " (behind)"
    return f"{pvalue(p)} ({verdict})"


def leader_rows(ctx: ReportContext, leaders: pd.DataFrame) -> list[list[object]]:
    """One row per curve and size: the leader, its margin, and a change of lead.

    Args:
        ctx: The report context.
        leaders: :func:`bench.results.curves.leaders_of` rows, with
            :func:`bench.results.curves.with_headline`'s columns where known.
    """
    rows = []
    for _, r in leaders.iterrows():
        change = ""
        if r["changed"]:
            change = f"{r['previous']} → {r['leader']}: {change_verdict(r)}"
            if pd.notna(r["change_p_holm"]):
                change += (
                    f", {points(r['change'])} points "
                    f"(simultaneous {interval_text(r['change_sim_low'], r['change_sim_high'])}), "
                    f"p (Holm, curve) = {pvalue(r['change_p_holm'])}"
                )
                if pd.notna(r.get("change_p_holm_all")):
                    change += f"; p (Holm, headline) = {_headline_verdict(r, 'change')}"
        rows.append(
            [
                _where(ctx, r),
                r["freeze_label"],
                size_text(r["train_size"]),
                short_metric(r["metric"]),
                r["leader"],
                f"{points(r['leader_mean'])} "
                f"({interval_text(r['leader_t_low'], r['leader_t_high'])})",
                constant_cell(r["leader_vs_constant"]),
                r["runner_up"] if isinstance(r["runner_up"], str) else "–",
                points(r["margin"]),
                interval_text(r["margin_sim_low"], r["margin_sim_high"]),
                int(r["margin_n_pairs"]),
                pvalue(r["margin_p_holm"]),
                r["margin_tier"],
                _headline_verdict(r, "margin"),
                change,
            ]
        )
    return rows


def point_rows(ctx: ReportContext, curve_points: pd.DataFrame) -> list[list[object]]:
    """One row per curve, head and size: mean, Student-t and bootstrap intervals, failures."""
    heads, freezes = ctx.palette.heads, ctx.palette.freezes
    ordered = sorted(
        (r for _, r in curve_points.iterrows()),
        key=lambda r: (
            str(r["task"]),
            str(r["encoder"]),
            freezes.index(r["freeze_label"]) if r["freeze_label"] in freezes else len(freezes),
            heads.index(r["head_label"]) if r["head_label"] in heads else len(heads),
            size_key(r["train_size"]),
        ),
    )
    return [
        [
            _where(ctx, r),
            r["freeze_label"],
            r["head_label"],
            size_text(r["train_size"]),
            f"{r['n']}/{r['n_runs']}",
            points(r["mean"]),
            interval_text(r["t_low"], r["t_high"]),
            f"{interval_text(r['ci_low'], r['ci_high'])} ({r['ci_method']})",
            int(r["n_failed"]),
        ]
        for r in ordered
    ]


def carve_note(ctx: ReportContext) -> str | None:
    """A warning when the selection slice of a curve changed with the training size."""
    moved = sorted(
        {
            f"{(c.get('cell') or {}).get('task')} {(c.get('cell') or {}).get('freeze_label')}"
            for c in ctx.inputs.cells
            if isinstance(c, dict)
            and (
                str((c.get("cell") or {}).get("task")),
                str((c.get("cell") or {}).get("encoder")),
                str((c.get("cell") or {}).get("freeze_label")),
            )
            in ctx.sized
            and cell_budget(c).carve == "last"
        }
    )
    if not moved:
        return None
    return (
        f"Selection slice not fixed ({', '.join(moved)}): these curves ran with "
        "selection.carve=last, so each training size selected its epoch and trial on a "
        "different held-out slice (the examples its subset left). selection.carve=first "
        "holds one slice out for every size."
    )


def training_size_section(ctx: ReportContext) -> Section | None:
    """Score against training size per head, the leader per size, every point.

    Returns:
        The section, or None when no setting ran at two or more training sizes.
    """
    curve_points = points_of(ctx.cells)
    if curve_points.empty:
        return None
    leaders = leaders_of(ctx.cells, ctx.comparisons)
    shown = headline_comparisons(ctx)
    leaders = with_headline(leaders, shown)
    m_all = int(shown["n_comparisons_all"].iloc[0]) if not shown.empty else 0
    parts = [
        paragraph(
            "Each head's dev score against the number of training examples, per task, "
            "encoder and freezing strategy: the mean over seeds with its 95% Student-t "
            "interval. The leading head (best mean) is named at every size; where it "
            "changes, the change is called significant only when the new leader is "
            "significantly ahead of the previous one at that size (paired t-test over "
            "seeds, Holm over every comparison of the curve: at each size, the leader "
            f"against each other head, α = {stats.ALPHA}). Here the lead "
            f"{changes_text(leaders)}."
        )
    ]
    note = carve_note(ctx)
    if note:
        parts.append(paragraph(note, "warning"))
    if (curve_points["train_size"] == stats.WHOLE_SPLIT).any():
        parts.append(
            paragraph(
                "Cells trained on the whole training split are in the tables, not on the "
                "plot's size axis.",
                "note",
            )
        )
    fig = figures.size_curves(curve_points, leaders, ctx.palette, ctx.multi_encoder)
    if fig is not None:
        parts.append(
            figure(
                svg_data_uri(fig),
                "Score against training size per head, one panel per learning curve",
                "Lines: mean dev score over seeds; bands: 95% t-interval; vertical lines: "
                "sizes where the leading head changes (solid: the new leader is significantly "
                "ahead there; dotted: not significant).",
            )
        )
    parts.append(
        table(
            [
                "Task",
                "Freeze",
                "Training examples",
                "Metric",
                "Leader",
                "Mean (95% t-interval)",
                "Beats the constant",
                "Runner-up",
                "Margin",
                "Margin, simultaneous 95% interval (Bonferroni over the curve's comparisons)",
                "Seeds",
                "p (Holm, curve)",
                "Tier",
                f"p (Holm, all {m_all} headline comparisons)",
                "Change of lead",
            ],
            leader_rows(ctx, leaders),
            caption="The leading head at every training size (dev, ×100). Margin: leader − "
            "runner-up, paired over seeds; p: paired t-test, Holm over the curve's "
            "comparisons (the curve's m: at each size, the leader against each other head); "
            f"p (Holm, all {m_all} headline comparisons): the same test corrected over every "
            "setting's comparisons together, the family of the verdict above, with its tier: "
            "the curve's family is smaller, so a lead can be significant in the curve and a "
            "tie in the verdict. Intervals: simultaneous 95% over the same comparisons as Holm's "
            "(Bonferroni, each a t-interval at 1 − 0.05/m for the curve's m), so one that "
            "excludes 0 is always significant after Holm; the per-comparison t-intervals are "
            "not shown here. Change of lead: the new leader − the previous one at that size "
            "(its simultaneous interval in brackets). "
            "Beats the constant: whether the leader's mean and its whole t-interval are above "
            "the best constant prediction ('no': no head beats a constant at that size).",
            numeric=[8, 10, 11, 13],
        )
    )
    parts.append(
        table(
            [
                "Task",
                "Freeze",
                "Head",
                "Training examples",
                "Runs with a score",
                "Mean",
                "95% t-interval",
                "95% bootstrap interval",
                "Failed",
            ],
            point_rows(ctx, curve_points),
            caption="Every point of every curve (dev, ×100): mean over seeds, Student-t and "
            "bootstrap (BCa where defined; the method in brackets) intervals of the mean.",
            numeric=[5, 8],
        )
    )
    return Section("training-size", TITLE, "\n".join(parts))
