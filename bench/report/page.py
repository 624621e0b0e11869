"""The report page: the sections in order, through one jinja2 template."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jinja2

from bench.atomic import atomic_write
from bench.clock import utc_now
from bench.report.answer import answer_section, verdicts_section
from bench.report.budget import budget_section
from bench.report.calibration import calibration_section
from bench.report.context import ReportContext, build_context
from bench.report.devices import devices_section
from bench.report.html import Section
from bench.report.inputs import load_inputs
from bench.report.layer_profile import layer_section
from bench.report.preset_grid import grid_section
from bench.report.provenance import provenance_section
from bench.report.sections import (
    cost_section,
    curves_section,
    spread_section,
    training_size_section,
)
from bench.report.selfcheck import selfcheck_section
from bench.report.variance import variance_section
from bench.results.display import TASK_NAMES

SECTION_BUILDERS: tuple[Callable[[ReportContext], Section | None], ...] = (
    answer_section,
    verdicts_section,
    grid_section,
    training_size_section,
    budget_section,
    devices_section,
    spread_section,
    cost_section,
    layer_section,
    curves_section,
    calibration_section,
    variance_section,
    selfcheck_section,
    provenance_section,
)
_TEMPLATE = jinja2.Environment(
    loader=jinja2.PackageLoader("bench.report", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
).get_template("report.html.j2")


def report_html(ctx: ReportContext, title: str | None = None) -> str:
    """Render the report of a built context as an HTML string."""
    table = ctx.inputs.table
    tasks = ", ".join(TASK_NAMES.get(t, t) for t in sorted(table["task"].dropna().unique()))
    encoders = ", ".join(sorted(table["encoder"].dropna().unique()))
    subtitle = (
        f"{len(ctx.runs)} runs of {len(ctx.palette.heads)} heads on {tasks} with {encoders}. "
        "Scores ×100 on the dev split."
    )
    shown = [s for s in (build(ctx) for build in SECTION_BUILDERS) if s is not None]
    title = title or f"headbench report: {Path(ctx.inputs.source).name}"
    return _TEMPLATE.render(title=title, subtitle=subtitle, sections=shown, generated=utc_now())


def write_report(ctx: ReportContext, out: str | Path, title: str | None = None) -> Path:
    """Write the report of a built context atomically; returns the written path."""
    text = report_html(ctx, title)
    return atomic_write(out, lambda handle: handle.write(text))


def build_report(source: str | Path, out: str | Path, title: str | None = None) -> Path:
    """Write the report of a results directory (or table file) or multirun directory to ``out``."""
    return write_report(build_context(load_inputs(source)), out, title)
