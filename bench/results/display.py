"""The frames as people read them: one text per number for the report, READMEs and tables."""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from itertools import compress

import pandas as pd

from bench.axes.freezing import freeze_rank
from bench.axes.heads import head_order
from bench.data.tasks import TASKS
from bench.results.frames import SETTING, oriented, setting_rows

#: Paper-style metric names.
METRIC_NAMES = dict(accuracy="acc", f1="F1", mcc="MCC", pearson="Pearson", spearman="Spearman")
TASK_NAMES = {**{name: spec.glue_dir for name, spec in TASKS.items()}, "conll2003": "CoNLL-2003"}
#: Marks: a head 'better' than every other head; no head above the constant; a clipped interval.
BEATS_ALL, NO_HEAD_LEARNED, CLIPPED = "▲", "†", "‡"
#: What Markdown may read as markup: its inline marks, a table's ``|``, ``_`` not inside a word.
MARKUP = re.compile(r"[\\`*\[\]|~]|(?<![^\W_])_|_(?![^\W_])")


def markdown_text(text: object) -> str:
    """``text`` as Markdown shows it, as text: in a paragraph, a table cell or an HTML comment.

    ``<>&`` become HTML entities, Markdown's marks get a backslash (an ``_`` between letters
    or digits emphasises nothing and is left as it is) and a line break becomes a space.
    """
    text = html.escape(" ".join(str(text).splitlines()), quote=False)
    return MARKUP.sub(r"\\\g<0>", text)


def markdown_table(frame: pd.DataFrame, bold: pd.DataFrame | None = None) -> str:
    """A frame as a Markdown table, every header and cell escaped; ``bold``'s cells in ``**``."""
    cells = frame.map(markdown_text)
    if bold is not None:
        cells = cells.mask(bold & (cells != ""), "**" + cells + "**")
    cells.columns = [markdown_text(c) for c in frame.columns]
    return cells.to_markdown(index=False, disable_numparse=True)


def points(value: float, signed: bool = False) -> str:
    """A score on the metric's scale as points ×100 with one decimal (``–``: undefined)."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def p_text(p: float) -> str:
    """A p-value with two significant digits (``–``: no test)."""
    return "–" if p is None or not math.isfinite(p) else f"{p:.2g}"


def settings_in_order(frame: pd.DataFrame) -> list[tuple]:
    """The frame's settings: task, encoder, least trained freeze first, size ascending."""
    keys = {tuple(r) for r in frame[SETTING].itertuples(index=False)}
    return sorted(keys, key=lambda k: (str(k[0]), str(k[1]), freeze_rank(str(k[2])), float(k[3])))


def setting_names(frame: pd.DataFrame) -> dict[tuple, str]:
    """``SST-2 frozen``, ``SST-2 minilm frozen 500``: encoder and size where there are several."""
    keys = settings_in_order(frame)
    encoders, sizes = {k[1] for k in keys}, Counter(k[:3] for k in keys)
    names = {}
    for task, encoder, freeze, size in keys:
        named = [TASK_NAMES.get(str(task), str(task)), str(encoder), str(freeze), f"{int(size):,}"]
        shown = [True, len(encoders) > 1, True, sizes[(task, encoder, freeze)] > 1]
        names[(task, encoder, freeze, size)] = " ".join(compress(named, shown))
    return names


def heads_in_order(frame: pd.DataFrame, column: str = "head_label") -> list[str]:
    """The frame's heads in the registry's order (others after, by name)."""
    rank = {h: i for i, h in enumerate(head_order())}
    return sorted(set(frame[column]), key=lambda h: (rank.get(h, len(rank)), h))


def score_text(row: pd.Series) -> str:
    """``79.3±2.5``: the mean and the half-width of its 95% interval, ×100."""
    if not math.isfinite(row["mean"]):
        return "–"
    if not math.isfinite(row["se"]):
        return points(row["mean"])
    half = max(row["high"] - row["mean"], row["mean"] - row["low"])
    return f"{points(row['mean'])}±{100 * half:.1f}" + (CLIPPED if row["clipped"] else "")


def answer_frame(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per setting, one column per head, the constant last (:func:`answer_marks`: bold)."""
    names, heads = setting_names(scores), heads_in_order(scores)
    rows = []
    for key in settings_in_order(scores):
        part = setting_rows(scores, pd.Series(key, index=SETTING))
        metric = str(part["metric"].iloc[0])
        learned = "" if part["beats_constant"].any() else f" {NO_HEAD_LEARNED}"
        row = {"Setting": names[key] + learned, "Metric": METRIC_NAMES.get(metric, metric)}
        for _, r in part.iterrows():
            row[r["head_label"]] = score_text(r) + (f" {BEATS_ALL}" if r["beats_all"] else "")
        rows.append({**row, "Best constant": points(float(part["best_constant"].iloc[0]))})
    columns = ["Setting", "Metric", *heads, "Best constant"]
    return pd.DataFrame(rows, columns=columns).fillna({h: "" for h in heads})


def answer_marks(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """For styling :func:`answer_frame`: its shape, True at the best mean; rows none learned."""
    heads = heads_in_order(scores)
    best, grey = [], []
    for key in settings_in_order(scores):
        part = setting_rows(scores, pd.Series(key, index=SETTING))
        flags = dict(zip(part["head_label"], part["best"], strict=True))
        best.append([False, False, *[bool(flags.get(h, False)) for h in heads], False])
        grey.append(not bool(part["beats_constant"].any()))
    columns = ["Setting", "Metric", *heads, "Best constant"]
    return pd.DataFrame(best, columns=columns), pd.Series(grey, dtype=bool)


def verdict_frame(comparisons: pd.DataFrame, scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every comparison, one row each: 'head A is <verdict> than head B'."""
    names = setting_names(comparisons if scores is None else scores)
    rows = []
    for _, r in comparisons.iterrows():
        interval = f"{points(r['low'], True)} to {points(r['high'], True)} ({r['shown']})"
        reason = f" ({r['reason']})" if isinstance(r["reason"], str) and r["reason"] else ""
        rows.append(
            {
                "Setting": names[tuple(r[k] for k in SETTING)],
                "Family": f"{r['family']} (m={int(r['m'])})" if r["m"] else str(r["family"]),
                "A": r["head_a"],
                "B": r["head_b"],
                "A − B": points(r["estimate"], True),
                "Interval": interval if math.isfinite(r["low"]) else "–",
                "Holm p": p_text(r["p_holm"]),
                "Verdict": r["verdict"] + reason,
            }
        )
    columns = ["Setting", "Family", "A", "B", "A − B", "Interval", "Holm p", "Verdict"]
    return pd.DataFrame(rows, columns=columns)


def verdict_matrix(comparisons: pd.DataFrame, setting: tuple) -> pd.DataFrame:
    """One setting's heads × heads matrix: row A, column B reads 'A is <verdict> than B', A − B."""
    part = setting_rows(comparisons, pd.Series(setting, index=SETTING))
    heads = heads_in_order(pd.concat([part["head_a"], part["head_b"]]).to_frame("head_label"))
    both = pd.concat([part.iloc[:0], *(oriented(part, h) for h in heads)])
    text = [
        f"{v} {points(e, True)}" for v, e in zip(both["verdict"], both["estimate"], strict=True)
    ]
    matrix = both.assign(text=text).pivot(index="head_a", columns="head_b", values="text")
    matrix = matrix.reindex(index=heads, columns=heads).fillna("")
    return matrix.rename_axis(index="A \\ B", columns=None).reset_index()


def takeaway(scores: pd.DataFrame, comparisons: pd.DataFrame) -> str:
    """One line: the heads that lead most, where one beats all, the verdicts, the largest."""
    if scores.empty:
        return "No scored runs."
    names = setting_names(scores)
    top = ", ".join(
        f"{h} {n}" for h, n in Counter(scores[scores["best"]]["head_label"]).most_common(3)
    )
    winners = scores[scores["beats_all"]]
    won = "; ".join(
        f"{r['head_label']} in {names[tuple(r[k] for k in SETTING)]}"
        for _, r in winners.head(2).iterrows()
    )
    count = Counter(comparisons["verdict"])
    apart = f", {count['not comparable']} not comparable" if count["not comparable"] else ""
    more = " …" if len(winners) > 2 else ""
    beats = (
        f"Beats every other head: {won}{more}. "
        if won
        else "No head beats every other head anywhere. "
    )
    text = (
        f"Best mean (of {len(names)} setting{'s' if len(names) > 1 else ''}): {top}. {beats}"
        f"{len(comparisons)} pairs: {count['better'] + count['worse']} decided, "
        f"{count['equivalent']} equivalent, {count['inconclusive']} inconclusive{apart}."
    )
    decided = comparisons[comparisons["verdict"].isin(["better", "worse"])]
    if decided.empty:
        return text
    r = decided.loc[decided["estimate"].abs().idxmax()]
    a, b = (r["head_a"], r["head_b"]) if r["estimate"] > 0 else (r["head_b"], r["head_a"])
    setting = names[tuple(r[k] for k in SETTING)]
    return f"{text} Largest: {a} over {b}, {setting}, {points(abs(r['estimate']), True)}."
