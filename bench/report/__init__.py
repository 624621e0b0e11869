"""One self-contained HTML page that answers "which head?" for a sweep.

``python -m bench.report <results-or-multirun-dir> -o reports/<name>.html`` and, at the end
of every multirun, the collecting callback. The page (:mod:`bench.report.page`, a jinja2
template) opens with the answer: the heads × settings table, a plot of every head's mean
and interval, and the verdict of every head pair; budget, seeds, cost, layers, curves,
calibration, variance sources, the self-check and provenance follow, each only where the
results hold its data. Figures are embedded SVG; there is no JavaScript.
"""

from __future__ import annotations

from typing import Any

#: What ``from bench.report import ...`` offers (imported on first use: the sections pull
#: in matplotlib, which commands that only read results do not need).
EXPORTS = frozenset({"build_context", "build_report", "load_inputs", "report_html", "write_report"})


def __getattr__(name: str) -> Any:
    """The page builders, imported on first use."""
    if name in EXPORTS:
        from bench.report import page

        return getattr(page, name)
    raise AttributeError(f"module 'bench.report' has no attribute {name!r}")
