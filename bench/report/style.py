"""The figures' look: head colours (Okabe–Ito), freeze markers, labels, order, SVG."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from bench.axes.freezing import freeze_rank
from bench.axes.heads import head_order
from bench.results.curves import size_key
from bench.results.display import TASK_NAMES

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
FAILED_COLOUR = "#D55E00"
CONSTANT_COLOUR = "#555555"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
METRIC_TITLES = {
    "accuracy": "accuracy (%)",
    "f1": "F1 (%)",
    "mcc": "MCC (×100)",
    "pearson": "Pearson r (×100)",
    "spearman": "Spearman ρ (×100)",
}
STYLE = {
    "svg.fonttype": "none",  # text stays text (small files, selectable, escaped by matplotlib)
    "svg.hashsalt": "headbench",  # stable ids: a report built again diffs only where changed
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "figure.dpi": 100,
}


def ordered(values: Iterable[str], preferred: list[str]) -> list[str]:
    """Unique values: those in ``preferred`` first (in its order), the rest sorted."""
    rank = {v: i for i, v in enumerate(preferred)}
    return sorted({str(v) for v in values}, key=lambda v: (rank.get(v, len(rank)), v))


def _rank(column: pd.Series) -> pd.Series:
    if column.name == "freeze_label":
        return column.map(freeze_rank)
    if column.name == "train_size":
        return column.map(size_key)
    if column.name == "head_label":
        return column.map({h: i for i, h in enumerate(ordered(column, head_order()))})
    return column


def sort_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in report order: task, encoder, least trained freeze first, size ascending, head."""
    keys = [
        k for k in ("task", "encoder", "freeze_label", "train_size", "head_label") if k in frame
    ]
    return frame.sort_values(keys, key=_rank, kind="stable")


def setting_order(frame: pd.DataFrame, keys: list[str]) -> list[tuple]:
    """The unique values of ``keys`` (columns of :func:`sort_settings`) in report order."""
    return list(sort_settings(frame[keys].drop_duplicates()).itertuples(index=False, name=None))


class Palette:
    """Fixed head colours and freeze markers for one report.

    Args:
        heads: Every head label in the report.
        freezes: Every freeze label in the report.
    """

    def __init__(self, heads: Iterable[str], freezes: Iterable[str]) -> None:
        self.heads = ordered(heads, head_order())
        self.freezes = sorted({str(f) for f in freezes}, key=freeze_rank)
        self._colour = {h: OKABE_ITO[i % len(OKABE_ITO)] for i, h in enumerate(self.heads)}
        self._marker = {f: MARKERS[i % len(MARKERS)] for i, f in enumerate(self.freezes)}

    def colour(self, head: str) -> str:
        """The head's colour."""
        return self._colour.get(str(head), "#777777")

    def marker(self, freeze: str) -> str:
        """The freezing strategy's marker."""
        return self._marker.get(str(freeze), "o")


def task_title(task: str) -> str:
    """Display name of a task (``sst2`` → ``SST-2``)."""
    return TASK_NAMES.get(str(task), str(task))


def metric_title(metric: str) -> str:
    """Axis label of a metric with its unit (values are shown ×100)."""
    return METRIC_TITLES.get(str(metric), f"{metric} (×100)")


def new_figure(width: float, height: float) -> Figure:
    """A figure with the report's style (width and height in inches)."""
    plt.rcParams.update(STYLE)  # type: ignore[arg-type]  # the report owns matplotlib's state
    return plt.figure(figsize=(width, height), layout="constrained")


def grid(n: int, columns: int = 3, width: float = 3.6, height: float = 2.9) -> tuple[Figure, list]:
    """A figure with ``n`` subplots in rows of ``columns``; returns the figure and its axes."""
    columns = max(1, min(columns, n))
    rows = -(-n // columns)
    fig = new_figure(max(width * columns, 7.5), height * rows + 0.4)  # room for the suptitle
    return fig, [fig.add_subplot(rows, columns, i + 1) for i in range(n)]


def svg_data_uri(fig: Figure) -> str:
    """Render a figure as SVG and return it as a ``data:`` URI (the figure is closed)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
