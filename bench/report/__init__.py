"""One self-contained HTML page that answers "which head?" for a sweep.

``python -m bench.report <results-or-multirun-dir> -o reports/<name>.html`` and, after every
multirun, the collecting callback. The page (:mod:`bench.report.page`, a jinja2 template)
opens with the answer: the heads × settings table, every head's interval and every pair's
verdict; the other sections follow where the results hold their data. No JavaScript.
"""

from __future__ import annotations

from typing import Any

#: Imported on first use: the sections pull in matplotlib, which reading results does not need.
EXPORTS = frozenset({"build_context", "build_report", "load_inputs", "report_html", "write_report"})


def __getattr__(name: str) -> Any:
    """The page builders, imported on first use."""
    if name in EXPORTS:
        from bench.report import page

        return getattr(page, name)
    raise AttributeError(f"module 'bench.report' has no attribute {name!r}")
