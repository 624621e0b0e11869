"""The report's self-check section, and its sentence in the README's Findings.

Present only when the results directory holds a self-check record, ``selfcheck.json``
(``python -m bench.run.selfcheck results/<experiment> --out DIR`` writes
``DIR/selfcheck.json``; copied beside the results it is committed with them). It shows the
command and slice, when and at which commit the check ran and on which CPU kernels, each
re-trained cell's committed value beside today's, each head's committed mean and 95%
intervals beside its mean with today's values, and the verdict. The numbers are the
record's (:mod:`bench.results.reproduction` computed them); the section recomputes the
committed side from the results beside it and warns where they no longer agree
(:func:`bench.results.selfcheck_record.stale_lines`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from bench.report.context import ReportContext, points, short_metric
from bench.report.html import Section, bullet_list, paragraph, pre, table
from bench.report.style import task_title
from bench.results.reproduction import (
    SCORE_ATOL,
    cell_name,
    changed_text,
    seed_text,
    setting_name,
    within_text,
)
from bench.results.selfcheck_record import (
    RECORD_FILE,
    command,
    devices_text,
    is_identical,
    predictions_identical,
    stale_lines,
    summarize,
    version_changes,
)

TITLE = "9. Self-check: committed cells re-trained with today's code"
CELL_HEADER = ["cell", "metric", "committed", "today", "Δ", "predictions changed"]
HEAD_HEADER = [
    "setting",
    "metric",
    "seeds",
    "committed mean",
    "95% t-interval",
    "95% bootstrap interval",
    "re-run seeds",
    "their mean: committed → today",
    "today's mean (shift)",
    "within",
]
#: The libraries named beside "as committed" (the ones that compute the numbers).
_SHOWN_LIBRARIES = ("torch", "transformers", "lightning", "numpy")


def _value(value: Any) -> float:
    """A record's number as a float (None, the JSON of NaN, becomes NaN)."""
    return math.nan if value is None else float(value)


def signed_points(value: Any) -> str:
    """A difference of [0, 1] scores in points ×100 with its sign (``+0.57``); ``—`` if NaN.

    A move too small for two decimals but above float noise (a cell that is not identical
    moved by more than 1e-6, 1e-4 points) is written with two significant digits
    (``+3.1e-04``), so that it never reads ``+0.00``.
    """
    x = 100 * _value(value)
    if math.isnan(x):
        return "—"
    return f"{x:+.1e}" if 1e-4 <= abs(x) < 0.005 else f"{x:+.2f}"


def _span(low: Any, high: Any) -> str:
    """An interval in points ×100 with two decimals (``70.78 to 72.45``); ``—`` if undefined."""
    lo, hi = _value(low), _value(high)
    return "—" if math.isnan(lo) or math.isnan(hi) else f"{points(lo, 2)} to {points(hi, 2)}"


def _delta_text(cell: dict[str, Any]) -> str:
    """A cell's Δ: ``identical`` (score and predictions), ``same score`` or the move."""
    if not cell["identical"]:
        return signed_points(cell["diff"])
    return "identical" if is_identical(cell) else "same score"


def cell_rows(record: dict[str, Any]) -> list[list[object]]:
    """One row per re-trained cell: committed and today's value (×100), Δ, predictions changed."""
    rows: list[list[object]] = []
    for cell in record["cells"]:
        ok = cell["status"] == "ok"
        rows.append(
            [
                cell_name(cell),
                short_metric(cell["metric"]),
                points(_value(cell["committed"]), 2),
                points(_value(cell["today"]), 2) if ok else str(cell["status"]),
                _delta_text(cell),
                changed_text(
                    _value(cell["changed"]),
                    _value(cell["n_predictions"]),
                    _value(cell["score_diff"]),
                ),
            ]
        )
    return rows


def head_rows(record: dict[str, Any]) -> list[list[object]]:
    """One row per head and setting: committed mean and intervals beside today's mean."""
    rows: list[list[object]] = []
    for s in record["settings"]:
        bootstrap = (
            "—"
            if s["ci_method"] == "none"
            else f"{_span(s['ci_low'], s['ci_high'])} ({s['ci_method']})"
        )
        rows.append(
            [
                setting_name(s),
                short_metric(s["metric"]),
                int(s["n"]),
                points(_value(s["committed_mean"]), 2),
                _span(s["t_low"], s["t_high"]),
                bootstrap,
                seed_text([int(x) for x in s["seeds"]]),
                f"{points(_value(s['slice_committed_mean']), 2)} → "
                f"{points(_value(s['slice_today_mean']), 2)}",
                f"{points(_value(s['today_mean']), 2)} ({signed_points(s['shift'])})",
                within_text(s),
            ]
        )
    return rows


def provenance_rows(record: dict[str, Any]) -> list[list[object]]:
    """What ran, when, at which commit and on which CPU kernels."""
    chosen = record["slice"]
    today = record["today"]
    git = today.get("git") or {}
    hardware = today.get("hardware") or {}
    timing = record.get("timing") or {}
    changed = version_changes(record)
    versions = today.get("versions") or {}
    libraries = ", ".join(f"{k} {v}" for k, v in versions.items() if k in _SHOWN_LIBRARIES)
    built = float(timing.get("cache_build_s") or 0.0)
    time_text = f"{float(timing.get('retrain_s') or 0.0):.0f} s re-training"
    if built:
        time_text += f" ({built:.0f} s of it building the hidden-state cache)"
    if timing.get("total_s") is not None:
        time_text += f"; {float(timing['total_s']):.0f} s in all"
    machine = ", ".join(
        f"{label} {hardware[key]}"
        for key, label in (("cpu_count", "cores:"), ("torch_threads", "torch threads:"))
        if hardware.get(key) is not None
    )
    return [
        ["Command", command(record)],
        ["Slice", f"{chosen.get('name')}: {chosen.get('description', '')}".rstrip(": ")],
        ["Finished at", record["finished_at"]],
        [
            "Code today",
            str(git.get("commit") or "not recorded")
            + (" (with uncommitted changes)" if git.get("dirty") else ""),
        ],
        [
            "Code of the committed cells",
            ", ".join(str(c) for c in (record["committed"].get("git") or [])) or "not recorded",
        ],
        [
            "Library versions",
            ("as committed" if not changed else "changed: " + "; ".join(changed))
            + (f" ({libraries})" if libraries else ""),
        ],
        [
            "Devices",
            f"{devices_text(record)}; CPU kernels today "
            f"{hardware.get('cpu_capability') or 'not recorded'} on "
            f"{hardware.get('cpu_model') or 'an unnamed CPU'}"
            + (f" ({machine})" if machine else ""),
        ],
        [
            "Hidden-state cache",
            "reused the configured cache"
            if record.get("cache") == "reused"
            else "built afresh by today's code",
        ],
        ["Time", time_text],
    ]


def selfcheck_section(ctx: ReportContext) -> Section | None:
    """The self-check record beside the results: what ran, cell by cell, head by head.

    Returns:
        The section, or None when the results directory has no ``selfcheck.json``.
    """
    record = ctx.inputs.selfcheck
    if record is None:
        return None
    split = record["split"]
    parts = [
        paragraph(
            f"The results directory holds the record of a self-check ({RECORD_FILE}): a fixed "
            "slice of the committed cells was trained again with the code of the commit below, "
            "by the sweep's own path (each cell's planned config with its selected trial's "
            f"values), and compared with the committed results on the {split} split's main "
            "metric. A cell is identical when its value is within "
            f"{float(record.get('identical_atol') or 0):g} of the committed one and none of "
            "its predictions changed ('same score' when only the value is); a head "
            "reproduces when its committed mean, with the re-run seeds' values from today, "
            "stays within the committed intervals (docs/protocol.md, 'Re-checking the "
            "committed numbers').",
            "note",
        ),
        paragraph(
            "Verdict: " + check_text(record, code=False),
            "lead"
            if record["ok"] and summarize(record).n_identical == len(record["cells"])
            else "warning",
        ),
        table(["", ""], provenance_rows(record), caption="What ran, when, and where."),
    ]
    stale = stale_lines(record, ctx.inputs.table)
    if stale:
        parts.append(
            paragraph(
                "The committed results have changed since this check ran: its 'committed' "
                "columns are the values it compared with, not the ones above. Re-run it "
                f"({command(record)} --out DIR) and copy DIR/{RECORD_FILE} here.",
                "warning",
            )
        )
        parts.append(bullet_list(stale))
    if record.get("problems"):
        parts.append(pre("\n".join(str(p) for p in record["problems"])))
    parts.append(
        table(
            CELL_HEADER,
            cell_rows(record),
            caption=f"Each re-trained cell's {split} main metric (×100), committed and today; "
            "Δ in points; predictions changed: examples whose predicted label differs (a "
            f"regression score: by more than {SCORE_ATOL:g}).",
            numeric=[2, 3, 4, 5],
            row_classes=["" if c["status"] == "ok" else "failed" for c in record["cells"]],
        )
    )
    parts.append(
        table(
            HEAD_HEADER,
            head_rows(record),
            caption="Each head's committed mean over its seeds with its 95% intervals (×100), "
            "and today's mean: the committed mean with the re-run seeds' values from today. "
            "The re-run seeds' own mean is shown for information: a few seeds' mean is "
            "noisier than the interval of all seeds' mean describes.",
            numeric=[2, 3, 4, 5, 6, 7, 8],
            row_classes=["" if s["reproduces"] else "failed" for s in record["settings"]],
        )
    )
    return Section("selfcheck", TITLE, "\n".join(parts))


def _where(row: dict[str, Any], code: bool = True) -> str:
    """``SST-2 frozen `last4_concat``` (a setting), with ``seed 3`` for a cell.

    Args:
        row: A record's ``cells`` or ``settings`` row.
        code: Put the head label in backticks (Markdown); plain for the HTML report.
    """
    head = f"`{row['head_label']}`" if code else str(row["head_label"])
    text = f"{task_title(row['task'])} {row['freeze_label']} {head}"
    return text + (f" seed {int(row['seed'])}" if "seed" in row else "")


def _predictions(cell: dict[str, Any]) -> str:
    """``57 of 872 predictions changed``; empty when the predictions were not compared."""
    changed, n = _value(cell["changed"]), _value(cell["n_predictions"])
    if math.isnan(changed) or math.isnan(n):
        return ""
    return f"{int(changed)} of {int(n)} predictions changed"


def _same_score_text(cells: list[dict[str, Any]], code: bool) -> str:
    """The cells with the committed score but not (or not known to be) the same predictions."""
    changed = [c for c in cells if predictions_identical(c) is False]
    unknown = len(cells) - len(changed)
    parts = []
    if len(changed) == 1:
        parts.append(
            f"1 with the same score but {_predictions(changed[0])} ({_where(changed[0], code)})"
        )
    elif changed:
        most = max(changed, key=lambda c: _value(c["changed"]))
        parts.append(
            f"{len(changed)} with the same score but changed predictions (most: "
            f"{_where(most, code)}, {_predictions(most)})"
        )
    if unknown:
        parts.append(f"{unknown} with the same score (predictions not compared)")
    return "".join(f", {p}" for p in parts)


def _moves_text(values: list[float]) -> str:
    """``+5.05, +5.78 and -9.03``: moves in points."""
    named = [signed_points(v) for v in values]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"


def check_text(record: dict[str, Any], code: bool = True) -> str:
    """What a self-check found, cell by cell and head by head, in words.

    A cell counts as identical only when its score and every prediction are the committed
    ones (:func:`bench.results.selfcheck_record.is_identical`); one with the same score and
    changed predictions is said apart. The largest move of a single cell is named with its
    cell. Where every head's mean stays within its intervals, the text says how little a
    cell's move weighs in that test: a head's mean today takes today's values for its few
    re-run seeds among all its seeds, so the setting of the largest move shows its re-run
    seeds' moves beside its mean's.

    Args:
        record: A checked self-check record.
        code: Head labels in backticks (Markdown, the Findings); plain for the HTML report.

    Returns:
        The text, from ``all 6 re-trained cells identical`` or ``3 of 24 re-trained cells
        identical`` on.
    """
    s = summarize(record)
    if s.n_identical == s.n_cells:
        text = f"all {s.n_cells} re-trained cells identical (score and predictions)"
    else:
        text = f"{s.n_identical} of {s.n_cells} re-trained cells identical (score and predictions)"
    text += _same_score_text(s.same_score, code)
    if s.n_failed:
        text += f", {s.n_failed} failed"
    if s.largest is not None:
        big = s.largest
        changed = _predictions(big)
        text += (
            f", the largest move {signed_points(big['diff'])} {short_metric(big['metric'])} "
            f"points ({_where(big, code)}" + (f", {changed}" if changed else "") + ")"
        )
    if s.outside:
        named = ", ".join(f"{_where(o, code)} ({within_text(o)})" for o in s.outside)
        return text + (
            f"; NOT REPRODUCED: {s.n_settings - len(s.outside)} of {s.n_settings} heads' means "
            f"stay within their committed {s.intervals} intervals, not {named}."
        )
    text += (
        f"; every head's mean ({s.n_settings} heads) stays within its committed "
        f"{s.intervals} intervals"
    )
    # a shift within the record's tolerance for "identical" is float noise: a regression
    # metric recomputed over the same predictions can differ from its float32 record by ~1e-8
    if s.largest_shift <= float(record.get("identical_atol") or 0.0):
        return text + " (unchanged)."
    text += f" (largest shift {100 * s.largest_shift:.2f} points)."
    home = s.largest_setting
    if home is not None and len(s.largest_moves) < int(home["n"]):
        seeds = seed_text([seed for seed, _ in s.largest_moves])
        text += (
            " A head's mean takes today's values for its re-run seeds only, which dilutes a "
            f"cell's move: {_where(home, code)} seeds {seeds} moved "
            f"{_moves_text([d for _, d in s.largest_moves])} points, its {int(home['n'])}-seed "
            f"mean {signed_points(home['shift'])}."
        )
    return text


def selfcheck_sentence(record: dict[str, Any] | None, table: pd.DataFrame) -> str | None:
    """One Findings sentence on a committed self-check: identical cells, largest move, intervals.

    Args:
        record: The self-check record beside the results (:attr:`ReportInputs.selfcheck`).
        table: The tidy results table beside it (to say when the record is out of date).

    Returns:
        The sentence, or None without a record.
    """
    if record is None:
        return None
    git = record["today"].get("git") or {}
    commit = str(git.get("commit") or "?")[:7] + (" (modified tree)" if git.get("dirty") else "")
    committed = ", ".join(f"`{str(c)[:7]}`" for c in record["committed"].get("git") or [])
    text = (
        f"Self-check (`{command(record)}`, {str(record['finished_at'])[:10]} at `{commit}` on "
        f"cells trained at {committed or 'an unrecorded commit'}; {devices_text(record)}): "
        + check_text(record)
    )
    stale = stale_lines(record, table)
    if stale:
        text += (
            f" The committed results have changed since it ran ({len(stale)} values differ): "
            "re-run it."
        )
    return text
