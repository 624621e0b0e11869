"""The frames as people read them: one text for each number, shared by every output.

The report, the generated READMEs and ``python -m bench.results.tables`` show the same
:mod:`bench.results.frames` rows through these functions, so a comparison has one p-value,
one interval and one verdict wherever it appears.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from bench.axes.freezing import freeze_rank
from bench.axes.heads import head_order
from bench.results.frames import SETTING, oriented

#: Paper-style metric names.
METRIC_NAMES = {
    "accuracy": "acc",
    "f1": "F1",
    "mcc": "MCC",
    "pearson": "Pearson",
    "spearman": "Spearman",
}
TASK_NAMES = {
    "cola": "CoLA",
    "sst2": "SST-2",
    "mrpc": "MRPC",
    "stsb": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI",
    "qnli": "QNLI",
    "rte": "RTE",
    "wnli": "WNLI",
    "conll2003": "CoNLL-2003",
}
#: The mark of a head that is 'better' than every other head of its setting.
BEATS_ALL = "▲"
#: The mark of a setting where no head's interval is above the best constant.
NO_HEAD_LEARNED = "†"
#: The mark of an interval cut at the metric's range.
CLIPPED = "‡"


def _text(value: object) -> str:
    """A text cell of a frame read back from CSV (an empty one comes back as NaN)."""
    return value if isinstance(value, str) else ""


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
    """Each setting's short name: ``SST-2 frozen``, ``SST-2 frozen 500``.

    The encoder and the training size are named only where the frame has several of them.
    """
    keys = settings_in_order(frame)
    encoders = {k[1] for k in keys}
    sizes = Counter((k[0], k[1], k[2]) for k in keys)
    names = {}
    for task, encoder, freeze, size in keys:
        parts = [TASK_NAMES.get(str(task), str(task))]
        parts += [str(encoder)] if len(encoders) > 1 else []
        parts += [str(freeze)]
        parts += [f"{int(size):,}"] if sizes[(task, encoder, freeze)] > 1 else []
        names[(task, encoder, freeze, size)] = " ".join(parts)
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


def answer_frame(scores: pd.DataFrame, markdown: bool = False) -> pd.DataFrame:
    """The answer: one row per setting, one column per head (``score_text``).

    The best constant closes each row. A head 'better' than every other head is marked
    :data:`BEATS_ALL`, a setting where no head beats the constant :data:`NO_HEAD_LEARNED`;
    the best mean is bold in Markdown (elsewhere the caller styles it: :func:`answer_marks`).
    """
    names = setting_names(scores)
    heads = heads_in_order(scores)
    rows = []
    for key in settings_in_order(scores):
        part = scores[(scores[SETTING] == pd.Series(key, index=SETTING)).all(axis=1)]
        learned = bool(part["beats_constant"].any())
        row = {
            "Setting": names[key] + ("" if learned else f" {NO_HEAD_LEARNED}"),
            "Metric": METRIC_NAMES.get(str(part["metric"].iloc[0]), str(part["metric"].iloc[0])),
        }
        for head in heads:
            found = part[part["head_label"] == head]
            if found.empty:
                row[head] = ""
                continue
            r = found.iloc[0]
            text = score_text(r) + (f" {BEATS_ALL}" if r["beats_all"] else "")
            row[head] = f"**{text}**" if markdown and r["best"] else text
        row["Best constant"] = points(float(part["best_constant"].iloc[0]))
        rows.append(row)
    return pd.DataFrame(rows, columns=["Setting", "Metric", *heads, "Best constant"])


def answer_marks(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Where :func:`answer_frame` shows the best head, and its rows where none learned.

    Returns:
        A frame of :func:`answer_frame`'s shape (True: the best mean) and per row whether no
        head beats the best constant (for styling the HTML table).
    """
    heads = heads_in_order(scores)
    best, grey = [], []
    for key in settings_in_order(scores):
        part = scores[(scores[SETTING] == pd.Series(key, index=SETTING)).all(axis=1)]
        flags = dict(zip(part["head_label"], part["best"], strict=True))
        best.append([False, False, *[bool(flags.get(h, False)) for h in heads], False])
        grey.append(not bool(part["beats_constant"].any()))
    columns = ["Setting", "Metric", *heads, "Best constant"]
    return pd.DataFrame(best, columns=columns), pd.Series(grey, dtype=bool)


def interval_text(low: float, high: float) -> str:
    """``+2.9 to +9.6`` (×100)."""
    return f"{points(low, True)} to {points(high, True)}"


def verdict_frame(comparisons: pd.DataFrame, scores: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every comparison, one row each: 'head A is <verdict> than head B'.

    Columns: the difference, the interval its verdict uses, Holm's p within its family (of m
    tests) and the verdict; settings named as in the answer table of ``scores`` where given.
    """
    names = setting_names(comparisons if scores is None else scores)
    rows = []
    for _, r in comparisons.iterrows():
        key = tuple(r[k] for k in SETTING)
        rows.append(
            {
                "Setting": names[key],
                "Family": f"{r['family']} (m={int(r['m'])})" if r["m"] else str(r["family"]),
                "A": r["head_a"],
                "B": r["head_b"],
                "A − B": points(r["estimate"], True),
                "Interval": interval_text(r["low"], r["high"]) + f" ({r['shown']})"
                if math.isfinite(r["low"])
                else "–",
                "Holm p": p_text(r["p_holm"]),
                "Verdict": r["verdict"] + (f" ({r['reason']})" if _text(r["reason"]) else ""),
            }
        )
    return pd.DataFrame(
        rows, columns=["Setting", "Family", "A", "B", "A − B", "Interval", "Holm p", "Verdict"]
    )


def verdict_matrix(comparisons: pd.DataFrame, setting: tuple) -> pd.DataFrame:
    """One setting's verdicts as a heads × heads matrix, the diagonal empty.

    Cell (row A, column B) reads 'A is <verdict> than B', with A − B in points.
    """
    part = comparisons[(comparisons[SETTING] == pd.Series(setting, index=SETTING)).all(axis=1)]
    heads = heads_in_order(pd.concat([part["head_a"], part["head_b"]]).to_frame("head_label"))
    cells = np.full((len(heads), len(heads)), "", dtype=object)
    for i, a in enumerate(heads):
        for j, b in enumerate(heads):
            if i != j:
                row = oriented(part, a, b)
                if not row.empty:
                    r = row.iloc[0]
                    cells[i, j] = f"{r['verdict']} {points(r['estimate'], True)}"
    return pd.DataFrame({"A \\ B": heads, **{b: cells[:, j] for j, b in enumerate(heads)}})


def takeaway(scores: pd.DataFrame, comparisons: pd.DataFrame) -> str:
    """One line (at most 40 words) filled from the frames.

    Which heads lead most often, where one beats all, how many comparisons each verdict got
    and the largest decided difference.
    """
    if scores.empty:
        return "No scored runs."
    best = scores[scores["best"]]
    leads = Counter(best["head_label"]).most_common()
    top = ", ".join(f"{h} {n}" for h, n in leads[:3])
    settings = len(settings_in_order(scores))
    winners = scores[scores["beats_all"]]
    names = setting_names(scores)
    won = "; ".join(
        f"{r['head_label']} in {names[tuple(r[k] for k in SETTING)]}"
        for _, r in winners.head(2).iterrows()
    )
    counts = Counter(comparisons["verdict"])
    decided = counts["better"] + counts["worse"]
    tally = (
        f"{decided} decided, {counts['equivalent']} equivalent, "
        f"{counts['inconclusive']} inconclusive"
    )
    if counts["not comparable"]:
        tally += f", {counts['not comparable']} not comparable"
    decided = comparisons[comparisons["verdict"].isin(["better", "worse"])]
    largest = ""
    if not decided.empty:
        r = decided.loc[decided["estimate"].abs().idxmax()]
        a, b = (r["head_a"], r["head_b"]) if r["estimate"] > 0 else (r["head_b"], r["head_a"])
        setting = names[tuple(r[k] for k in SETTING)]
        largest = f" Largest: {a} over {b}, {setting}, {points(abs(r['estimate']), True)}."
    return (
        f"Best mean (of {settings} settings): {top}. "
        + (
            f"Beats every other head: {won}{' …' if len(winners) > 2 else ''}. "
            if won
            else "No head beats every other head anywhere. "
        )
        + f"{len(comparisons)} pairs: {tally}."
        + largest
    )
