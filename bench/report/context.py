"""Statistics computed once per report and shared by its sections."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bench.report.inputs import ReportInputs
from bench.report.style import Palette
from bench.results import stats
from bench.results.tables import METRIC_NAMES

ALPHA = 0.05  # significance level after Holm's correction


@dataclass
class ReportContext:
    """Inputs plus the seed statistics every section uses (main metric, dev split).

    Attributes:
        inputs: What the report reads.
        palette: Head colours / freeze markers, fixed for the whole report.
        runs: :func:`bench.results.stats.run_values` (one row per run).
        cells: :func:`bench.results.stats.cell_stats` (one row per setting).
        comparisons: :func:`bench.results.stats.compare_heads` (paired, Holm-corrected).
        multi_encoder: Whether the report covers several encoders.
    """

    inputs: ReportInputs
    palette: Palette
    runs: pd.DataFrame
    cells: pd.DataFrame
    comparisons: pd.DataFrame
    multi_encoder: bool

    def sort_key(self, keys: tuple) -> tuple:
        """Order setting keys by task, encoder, training size (if given), freeze, head."""
        task, encoder, head, freeze, *rest = keys
        heads, freezes = self.palette.heads, self.palette.freezes
        return (
            str(task),
            str(encoder),
            *rest,
            freezes.index(freeze) if freeze in freezes else len(freezes),
            heads.index(head) if head in heads else len(heads),
        )


def build_context(inputs: ReportInputs) -> ReportContext:
    """Compute the shared statistics of a report."""
    table = inputs.table
    runs = stats.run_values(table)
    cells = stats.cell_stats(table)
    comparisons = stats.compare_heads(table)
    palette = Palette(table["head_label"].dropna(), table["freeze_label"].dropna())
    return ReportContext(
        inputs=inputs,
        palette=palette,
        runs=runs,
        cells=cells,
        comparisons=comparisons,
        multi_encoder=table["encoder"].nunique() > 1,
    )


def short_metric(metric: str) -> str:
    """``accuracy`` → ``acc``; ``f1`` → ``F1`` (as in the paper-style tables)."""
    return METRIC_NAMES.get(str(metric), str(metric))


def points(value: float, digits: int = 1) -> str:
    """A [0, 1] score as points ×100 (``0.8123`` → ``81.2``); empty for NaN."""
    return "" if pd.isna(value) else f"{100 * value:.{digits}f}"


def pvalue(value: float) -> str:
    """A p-value with two significant digits; ``–`` when undefined."""
    return "–" if pd.isna(value) else f"{value:.2g}"
