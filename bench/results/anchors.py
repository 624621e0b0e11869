"""Heads beside their anchors: a gradient-trained read-out short of its converged one.

An anchor (``head=anchor``, :mod:`bench.run.anchors`) fits the read-out of ``linear``,
``mean_linear`` or ``last4_concat`` to convergence on the same features
(:data:`bench.axes.heads.ANCHOR_OF`). A head whose mean lies more than :data:`SHORT_BY`
below its anchor's, in the same setting, did not reach what its read-out can: its training
budget fell short. Torch-free.
"""

from __future__ import annotations

import pandas as pd

from bench.axes.heads import ANCHOR_OF
from bench.results.stats import SETTING_KEYS

#: How far below its anchor a head may score (1 point of a metric on the 0-1 scale).
SHORT_BY = 0.01
#: The columns of :func:`anchor_gaps`.
GAP_COLUMNS = [*SETTING_KEYS, "head_label", "mean", "anchor", "anchor_mean", "gap", "short"]


def anchor_gaps(scores: pd.DataFrame) -> pd.DataFrame:
    """Each head that has its anchor in its setting, beside it.

    Args:
        scores: One row per setting × head with its ``mean`` (a ``scores`` frame,
            :func:`bench.results.frames.scores`).

    Returns:
        :data:`GAP_COLUMNS`: the head's and the anchor's means, ``gap`` (anchor − head) and
        ``short`` (the gap above :data:`SHORT_BY`); no row where the anchor did not run.
    """
    pairs = pd.DataFrame(list(ANCHOR_OF.items()), columns=["head_label", "anchor"])
    anchors = scores[[*SETTING_KEYS, "head_label", "mean"]].rename(
        columns={"head_label": "anchor", "mean": "anchor_mean"}
    )
    out = scores.merge(pairs, on="head_label").merge(anchors, on=[*SETTING_KEYS, "anchor"])
    gap = out["anchor_mean"] - out["mean"]
    return out.assign(gap=gap, short=gap > SHORT_BY)[GAP_COLUMNS]
