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
from bench.results.stats import SETTING_KEYS

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
FAILED_COLOUR = "#D55E00"
CONSTANT_COLOUR = "#555555"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
#: Axis labels: the metrics shown in per cent, and the names of those shown ×100.
PERCENT = {"accuracy": "accuracy (%)", "f1": "F1 (%)"}
METRIC_NAMES = {"mcc": "MCC", "pearson": "Pearson r", "spearman": "Spearman ρ"}
#: Matplotlib's settings: SVG text stays text (small, selectable, escaped by matplotlib), and
#: SVG ids are stable (a report built again diffs only where it changed).
STYLE = {"svg.fonttype": "none", "svg.hashsalt": "headbench", "font.size": 9, "axes.titlesize": 9}
STYLE |= {"axes.spines.top": False, "axes.spines.right": False, "axes.grid": True}
STYLE |= {"grid.alpha": 0.3, "legend.fontsize": 8, "legend.frameon": False, "figure.dpi": 100}


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
    keys = [k for k in (*SETTING_KEYS, "head_label") if k in frame]
    return frame.sort_values(keys, key=_rank, kind="stable")


class Palette:
    """Fixed colours of the report's head labels and markers of its freeze labels."""

    def __init__(self, heads: Iterable[str], freezes: Iterable[str]) -> None:
        self.heads = ordered(heads, head_order())
        self.freezes = sorted({str(f) for f in freezes}, key=freeze_rank)

    def colour(self, head: str) -> str:
        """The head's colour."""
        found = str(head) in self.heads
        return OKABE_ITO[self.heads.index(str(head)) % len(OKABE_ITO)] if found else "#777777"

    def marker(self, freeze: str) -> str:
        """The freezing strategy's marker."""
        found = str(freeze) in self.freezes
        return MARKERS[self.freezes.index(str(freeze)) % len(MARKERS)] if found else "o"


def task_title(task: str) -> str:
    """Display name of a task (``sst2`` → ``SST-2``)."""
    return TASK_NAMES.get(str(task), str(task))


def metric_title(metric: str) -> str:
    """Axis label of a metric with its unit (values are shown ×100)."""
    return PERCENT.get(str(metric)) or f"{METRIC_NAMES.get(str(metric), metric)} (×100)"


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
