"""What every report section reads: the inputs and the statistics frames, computed once."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bench.report.inputs import ReportInputs
from bench.report.style import Palette
from bench.results import frames, stats


@dataclass
class ReportContext:
    """Inputs, palette and the frames every section uses (main metric, dev split).

    ``runs`` is :func:`bench.results.stats.run_values`; ``sized`` the (task, encoder,
    freeze_label) settings that ran at several training sizes.
    """

    inputs: ReportInputs
    palette: Palette
    runs: pd.DataFrame
    scores: pd.DataFrame
    comparisons: pd.DataFrame
    multi_encoder: bool
    sized: frozenset[tuple[str, str, str]] = frozenset()


def build_context(inputs: ReportInputs) -> ReportContext:
    """Compute the frames of a report (the same function as ``collect`` writes them with)."""
    table, command = inputs.table, str(inputs.launch.get("command") or "")
    scores, comparisons = frames.from_results(table, inputs.predictions, inputs.cells, command)
    sizes = scores.groupby(["task", "encoder", "freeze_label"])["train_size"].nunique()
    palette = Palette(table["head_label"].dropna(), table["freeze_label"].dropna())
    runs, multi_encoder = stats.run_values(table), table["encoder"].nunique() > 1
    sized = frozenset((str(t), str(e), str(f)) for (t, e, f), n in sizes.items() if n > 1)
    return ReportContext(inputs, palette, runs, scores, comparisons, multi_encoder, sized)
