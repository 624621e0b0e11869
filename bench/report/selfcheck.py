"""The report's self-check section, from the ``selfcheck.json`` beside the results, if any.

Each re-trained cell's committed and today's value, then each head's committed mean and
interval beside its mean with today's values (:mod:`bench.results.selfcheck_record`).
"""

from __future__ import annotations

from bench.report.context import ReportContext
from bench.report.html import Section, frame_table
from bench.results.selfcheck_record import cell_frame, environment, head_frame

#: Shown columns of the cell and head frames, with their headers.
CELL_COLUMNS = {"cell": "cell", "metric": "metric", "status": "status"}
CELL_COLUMNS |= {"committed": "committed", "today": "today", "diff": "Δ"}
CELL_COLUMNS |= {"changed": "predictions changed", "n_predictions": "of"}
CELL_COLUMNS |= {"identical": "identical", "stale": "stale"}
HEAD_COLUMNS = {"setting": "setting", "metric": "metric", "n": "seeds", "seeds": "re-run"}
HEAD_COLUMNS |= {"committed_mean": "committed mean", "t_low": "t low", "t_high": "t high"}
HEAD_COLUMNS |= {"ci_low": "BCa low", "ci_high": "BCa high", "today_mean": "today's mean"}
HEAD_COLUMNS |= {"shift": "shift", "inside": "inside", "stale": "stale"}


#: How each shown column reads: scores ×100 (a move signed), counts whole, flags yes/no.
FORMATS = {c: lambda v: f"{100 * v:.2f}" for c in ("committed", "today", "today's mean")}
FORMATS |= {c: lambda v: f"{100 * v:.2f}" for c in ("committed mean", "t low", "t high")}
FORMATS |= {c: lambda v: f"{100 * v:.2f}" for c in ("BCa low", "BCa high")}
FORMATS |= {c: lambda v: f"{100 * v:+.2f}" for c in ("Δ", "shift")}
FORMATS |= {c: lambda v: f"{v:.0f}" for c in ("predictions changed", "of")}
FORMATS |= {c: lambda v: "yes" if v else "no" for c in ("identical", "inside", "stale")}


def selfcheck_section(ctx: ReportContext) -> Section | None:
    """The self-check record beside the results, cell by cell and head by head; None without."""
    record = ctx.inputs.selfcheck
    if record is None:
        return None
    cells = cell_frame(record, ctx.inputs.table)[list(CELL_COLUMNS)].rename(columns=CELL_COLUMNS)
    heads = head_frame(record, ctx.inputs.table)[list(HEAD_COLUMNS)].rename(columns=HEAD_COLUMNS)
    heads["re-run"] = heads["re-run"].map(lambda seeds: ",".join(map(str, seeds)))
    stale = int(cells["stale"].sum() + heads["stale"].sum())
    # a column that says nothing here: every cell ok, no BCa interval recorded, nothing stale
    cells = cells.drop(columns=[c for c in ("status", "stale") if cells[c].nunique() == 1])
    heads = heads.drop(columns=[c for c in ("BCa low", "BCa high") if heads[c].isna().all()])
    heads = heads.drop(columns=[] if stale else ["stale"])
    env = environment(record).set_index("item")
    changed = ", ".join(env.index[~env["same"]].drop(["commit", "device"], errors="ignore"))
    cell_caption = (
        f"Slice {record['slice'].get('name')}, re-trained {str(record['finished_at'])[:10]} at "
        f"{env.at['commit', 'today']} on {env.at['device', 'today']} (committed: "
        f"{env.at['commit', 'committed']} on {env.at['device', 'committed']}); "
        f"versions changed: {changed or 'none'}."
    )
    head_caption = (
        f"Committed mean with its {float(record.get('confidence') or 0.95):.0%} intervals; "
        "today's mean takes today's values for the re-run seeds"
        + (
            f"; {stale} rows no longer match the committed results: re-run the check."
            if stale
            else "."
        )
    )
    body = "\n".join(
        [
            frame_table(cells, cell_caption, FORMATS, table_id="selfcheck-cells"),
            frame_table(heads, head_caption, FORMATS, table_id="selfcheck-heads"),
        ]
    )
    return Section("selfcheck", "Self-check", body)
