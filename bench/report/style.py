"""Shared look of every report figure: palette, head colours, labels, SVG embedding.

Colours are the Okabe–Ito palette (distinguishable with the common colour-vision
deficiencies). A head keeps the same colour in every figure of a report; freezing
strategies are told apart by marker and line style, never by colour alone.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from bench.axes.freezing import freeze_rank
from bench.results.tables import HEAD_ORDER

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
FAILED_COLOUR = "#D55E00"
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", ":", "-."]
TASK_TITLES = {
    "cola": "CoLA",
    "sst2": "SST-2",
    "mrpc": "MRPC",
    "stsb": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI",
    "qnli": "QNLI",
    "rte": "RTE",
    "wnli": "WNLI",
    "conll2003": "CoNLL-2003",
}
METRIC_TITLES = {
    "accuracy": "accuracy (%)",
    "f1": "F1 (%)",
    "mcc": "Matthews corr. (×100)",
    "pearson": "Pearson r (×100)",
    "spearman": "Spearman ρ (×100)",
    "precision": "precision (%)",
    "recall": "recall (%)",
}
STYLE = {
    "svg.fonttype": "none",  # text stays text (small files, selectable, escaped by matplotlib)
    # ids of clip paths and markers from their content, not a random salt: a report built
    # again from the same results has the same figures (committed reports diff where changed)
    "svg.hashsalt": "headbench",
    "font.size": 9,
    "axes.titlesize": 9.5,
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
    unique = {str(v) for v in values}
    rank = {v: i for i, v in enumerate(preferred)}
    return sorted(unique, key=lambda v: (rank.get(v, len(rank)), v))


def ordered_freezes(values: Iterable[str]) -> list[str]:
    """Unique freeze labels from the least trained to the most (the strategy registry's order)."""
    return sorted({str(v) for v in values}, key=freeze_rank)


class Palette:
    """Fixed head colours and freeze markers for one report.

    Args:
        heads: Every head label in the report.
        freezes: Every freeze label in the report.
    """

    def __init__(self, heads: Iterable[str], freezes: Iterable[str]) -> None:
        self.heads = ordered(heads, HEAD_ORDER)
        self.freezes = ordered_freezes(freezes)
        self._colour = {h: OKABE_ITO[i % len(OKABE_ITO)] for i, h in enumerate(self.heads)}
        self._marker = {f: MARKERS[i % len(MARKERS)] for i, f in enumerate(self.freezes)}
        self._line = {f: LINESTYLES[i % len(LINESTYLES)] for i, f in enumerate(self.freezes)}

    def colour(self, head: str) -> str:
        """The head's colour."""
        return self._colour.get(str(head), "#777777")

    def marker(self, freeze: str) -> str:
        """The freezing strategy's marker."""
        return self._marker.get(str(freeze), "o")

    def linestyle(self, freeze: str) -> str:
        """The freezing strategy's line style."""
        return self._line.get(str(freeze), "-")


def task_title(task: str) -> str:
    """Display name of a task (``sst2`` → ``SST-2``)."""
    return TASK_TITLES.get(str(task), str(task))


def metric_title(metric: str) -> str:
    """Axis label of a metric with its unit (values are shown ×100)."""
    return METRIC_TITLES.get(str(metric), f"{metric} (×100)")


def _span(counts: Iterable[int], noun: str) -> str:
    """``3 seeds``, ``1 seed`` or ``2–3 seeds``; ``no seeds`` for no counts."""
    values = sorted({int(c) for c in counts})
    if not values:
        return f"no {noun}s"
    if len(values) == 1:
        return f"{values[0]} {noun}{'s' if values[0] != 1 else ''}"
    return f"{values[0]}–{values[-1]} {noun}s"


def seeds_text(counts: Iterable[int]) -> str:
    """``3 seeds per cell`` or ``2–3 seeds per cell`` for the per-cell seed counts."""
    text = _span(counts, "seed")
    return text if text == "no seeds" else f"{text} per cell"


def orders_text(counts: Iterable[int]) -> str:
    """``5 batch orders`` or ``3–5 batch orders`` for the per-cell order-seed counts."""
    return _span(counts, "batch order")


def new_figure(width: float, height: float) -> Figure:
    """A figure with the report's style (width and height in inches)."""
    plt.rcParams.update(STYLE)  # type: ignore[arg-type]  # matplotlib types keys as literals  # the report owns matplotlib's state in its process
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
