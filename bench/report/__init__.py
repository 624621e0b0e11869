"""One self-contained HTML page that answers "which head?" for a sweep.

``python -m bench.report <results-or-multirun-dir> -o reports/<name>.html`` and, at the
end of every multirun, the collecting callback (``report_file`` in the config). Sections:
headline verdicts, heads × freezing, learning curves by training size (only when a setting
ran at several training sizes), seed spread, cost vs score, layer analysis, learning
curves per epoch, calibration (only when the predictions carry class probabilities),
variance sources (only when runs have order seeds of their own; one sentence when they are
not crossed with the seeds), the self-check (only when the results directory holds a
committed ``selfcheck.json``), provenance; sections are numbered by position. Figures are
embedded SVG; there is no JavaScript.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from bench.atomic import atomic_write
from bench.report.calibration import calibration_section
from bench.report.context import ReportContext, build_context
from bench.report.html import Section
from bench.report.inputs import ReportInputs, load_inputs
from bench.report.page import render_page
from bench.report.preset_grid import partial_sentence
from bench.report.provenance import provenance_section
from bench.report.sections import (
    cost_section,
    curves_section,
    heads_section,
    layer_section,
    spread_section,
)
from bench.report.selfcheck import selfcheck_section
from bench.report.variance import variance_section

#: The sections in order; a builder that returns None has nothing to show for this source.
SECTION_BUILDERS: tuple[Callable[[ReportContext], Section | None], ...] = (
    heads_section,
    spread_section,
    cost_section,
    layer_section,
    curves_section,
    calibration_section,
    variance_section,
    selfcheck_section,
    provenance_section,
)


def numbered(sections: list[Section]) -> list[Section]:
    """The sections with their titles' leading numbers set to their positions (1-based)."""
    return [
        Section(s.id, re.sub(r"^\d+\. ", f"{i}. ", s.title), s.body)
        for i, s in enumerate(sections, start=1)
    ]


def render_report(inputs: ReportInputs, title: str | None = None) -> str:
    """Render the report of some inputs as an HTML string."""
    return report_html(build_context(inputs), title)


def report_html(ctx: ReportContext, title: str | None = None) -> str:
    """Render the report of a built context as an HTML string."""
    inputs = ctx.inputs
    table = inputs.table
    tasks = ", ".join(sorted(table["task"].dropna().unique()))
    encoders = ", ".join(sorted(table["encoder"].dropna().unique()))
    n_runs = len(ctx.runs)
    planned = len(inputs.launch.get("planned") or []) or None
    partial = partial_sentence(table, str(inputs.launch.get("command") or ""), planned)
    subtitle = (
        f"{n_runs} runs on {tasks} with {encoders}: {len(ctx.palette.heads)} heads × "
        f"{len(ctx.palette.freezes)} freezing strategies. "
        + (f"{partial} " if partial else "")
        + "All scores ×100 on the dev split unless marked test."
    )
    sections = numbered([s for s in (build(ctx) for build in SECTION_BUILDERS) if s is not None])
    return render_page(title or f"headbench report: {Path(inputs.source).name}", subtitle, sections)


def build_report(source: str | Path, out: str | Path, title: str | None = None) -> Path:
    """Build the report of a results or multirun directory and write it atomically.

    Args:
        source: A results directory (or table file) or a multirun directory.
        out: The HTML file to write.
        title: Page title (default: from the source's name).

    Returns:
        The written path.
    """
    return write_report(build_context(load_inputs(source)), out, title)


def write_report(ctx: ReportContext, out: str | Path, title: str | None = None) -> Path:
    """Write the report of a built context atomically; returns the written path."""
    text = report_html(ctx, title)
    return atomic_write(out, lambda handle: handle.write(text))
