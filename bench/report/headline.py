"""Section 1: which head wins each task × encoder × freezing setting, by how much, how sure."""

from __future__ import annotations

import numpy as np
import pandas as pd

import bench.report.figures as figures
from bench.report.context import ALPHA, ReportContext, points, pvalue, short_metric
from bench.report.html import Section, bullet_list, figure, paragraph, table
from bench.report.style import svg_data_uri, task_title

SETTING = ["task", "encoder", "freeze_label"]
HEADLINE_COLUMNS = [
    *SETTING,
    "metric",
    "n_heads",
    "winner",
    "winner_mean",
    "runner_up",
    "runner_mean",
    "margin",
    "ci_low",
    "ci_high",
    "n_pairs",
    "p",
    "p_holm",
    "p_min",
    "n_comparisons",
    "significant",
    "reason",
]


def _pair(comparisons: pd.DataFrame, keys: tuple, winner: str, runner: str) -> pd.Series | None:
    """The comparison row of winner vs runner-up, oriented as winner − runner-up."""
    mask = np.ones(len(comparisons), dtype=bool)
    for column, value in zip(SETTING, keys, strict=True):
        mask &= (comparisons[column] == value).to_numpy()
    rows = comparisons[mask]
    hit = rows[(rows["head_a"] == winner) & (rows["head_b"] == runner)]
    if not hit.empty:
        return hit.iloc[0]
    hit = rows[(rows["head_a"] == runner) & (rows["head_b"] == winner)]
    if hit.empty:
        return None
    r = hit.iloc[0].copy()
    r["diff"], r["ci_low"], r["ci_high"] = -r["diff"], -r["ci_high"], -r["ci_low"]
    return r


def headline_frame(ctx: ReportContext) -> pd.DataFrame:
    """One row per setting: the best head by mean main metric and its paired margin.

    The margin is the mean paired difference (winner − runner-up) over the seeds both
    ran, with its bootstrap CI and the Holm-adjusted Wilcoxon p-value of
    :func:`bench.results.stats.compare_heads`.
    """
    rows = []
    for keys, group in ctx.cells.groupby(SETTING, sort=True):
        ranked = group[group["n"] > 0].sort_values(["mean", "head_label"], ascending=[False, True])
        if ranked.empty:
            continue
        best = ranked.iloc[0]
        row = dict(zip(SETTING, keys, strict=True))
        row.update(
            metric=best["metric"],
            n_heads=len(ranked),
            winner=best["head_label"],
            winner_mean=best["mean"],
            runner_up=None,
            runner_mean=np.nan,
            margin=np.nan,
            ci_low=np.nan,
            ci_high=np.nan,
            n_pairs=0,
            p=np.nan,
            p_holm=np.nan,
            p_min=np.nan,
            n_comparisons=0,
            significant=False,
            reason="only one head",
        )
        if len(ranked) > 1:
            runner = ranked.iloc[1]
            row.update(runner_up=runner["head_label"], runner_mean=runner["mean"])
            pair = _pair(ctx.comparisons, keys, best["head_label"], runner["head_label"])
            if pair is None or pair["n_pairs"] == 0:
                row["reason"] = "no seed that both heads completed"
            else:
                row.update(
                    margin=pair["diff"],
                    ci_low=pair["ci_low"],
                    ci_high=pair["ci_high"],
                    n_pairs=int(pair["n_pairs"]),
                    p=pair["p"],
                    p_holm=pair["p_holm"],
                    p_min=pair["p_min"],
                    n_comparisons=int(pair["n_comparisons"]),
                    reason=pair["reason"],
                )
                row["significant"] = bool(pd.notna(row["p_holm"]) and row["p_holm"] < ALPHA)
        rows.append(row)
    return pd.DataFrame(rows, columns=HEADLINE_COLUMNS)


def headline_sentence(r: pd.Series, multi_encoder: bool) -> str:
    """The plain-words verdict of one setting."""
    where = task_title(r["task"]) + (f" ({r['encoder']})" if multi_encoder else "")
    where += f", {r['freeze_label']}"
    unit = short_metric(r["metric"])
    if not isinstance(r["runner_up"], str):
        return f"{where}: {r['winner']} scores {points(r['winner_mean'])} {unit} ({r['reason']})."
    if pd.isna(r["margin"]) or r["n_pairs"] < 2:
        gap = r["winner_mean"] - r["runner_mean"]
        return (
            f"{where}: {r['winner']} is ahead of {r['runner_up']} by {points(gap)} {unit} points "
            f"on {int(r['n_pairs'])} paired seed{'s' if r['n_pairs'] != 1 else ''}: too few for a "
            "CI or a test."
        )
    text = (
        f"{where}: {r['winner']} beats {r['runner_up']} by {points(r['margin'])} {unit} points "
        f"(95% CI {points(r['ci_low'])} to {points(r['ci_high'])}, "
        f"{r['n_pairs']} paired seeds; Holm-adjusted p = {pvalue(r['p_holm'])}"
        f" over {r['n_comparisons']} head pair{'s' if r['n_comparisons'] != 1 else ''})"
    )
    if r["significant"]:
        return text + f": significant at α = {ALPHA}."
    if pd.notna(r["p_min"]) and r["p_min"] >= ALPHA:
        floor = pvalue(r["p_min"])
        return text + f": not significant (the smallest p {r['n_pairs']} seeds allow is {floor})."
    if r["reason"]:
        return text + f": no test ({r['reason']})."
    return text + ": not significant."


def at_a_glance(frame: pd.DataFrame) -> str:
    """One sentence: which head wins most settings, and how many wins are significant."""
    wins = frame["winner"].value_counts()
    n = len(frame)
    significant = int(frame["significant"].sum())
    ranking = "; ".join(f"{head} {count}" for head, count in wins.items())
    text = f"At a glance: best head by mean in {n} settings — {ranking}. "
    if significant:
        text += f"{significant} of these wins are significant after correction."
    else:
        text += "None of the wins is significant after correction"
        p_min = frame["p_min"].dropna()
        if not p_min.empty and (p_min >= ALPHA).all():
            text += (
                f" (with {int(frame['n_pairs'].max())} seeds the exact test cannot reach "
                f"p < {ALPHA}: the ranking is a tendency, not evidence)"
            )
        text += "."
    return text


def wins_table(frame: pd.DataFrame, heads: list[str], ran: dict[str, int]) -> str:
    """Per head: settings won, won significantly, settings it ran in, mean winning margin."""
    rows = []
    for head in heads:
        won = frame[frame["winner"] == head]
        rows.append(
            [
                head,
                len(won),
                int(won["significant"].sum()),
                ran.get(head, 0),
                points(won["margin"].mean()) if won["margin"].notna().any() else "",
            ]
        )
    return table(
        ["Head", "Settings won", "Won significantly", "Settings it ran in", "Mean margin (points)"],
        rows,
        caption="How often each head is the best (by mean over seeds) in a task × encoder × "
        "freezing setting.",
        numeric=[1, 2, 3, 4],
    )


def headline_section(ctx: ReportContext) -> Section:
    """Build section 1."""
    frame = headline_frame(ctx)
    if frame.empty:
        return Section(
            "headline", "1. Headline: which head wins?", paragraph("No successful runs.")
        )
    parts = [
        paragraph(at_a_glance(frame), "lead"),
        paragraph(
            "For every task × encoder × freezing setting: the head with the best mean main "
            "metric on the dev split, its margin over the runner-up (mean of the per-seed "
            "differences, 95% bootstrap CI), and a two-sided Wilcoxon signed-rank test paired by "
            f"seed, Holm-corrected over all head pairs of the setting (α = {ALPHA})."
        ),
        wins_table(
            frame,
            [h for h in ctx.palette.heads if h in set(ctx.cells["head_label"])],
            ctx.cells[ctx.cells["n"] > 0].groupby("head_label").size().to_dict(),
        ),
        bullet_list([headline_sentence(r, ctx.multi_encoder) for _, r in frame.iterrows()]),
    ]
    rows = [
        [
            task_title(r["task"]),
            r["encoder"],
            r["freeze_label"],
            short_metric(r["metric"]),
            r["winner"],
            points(r["winner_mean"]),
            r["runner_up"] or "",
            points(r["runner_mean"]),
            points(r["margin"]),
            f"{points(r['ci_low'])} to {points(r['ci_high'])}" if pd.notna(r["ci_low"]) else "",
            r["n_pairs"],
            pvalue(r["p"]),
            pvalue(r["p_holm"]),
            "yes" if r["significant"] else "no",
        ]
        for _, r in frame.iterrows()
    ]
    parts.append(
        table(
            [
                "Task",
                "Encoder",
                "Freeze",
                "Metric",
                "Winner",
                "Winner mean",
                "Runner-up",
                "Runner-up mean",
                "Margin",
                "95% CI",
                "Seeds",
                "p",
                "p (Holm)",
                "Significant",
            ],
            rows,
            caption="Winner and runner-up per setting (dev, ×100).",
            numeric=[5, 7, 8, 9, 10, 11, 12],
            css="headline",
        )
    )
    fig = figures.margin_forest(frame, ctx.palette, ctx.multi_encoder)
    if fig is not None:
        parts.append(
            figure(
                svg_data_uri(fig),
                "Forest plot of the winning head's margin per setting",
                "Margin of the best head over the runner-up with its 95% CI; a filled dot "
                "is significant after Holm's correction, a hollow one is not.",
            )
        )
    return Section("headline", "1. Headline: which head wins?", "\n".join(parts))
