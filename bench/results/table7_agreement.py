"""Our frozen BiLSTM rows of BERT's Table 7 beside the paper's (Devlin et al. 2019)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import stats as sps

from bench.results import stats
from bench.results.frames import oriented, setting_rows

SETTING = list(stats.SETTING_KEYS)
TABLE7_TASK = "conll2003"
#: Table 7's feature-based rows (selection, the paper's row name) in its order.
FROZEN_ROWS = (
    ("embeddings", "Embeddings"),
    ("second_to_last", "Second-to-Last Hidden"),
    ("last", "Last Hidden"),
    ("sum_last4", "Weighted Sum Last Four Hidden"),
    ("concat_last4", "Concat Last Four Hidden"),
    ("sum_all", "Weighted Sum All 12 Layers"),
)
GAP = ["gap", "gap_low", "gap_high", "verdict"]


def paper_scores(refs: pd.DataFrame) -> pd.Series:
    """The paper's dev F1 per selection, on the metric's scale (0–1)."""
    rows = refs[(refs["task"] == TABLE7_TASK) & (refs["split"] == "dev") & (refs["metric"] == "f1")]
    return rows.set_index("setting")["value"].astype(float) / 100


def selection_rows(table: pd.DataFrame, scores: pd.DataFrame, refs: pd.DataFrame) -> pd.DataFrame:
    """Per setting and the paper's frozen BiLSTM selections: our scores beside its F1, ranks."""
    names, paper = dict(FROZEN_ROWS), paper_scores(refs)
    mine = table[(table["task"] == TABLE7_TASK) & (table["freeze"] == "frozen")]
    mine = mine[(mine["head"] == "bilstm") & mine["layers"].isin(paper.index.intersection(names))]
    labels = mine[[*SETTING, "head_label", "layers"]].drop_duplicates()
    rows = scores.merge(labels, on=[*SETTING, "head_label"])
    rows = rows.assign(paper_row=rows["layers"].map(names), paper=rows["layers"].map(paper))
    rows = rows.assign(order=rows["layers"].map(list(names).index)).sort_values([*SETTING, "order"])
    ranked = rows.groupby(SETTING, sort=False)
    rows["rank"] = ranked["mean"].rank(ascending=False)
    rows["paper_rank"] = ranked["paper"].rank(ascending=False)
    columns = ["layers", "head_label", "paper_row", "paper", "mean", "low", "high", "n"]
    return rows[[*SETTING, *columns, "rank", "paper_rank"]].reset_index(drop=True)


def spearman(a: ArrayLike, b: ArrayLike) -> tuple[float, float]:
    """Spearman's ρ and its exact two-sided p over every pairing (NaN: < 3 items or no spread)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return np.nan, np.nan
    rho = lambda x: sps.spearmanr(x, b).statistic  # noqa: E731
    exact = sps.permutation_test((a,), rho, permutation_type="pairings", n_resamples=np.inf)
    return float(exact.statistic), float(exact.pvalue)


def agreement(
    table: pd.DataFrame, scores: pd.DataFrame, comparisons: pd.DataFrame, refs: pd.DataFrame
) -> pd.DataFrame:
    """Per setting with 3+ selections: Spearman with the paper, seed ρ, last − second-to-last."""
    rows, paper = selection_rows(table, scores, refs), paper_scores(refs)
    runs = stats.run_values(table).merge(rows[[*SETTING, "head_label"]])
    out = []
    for keys, group in rows.groupby(SETTING, sort=False):
        if len(group) < 3:
            continue
        setting = dict(zip(SETTING, keys, strict=True))
        wide = setting_rows(runs, setting).pivot_table("value", stats.PAIR_KEYS, "head_label")
        wide = wide.reindex(columns=group["head_label"]).dropna()
        seeds = wide.T.corr(method="spearman").to_numpy()  # seed × seed
        label = dict(zip(group["layers"], group["head_label"], strict=True))
        pair = [label.get(s, "") for s in ("last", "second_to_last")]
        gap = oriented(setting_rows(comparisons, setting), *pair).head(1).reset_index(drop=True)
        rho = dict(zip(("rho", "p"), spearman(group["mean"], group["paper"]), strict=True))
        found = pd.DataFrame([setting | rho]).assign(n_selections=len(group), n_seeds=len(wide))
        found["seed_rho"] = pd.Series(seeds[np.triu_indices(len(seeds), 1)]).mean()
        out.append(found.join(gap[["estimate", "low", "high", "verdict"]].set_axis(GAP, axis=1)))
    frame = pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=SETTING)
    return frame.assign(paper_gap=paper.get("last", np.nan) - paper.get("second_to_last", np.nan))
