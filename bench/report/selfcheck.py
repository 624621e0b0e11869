"""The report's self-check section, from the ``selfcheck.json`` beside the results, if any."""

from __future__ import annotations

from bench.report.context import ReportContext
from bench.report.html import Section, frame_table
from bench.results.selfcheck_record import cell_frame, environment, head_frame

CELLS = ["cell", "metric", "status", "committed", "today", "diff", "changed", "n_predictions"]
CELLS += ["identical", "stale"]
HEADS = ["setting", "metric", "n", "seeds", "committed_mean", "t_low", "t_high", "ci_low"]
HEADS += ["ci_high", "today_mean", "shift", "inside", "stale"]
HEADERS = {"diff": "Δ", "changed": "predictions changed", "n_predictions": "of", "n": "seeds"}
HEADERS |= {"seeds": "re-run", "ci_low": "BCa low", "ci_high": "BCa high", "t_low": "t low"}
HEADERS |= {"committed_mean": "committed mean", "t_high": "t high", "today_mean": "today's mean"}
SCORES = ("committed", "today", "today's mean", "committed mean", "t low", "t high")
FORMATS = {c: lambda v: f"{100 * v:.2f}" for c in (*SCORES, "BCa low", "BCa high")}
FORMATS |= {c: lambda v: f"{100 * v:+.2f}" for c in ("Δ", "shift")}
FORMATS |= {c: lambda v: f"{v:.0f}" for c in ("predictions changed", "of")}
FORMATS |= {c: lambda v: "yes" if v else "no" for c in ("identical", "inside", "stale")}


def selfcheck_section(ctx: ReportContext) -> Section | None:
    """The self-check record beside the results, cell by cell and head by head; None without."""
    record = ctx.inputs.selfcheck
    if record is None:
        return None
    cells = cell_frame(record, ctx.inputs.table)[CELLS].rename(columns=HEADERS)
    heads = head_frame(record, ctx.inputs.table)[HEADS].rename(columns=HEADERS)
    heads["re-run"] = heads["re-run"].map(lambda seeds: ",".join(map(str, seeds)))
    stale = int(cells["stale"].sum() + heads["stale"].sum())
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
    rerun = f"; {stale} rows no longer match the committed results: re-run the check"
    head_caption = (
        f"Committed mean with its {float(record.get('confidence') or 0.95):.0%} intervals; "
        f"today's mean takes today's values for the re-run seeds{rerun if stale else ''}."
    )
    cell_table = frame_table(cells, cell_caption, FORMATS, table_id="selfcheck-cells")
    head_table = frame_table(heads, head_caption, FORMATS, table_id="selfcheck-heads")
    return Section("selfcheck", "Self-check", f"{cell_table}\n{head_table}")
