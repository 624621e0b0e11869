"""The figures' look: head colours (Okabe–Ito), freeze markers, labels, order, SVG."""

from __future__ import annotations

import base64
import io
import itertools
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
PERCENT = {"accuracy": "accuracy (%)", "f1": "F1 (%)"}
METRIC_NAMES = {"mcc": "MCC", "pearson": "Pearson r", "spearman": "Spearman ρ"}
#: Matplotlib's settings: SVG text stays text, SVG ids are stable (rebuilds diff only changes).
STYLE = {"svg.fonttype": "none", "svg.hashsalt": "headbench", "font.size": 9, "axes.titlesize": 9}
STYLE |= {"axes.spines.top": False, "axes.spines.right": False, "axes.grid": True}
STYLE |= {"grid.alpha": 0.3, "legend.fontsize": 8, "legend.frameon": False, "figure.dpi": 100}


def ordered(values: Iterable[str], preferred: list[str]) -> list[str]:
    """Unique values: those in ``preferred`` first (in its order), the rest sorted."""
    rank = {v: i for i, v in enumerate(preferred)}
    return sorted({str(v) for v in values}, key=lambda v: (rank.get(v, len(rank)), v))


def sort_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in report order: task, encoder, least trained freeze first, size ascending, head."""
    keys = [k for k in (*SETTING_KEYS, "head_label") if k in frame]
    heads = {h: i for i, h in enumerate(ordered(frame.get("head_label", []), head_order()))}
    rank = {"freeze_label": freeze_rank, "train_size": size_key, "head_label": heads}
    return frame.sort_values(
        keys, key=lambda c: c.map(rank[c.name]) if c.name in rank else c, kind="stable"
    )


class Palette:
    """Fixed colours of the report's head labels and markers of its freeze labels."""

    def __init__(self, heads: Iterable[str], freezes: Iterable[str]) -> None:
        self.heads = ordered(heads, head_order())
        self.freezes = sorted({str(f) for f in freezes}, key=freeze_rank)

    def colour(self, head: str) -> str:
        """The head's colour."""
        return dict(zip(self.heads, itertools.cycle(OKABE_ITO))).get(str(head), "#777777")

    def marker(self, freeze: str) -> str:
        """The freezing strategy's marker."""
        return dict(zip(self.freezes, itertools.cycle(MARKERS))).get(str(freeze), "o")


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
