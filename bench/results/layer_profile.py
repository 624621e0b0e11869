"""A per-layer probe's profile: what each single layer makes linearly readable.

``fair_table7_probe`` trains a frozen linear token head on each single hidden layer (0 =
embeddings, L = last) under ``fair_table7``'s budget. Its profile is the evidence behind
``fair_table7``'s difference from BERT's Table 7 ordering: the paper's last layer is
0.7 points below its second-to-last with a BiLSTM (from ``references.csv``), MiniLM's
several points. The profile says at which layer token-level information peaks and how
much of it the last layer keeps; :mod:`bench.results.geometry` says what the last layer's
word states became instead.

Every figure is computed from the tidy results table (and ``references.csv``); nothing
here knows the numbers.
"""

from __future__ import annotations

import pandas as pd

from bench.results import stats

#: Columns of :func:`profile_rows` (scores ×100).
PROFILE_COLUMNS = ["encoder", "layer", "mean", "t_low", "t_high", "n"]
#: Columns of :func:`last_layer_drop` (differences ×100).
DROP_COLUMNS = ["encoder", "peak", "peak_mean", "last", "drop", "low", "high", "p", "n", "reason"]


def _single_layer(frame: pd.DataFrame) -> pd.DataFrame:
    """Frozen linear token-probe rows that read one layer (``layers`` is one index)."""
    probes = frame[
        (frame["head"] == "linear")
        & (frame["freeze"] == "frozen")
        & frame["layers"].astype(str).str.fullmatch(r"\d+")
    ].copy()
    probes["layer"] = probes["layers"].astype(int)
    return probes


def profile_rows(table: pd.DataFrame, split: str = "dev") -> pd.DataFrame:
    """One row per encoder and layer: the probe's mean score with its t-interval.

    Args:
        table: Tidy results table.
        split: The reporting split.

    Returns:
        Columns :data:`PROFILE_COLUMNS`, ordered by encoder and layer; empty when the
        table has no single-layer linear probe.
    """
    cells = _single_layer(stats.cell_stats(table, split=split))
    cells = cells[cells["n"] > 0].sort_values(["encoder", "layer"])
    out = cells.assign(
        mean=100 * cells["mean"], t_low=100 * cells["t_low"], t_high=100 * cells["t_high"]
    )
    return out[PROFILE_COLUMNS].reset_index(drop=True)


def last_layer_drop(table: pd.DataFrame, split: str = "dev") -> pd.DataFrame:
    """Per encoder: the last layer against the layer before it, paired by seed.

    The comparison the paper's Table 7 makes with a BiLSTM (last against second-to-last
    hidden), here with a linear probe; ``peak`` names the best layer by mean.

    Args:
        table: Tidy results table.
        split: The reporting split.

    Returns:
        Columns :data:`DROP_COLUMNS`: ``drop`` = mean over paired seeds of last minus
        previous layer (negative: the last layer reads worse), its Student-t interval and
        the paired t-test's two-sided p (:func:`bench.results.stats.paired_t_test`), ×100
        except p; ``reason`` says why p is missing.
    """
    profile = profile_rows(table, split)
    runs = _single_layer(stats.run_values(table, metric="main", split=split))
    out = []
    for encoder, group in profile.groupby("encoder", sort=True):
        if len(group) < 2:
            continue
        last = int(group["layer"].max())
        peak = group.loc[group["mean"].idxmax()]
        mine = runs[(runs["encoder"] == encoder) & runs["layer"].isin([last - 1, last])]
        wide = mine.pivot_table(index="seed", columns="layer", values="value").dropna()
        if last - 1 not in wide.columns or last not in wide.columns:
            continue
        p, low, high, reason = stats.paired_t_test(wide[last], wide[last - 1])
        out.append(
            {
                "encoder": encoder,
                "peak": int(peak["layer"]),
                "peak_mean": float(peak["mean"]),
                "last": last,
                "drop": float(100 * (wide[last] - wide[last - 1]).mean()),
                "low": 100 * low,
                "high": 100 * high,
                "p": p,
                "n": len(wide),
                "reason": reason,
            }
        )
    return pd.DataFrame(out, columns=DROP_COLUMNS)
