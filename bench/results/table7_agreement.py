"""How closely our ordering of BERT Table 7's layer selections follows the paper's.

Devlin et al. (2019, Table 7) rank six ways of feeding frozen BERT-base layers into a
two-layer BiLSTM on CoNLL-2003. A headbench experiment that runs the same selections on
another encoder (``fair_table7``: MiniLM) can compare orderings, not absolute numbers.
Two figures say how much that comparison is worth:

- ``rho``: Spearman's rank correlation between our mean F1 per selection and the paper's;
- ``seed_rho``: the mean Spearman correlation between the orderings two of *our own*
  seeds give (every pair of seeds that ran every selection). When our seeds do not agree
  with one another, an ordering that differs from the paper's is noise, not evidence
  about the encoder.
"""

from __future__ import annotations

from itertools import combinations, permutations

import numpy as np
import pandas as pd
from scipy.stats import rankdata, spearmanr

from bench.results import stats

#: The task of Table 7.
TABLE7_TASK = "conll2003"
#: Table 7's rows: (setting, paper's row name), in the paper's order; fine-tune = linear
#: head, encoder trained; the others: frozen features into a two-layer BiLSTM.
TABLE7_ROWS = (
    ("finetune", "Fine-tune (BERT-base)"),
    ("embeddings", "Embeddings"),
    ("second_to_last", "Second-to-Last Hidden"),
    ("last", "Last Hidden"),
    ("sum_last4", "Weighted Sum Last Four Hidden"),
    ("concat_last4", "Concat Last Four Hidden"),
    ("sum_all", "Weighted Sum All 12 Layers"),
)
#: The frozen rows, whose ordering is compared.
FROZEN_ROWS = TABLE7_ROWS[1:]
#: Below this mean seed-to-seed Spearman ρ, our own ordering of the selections is called
#: mostly seed noise.
SEED_AGREEMENT = 0.5
#: Columns of :func:`selection_rows`.
ROW_COLUMNS = [
    "encoder",
    "setting",
    "paper_row",
    "paper",
    "mean",
    "t_low",
    "t_high",
    "n",
    "rank",
    "paper_rank",
]
#: Columns of :func:`agreement`.
AGREEMENT_COLUMNS = [
    "encoder",
    "split",
    "n_settings",
    "rho",
    "p",
    "n_seeds",
    "seed_rho",
    "last_gap",
    "last_gap_low",
    "last_gap_high",
    "last_gap_p",
    "last_gap_n",
    "paper_last_gap",
]


def _frozen_bilstm(frame: pd.DataFrame, split: str) -> pd.DataFrame:
    names = dict(FROZEN_ROWS)
    mine = frame[
        (frame["task"] == TABLE7_TASK)
        & (frame["split"] == split)
        & (frame["freeze"] == "frozen")
        & (frame["head"] == "bilstm")
    ]
    return mine[mine["layers"].isin(names)]


def paper_scores(refs: pd.DataFrame) -> pd.Series:
    """The paper's dev F1 (×100) by setting."""
    rows = refs[(refs["task"] == TABLE7_TASK) & (refs["split"] == "dev") & (refs["metric"] == "f1")]
    return rows.set_index("setting")["value"].astype(float)


def paper_last_gap(refs: pd.DataFrame) -> float:
    """The paper's Table 7 (BERT-base, frozen BiLSTM, dev F1 ×100): last minus second-to-last.

    Args:
        refs: Reference numbers (:func:`bench.results.references.load_references`).

    Returns:
        The difference; NaN when either row is missing.
    """
    paper = paper_scores(refs)
    if not {"last", "second_to_last"} <= set(paper.index):
        return float("nan")
    return float(paper["last"] - paper["second_to_last"])


def _last_gap(wide: pd.DataFrame) -> dict[str, float | int]:
    """Our last minus second-to-last selection, paired by seed (×100 but p), NaN without both."""
    if not {"last", "second_to_last"} <= set(wide.columns):
        return {
            "last_gap": np.nan,
            "last_gap_low": np.nan,
            "last_gap_high": np.nan,
            "last_gap_p": np.nan,
            "last_gap_n": 0,
        }
    pair = wide[["last", "second_to_last"]].dropna()
    p, low, high, _ = stats.paired_t_test(pair["last"], pair["second_to_last"])
    return {
        "last_gap": float(100 * (pair["last"] - pair["second_to_last"]).mean()),
        "last_gap_low": 100 * low,
        "last_gap_high": 100 * high,
        "last_gap_p": p,
        "last_gap_n": len(pair),
    }


def selection_rows(table: pd.DataFrame, refs: pd.DataFrame, split: str = "dev") -> pd.DataFrame:
    """One row per encoder and layer selection: our mean and rank beside the paper's.

    Args:
        table: Tidy results table.
        refs: Reference numbers (:func:`bench.results.references.load_references`).
        split: The split our numbers come from (the paper reports dev).

    Returns:
        Columns :data:`ROW_COLUMNS`, in the paper's row order; ``mean``/``t_low``/
        ``t_high`` ×100; ranks 1 = best (ties share the average rank), over the selections
        both sides have.
    """
    cells = _frozen_bilstm(stats.cell_stats(table, split=split), split)
    cells = cells[cells["n"] > 0]
    paper = paper_scores(refs)
    out = []
    names = dict(FROZEN_ROWS)
    order = {s: i for i, (s, _) in enumerate(FROZEN_ROWS)}
    for encoder, group in cells.groupby("encoder", sort=True):
        group = group[group["layers"].isin(paper.index)].copy()
        group["order"] = group["layers"].map(order)
        group = group.sort_values("order")
        ours = 100 * group["mean"].to_numpy(dtype=float)
        theirs = paper.loc[group["layers"]].to_numpy(dtype=float)
        ranks = pd.Series(-ours).rank(method="average").to_numpy()
        paper_ranks = pd.Series(-theirs).rank(method="average").to_numpy()
        for i, (_, r) in enumerate(group.iterrows()):
            out.append(
                {
                    "encoder": encoder,
                    "setting": r["layers"],
                    "paper_row": names[r["layers"]],
                    "paper": theirs[i],
                    "mean": ours[i],
                    "t_low": 100 * r["t_low"],
                    "t_high": 100 * r["t_high"],
                    "n": int(r["n"]),
                    "rank": float(ranks[i]),
                    "paper_rank": float(paper_ranks[i]),
                }
            )
    return pd.DataFrame(out, columns=ROW_COLUMNS)


#: Up to this many selections the p-value is exact (every pairing enumerated).
EXACT_MAX = 8


def _spearman(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Spearman's ρ and its two-sided p-value: exact over every pairing for few items.

    scipy's default p-value comes from a t approximation that is meaningless for six
    items (ρ = 1 over three gives p = 0); the exact one counts the pairings of ``b`` with
    ``a`` whose |ρ| is at least the observed one.
    """
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return np.nan, np.nan
    result = spearmanr(a, b)
    rho = float(result.statistic)
    if len(a) > EXACT_MAX:
        return rho, float(result.pvalue)
    ra, rb = rankdata(a), rankdata(b)
    perms = np.array(list(permutations(rb)))
    ra_c, perms_c = ra - ra.mean(), perms - perms.mean(axis=1, keepdims=True)
    rhos = perms_c @ ra_c / (np.linalg.norm(perms_c, axis=1) * np.linalg.norm(ra_c))
    return rho, float(np.mean(np.abs(rhos) >= abs(rho) - 1e-12))


def agreement(table: pd.DataFrame, refs: pd.DataFrame, split: str = "dev") -> pd.DataFrame:
    """Spearman agreement with the paper's ordering, and between our own seeds.

    Args:
        table: Tidy results table.
        refs: Reference numbers.
        split: The split our numbers come from.

    Returns:
        One row per encoder with at least three selections the paper also ran: columns
        :data:`AGREEMENT_COLUMNS`. ``rho``/``p``: Spearman between our means and the
        paper's, with its exact two-sided permutation p-value; ``seed_rho``:
        mean Spearman over every pair of our seeds that ran every one of those selections
        (NaN with fewer than two such seeds); ``n_seeds``: how many seeds that is.
    """
    rows = selection_rows(table, refs, split)
    runs = _frozen_bilstm(stats.run_values(table, metric="main", split=split), split)
    out = []
    for encoder, group in rows.groupby("encoder", sort=True):
        if len(group) < 3:
            continue
        rho, p = _spearman(group["mean"].to_numpy(), group["paper"].to_numpy())
        mine = runs[(runs["encoder"] == encoder) & runs["layers"].isin(group["setting"])]
        every = mine.pivot_table(index="seed", columns="layers", values="value")
        wide = every.dropna().reindex(columns=list(group["setting"]))
        pairs = [
            _spearman(wide.loc[a].to_numpy(), wide.loc[b].to_numpy())[0]
            for a, b in combinations(wide.index, 2)
        ]
        seed_rho = float(np.nanmean(pairs)) if pairs and not np.all(np.isnan(pairs)) else np.nan
        out.append(
            {
                "encoder": encoder,
                "split": split,
                "n_settings": len(group),
                "rho": rho,
                "p": p,
                "n_seeds": len(wide),
                "seed_rho": seed_rho,
                **_last_gap(every),
                "paper_last_gap": paper_last_gap(refs),
            }
        )
    return pd.DataFrame(out, columns=AGREEMENT_COLUMNS)


def agreement_sentence(a: pd.Series) -> str:
    """One row of :func:`agreement` in words (one sentence, ending with a full stop)."""
    rho = "undefined (a side has no spread)" if pd.isna(a["rho"]) else f"{a['rho']:.2f}"
    text = (
        f"Spearman ρ between our mean {a['split']} F1 per layer selection and BERT-base's "
        f"in the paper = {rho} over {a['n_settings']} selections"
    )
    if pd.notna(a["p"]):
        text += f" (exact permutation p = {a['p']:.2g})"
    if pd.notna(a["seed_rho"]):
        text += (
            f". Our own seeds agree with one another at a mean pairwise ρ of "
            f"{a['seed_rho']:.2f} ({a['n_seeds']} seeds that ran every selection)"
        )
        if a["seed_rho"] < SEED_AGREEMENT:
            text += (
                f": below {SEED_AGREEMENT}, our ordering is mostly seed noise, so a "
                "disagreement with the paper says little about the encoder"
            )
    if pd.notna(a["last_gap"]) and pd.notna(a["paper_last_gap"]):
        text += (
            ". The last layer against the second-to-last, both read with the BiLSTM as in "
            f"the paper: ours {_signed(a['last_gap'])} points ("
        )
        if pd.notna(a["last_gap_p"]):
            text += (
                f"95% t-interval {a['last_gap_low']:.1f} to {a['last_gap_high']:.1f}, "
                f"{a['last_gap_n']} paired seeds, paired t-test p = {a['last_gap_p']:.2g}"
            )
        else:
            text += f"{a['last_gap_n']} paired seed{'s' if a['last_gap_n'] != 1 else ''}"
        text += f"), BERT-base's {_signed(a['paper_last_gap'])} in the paper"
    return text + "."


def _signed(value: float) -> str:
    """``-4.1`` or ``+0.3``: a difference with its sign, one decimal."""
    return f"{value:+.1f}"
