"""The answer first: heads × settings with intervals, one sentence, and every pair's verdict."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.context import ReportContext
from bench.report.figures import scores_plot
from bench.report.html import Section, details, embed, esc, frame_table
from bench.results import display
from bench.results.frames import setting_rows

LEGEND = (
    f"Mean ±95% interval ×100 over seeds and dev examples; bold: best mean; "
    f"{display.BEATS_ALL} better than every other head; {display.NO_HEAD_LEARNED} no head's "
    f"interval above the best constant; {display.CLIPPED} interval clipped at the metric's range."
)


def answer_section(ctx: ReportContext) -> Section | None:
    """The heads × settings table (id ``answer``), the takeaway and the scores plot."""
    scores = ctx.scores[ctx.scores["n"] > 0]
    if scores.empty:
        return None
    table = display.answer_frame(scores)
    best, grey = display.answer_marks(scores)
    classes = pd.DataFrame(np.where(best, "best", ""), columns=table.columns)
    classes.loc[grey.to_numpy(), :] = classes.loc[grey.to_numpy(), :] + " grey"
    plot = embed(
        scores_plot(scores, ctx.palette, ctx.multi_encoder),
        "every head's mean and 95% interval per setting",
        "Dots: means (hollow: interval not above the best constant; black edge: best mean); "
        "bars: 95% intervals; ◀ ▶: clipped at the metric's range; dashed: the best constant.",
    )
    body = (
        f'<p class="lead">{esc(display.takeaway(scores, ctx.comparisons))}</p>'
        + '<div class="answer"><div>'
        + frame_table(table, LEGEND, table_id="answer", classes=classes)
        + f"</div><div>{plot}</div></div>"
    )
    return Section("answer-section", "Which head?", body)


def verdicts_section(ctx: ReportContext) -> Section | None:
    """One heads × heads verdict matrix per setting, then every comparison with its p."""
    comparisons = ctx.comparisons
    if comparisons.empty:
        return None
    names = display.setting_names(ctx.scores)
    parts = []
    for key in display.settings_in_order(comparisons):
        matrix = display.verdict_matrix(comparisons, key)
        classes = matrix.map(lambda v: f"v-{v.split(' ')[0]}" if v else "")
        classes.iloc[:, 0] = ""
        rows = setting_rows(comparisons, dict(zip(display.SETTING, key, strict=True)))
        caption = (
            f"{names[key]}: row head vs column head, difference in points; "
            f"Holm within {rows['family'].iloc[0]} (m={int(rows['m'].max())})."
        )
        parts.append(frame_table(matrix, caption, classes=classes))
    every = frame_table(
        display.verdict_frame(comparisons, ctx.scores),
        "Each comparison once: the interval its verdict uses and Holm's p within its family.",
    )
    body = "".join(parts) + details(f"Every comparison ({len(comparisons)})", every)
    return Section("verdicts", "Verdicts, pair by pair", body)
