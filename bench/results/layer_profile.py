"""Per-layer profile: each single layer's ``scores`` row, its step and verdicts (comparisons)."""

from __future__ import annotations

import pandas as pd

from bench.results import stats
from bench.results.frames import oriented, setting_rows

SETTING = list(stats.SETTING_KEYS)
STEP = ["step", "step_low", "step_high", "step_verdict"]
PROFILE_COLUMNS = [*SETTING, "head", "layer", "head_label", "metric", "mean", "low", "high"]
PROFILE_COLUMNS += ["clipped", "n", "best_constant", *STEP, "vs_best"]


def profile_rows(
    table: pd.DataFrame, scores: pd.DataFrame, comparisons: pd.DataFrame
) -> pd.DataFrame:
    """The profile of single-layer heads: steps from the layer before, verdict vs the best."""
    single = table[table["layers"].astype(str).str.fullmatch(r"\d+")]
    labels = single[[*SETTING, "head", "head_label", "layers"]].drop_duplicates()
    rows = scores.merge(labels, on=[*SETTING, "head_label"])
    rows = rows.assign(layer=rows["layers"].astype(int)).sort_values([*SETTING, "head", "layer"])
    out = []
    for _, group in rows.groupby([*SETTING, "head"], sort=False):
        pairs = setting_rows(comparisons, group.iloc[0])
        best, before = group.loc[group["mean"].idxmax(), "head_label"], None
        for _, r in group.iterrows() if len(group) > 1 else []:
            step = oriented(pairs, r["head_label"], before).head(1) if before else pairs.head(0)
            vs = [*oriented(pairs, r["head_label"], best)["verdict"], ""][0]
            vs = "best" if r["head_label"] == best else vs
            step = step[["estimate", "low", "high", "verdict"]].to_numpy().ravel()
            out.append(r.to_dict() | dict(zip(STEP, step, strict=False)) | {"vs_best": vs})
            before = r["head_label"]
    return pd.DataFrame(out, columns=PROFILE_COLUMNS)
