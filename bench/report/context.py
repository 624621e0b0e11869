"""Statistics computed once per report and shared by its sections."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.report.inputs import ReportInputs
from bench.report.style import Palette
from bench.results import stats
from bench.results.curves import freeze_text, size_key, sized_settings
from bench.results.studies import Study, studies_of
from bench.results.tables import METRIC_NAMES, interval_text


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
        sized: The (task, encoder, freeze_label) settings that ran at several training
            sizes (:func:`bench.results.curves.sized_settings`): shown with their size.
        studies: The studies of the newest launch's preset
            (:func:`bench.results.studies.studies_of`): settings reported apart from the
            headline, each its own Holm family; ``()`` when none.
    """

    inputs: ReportInputs
    palette: Palette
    runs: pd.DataFrame
    cells: pd.DataFrame
    comparisons: pd.DataFrame
    multi_encoder: bool
    sized: frozenset[tuple[str, str, str]] = frozenset()
    studies: tuple[Study, ...] = ()

    def freeze_text(self, row: pd.Series | dict) -> str:
        """A row's freezing label, with its training size where the setting has several.

        Args:
            row: Anything with ``task``, ``encoder``, ``freeze_label`` and ``train_size``.

        Returns:
            ``frozen``, or ``frozen, 400 examples`` (:func:`bench.results.curves.freeze_text`).
        """
        return freeze_text(
            row["task"], row["encoder"], row["freeze_label"], row.get("train_size"), self.sized
        )

    def sort_key(self, keys: tuple) -> tuple:
        """Order setting keys by task, encoder, freeze, training size (if given), head.

        Args:
            keys: ``(task, encoder, head_label, freeze_label[, train_size])``, the order
                of :data:`bench.results.stats.GROUP_KEYS`.

        Returns:
            The sort key (the whole training split after every numbered size).
        """
        task, encoder, head, freeze, *rest = keys
        heads, freezes = self.palette.heads, self.palette.freezes
        return (
            str(task),
            str(encoder),
            freezes.index(freeze) if freeze in freezes else len(freezes),
            *(size_key(size) for size in rest),
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
        sized=sized_settings(cells),
        studies=studies_of(str(inputs.launch.get("command") or "")),
    )


def threshold_name(best_constant: float, baseline: float) -> str:
    """The failure threshold in words (:func:`bench.results.stats.failure_threshold`).

    A run fails at or below the best constant prediction where the results record one;
    only results without that record (older ones) fall back to the majority-class
    baseline, and a correlation without either to zero.

    Args:
        best_constant: The best constant prediction's score (NaN in older tables).
        baseline: The majority-class baseline's score (NaN if none).

    Returns:
        ``the best constant prediction``, ``the majority-class baseline`` or ``zero``.
    """
    if pd.notna(best_constant) and np.isfinite(best_constant):
        return "the best constant prediction"
    return "the majority-class baseline" if pd.notna(baseline) else "zero"


def constant_cell(standing: object) -> str:
    """A table's "Beats the constant" cell for :func:`bench.results.stats.against_threshold`.

    Args:
        standing: Its result (``""`` or NaN when no threshold applied).

    Returns:
        ``yes`` (the mean and its whole t-interval above the best constant), ``not shown``
        (the interval reaches it), ``no`` (the mean at or below it: no winner) or ``–``.
    """
    return {
        stats.ABOVE_THRESHOLD: "yes",
        stats.INTERVAL_REACHES: "not shown",
        stats.NOT_ABOVE: "no",
    }.get(str(standing), "–")


def short_metric(metric: str) -> str:
    """``accuracy`` → ``acc``; ``f1`` → ``F1`` (as in the paper-style tables)."""
    return METRIC_NAMES.get(str(metric), str(metric))


def points(value: float, digits: int = 1) -> str:
    """A [0, 1] score as points ×100 (``0.8123`` → ``81.2``); empty for NaN."""
    return "" if pd.isna(value) else f"{100 * value:.{digits}f}"


def interval(low: float, high: float) -> str:
    """An interval of [0, 1] scores as points ×100 (``81.0 to 83.5``); ``–`` when undefined.

    An end that rounds to ±0.0 keeps two significant digits (``0.044 to 0.6``):
    :func:`bench.results.tables.interval_text`, the one formatter of every interval.
    """
    return interval_text(low, high)


def pvalue(value: float) -> str:
    """A p-value with two significant digits; ``–`` when undefined."""
    return "–" if pd.isna(value) else f"{value:.2g}"
