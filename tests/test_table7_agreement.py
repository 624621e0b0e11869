"""Spearman agreement of our Table 7 ordering with the paper's, against NumPy ranks."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from test_tables import _cell

from bench.results.references import load_references
from bench.results.table7_agreement import FROZEN_ROWS, agreement, selection_rows

#: Made-up per-seed dev F1 by selection: seeds 1-3 agree on an order, seed 4 reverses it.
F1 = {
    "embeddings": [0.70, 0.71, 0.69, 0.90],
    "second_to_last": [0.85, 0.86, 0.84, 0.70],
    "last": [0.83, 0.82, 0.84, 0.72],
    "sum_last4": [0.88, 0.87, 0.89, 0.68],
    "concat_last4": [0.80, 0.81, 0.79, 0.75],
    "sum_all": [0.86, 0.84, 0.85, 0.71],
}


def _table(f1: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for layers, values in f1.items():
        for seed, value in enumerate(values, start=1):
            rows += _cell(
                "conll2003",
                "minilm",
                f"bilstm-{layers}",
                "frozen",
                seed,
                {"f1": value},
                head="bilstm",
                layers=layers,
                main="f1",
            )
    return pd.DataFrame(rows)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks, 1 = smallest: each tied value gets the mean of the ranks it spans."""
    order = np.sort(x)
    return np.array([np.mean(np.flatnonzero(order == v)) + 1 for v in x])


def _rho(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def test_the_agreement_matches_a_numpy_rank_correlation():
    refs = load_references()
    rows = selection_rows(_table(F1), refs)
    assert list(rows["setting"]) == [s for s, _ in FROZEN_ROWS]  # the paper's order
    paper = refs[(refs.task == "conll2003") & (refs.split == "dev")].set_index("setting")
    ours = np.array([100 * np.mean(F1[s]) for s, _ in FROZEN_ROWS])
    theirs = np.array([paper.loc[s, "value"] for s, _ in FROZEN_ROWS], dtype=float)
    assert rows["mean"].to_numpy() == pytest.approx(ours)
    assert rows["paper"].to_numpy() == pytest.approx(theirs)
    assert list(rows["rank"]) == list(7 - _ranks(ours))  # 1 = best
    (a,) = agreement(_table(F1), refs).itertuples()
    assert a.rho == pytest.approx(_rho(ours, theirs))
    assert a.n_settings == 6 and a.n_seeds == 4
    per_seed = np.array([F1[s] for s, _ in FROZEN_ROWS]).T  # seeds × selections
    pairs = [_rho(per_seed[i], per_seed[j]) for i, j in combinations(range(4), 2)]
    assert a.seed_rho == pytest.approx(np.mean(pairs))
    assert a.seed_rho < 0.5  # seed 4 reverses the others: the ordering is not stable


def test_fewer_than_three_selections_give_no_agreement():
    two = {k: F1[k] for k in ("last", "sum_all")}
    assert agreement(_table(two), load_references()).empty


def test_a_seed_missing_a_selection_is_left_out_of_the_seed_agreement():
    f1 = {k: list(v) for k, v in F1.items()}
    f1["last"] = f1["last"][:3]  # seed 4 never ran `last`
    (a,) = agreement(_table(f1), load_references()).itertuples()
    assert a.n_seeds == 3 and a.seed_rho > 0.5  # seeds 1-3 agree with one another


def test_the_sentence_quotes_both_agreements_and_calls_unstable_orderings_noise():
    from bench.results.table7_agreement import agreement_sentence

    (a,) = [r for _, r in agreement(_table(F1), load_references()).iterrows()]
    text = agreement_sentence(a)
    assert f"= {a['rho']:.2f} over 6 selections" in text
    assert f"mean pairwise ρ of {a['seed_rho']:.2f} (4 seeds" in text
    assert "mostly seed noise" in text


@pytest.mark.parametrize("n", [3, 4, 6])
def test_the_p_value_is_exact_over_every_pairing(n):
    """Brute force: scipy's ρ for every ordering of one side (ties: none in these data)."""
    from itertools import permutations

    from scipy.stats import spearmanr

    from bench.results.table7_agreement import _spearman

    rng = np.random.default_rng(n)
    a, b = rng.normal(size=n), rng.normal(size=n)
    rho, p = _spearman(a, b)
    assert rho == pytest.approx(spearmanr(a, b).statistic)
    every = [spearmanr(a, np.array(q)).statistic for q in permutations(b)]
    assert p == pytest.approx(np.mean(np.abs(every) >= abs(rho) - 1e-12))
    assert 0 < p <= 1


def test_the_last_against_the_second_to_last_is_a_paired_t_test_beside_the_papers_gap():
    """Our BiLSTM gap (the one the paper's ordering turns on) against scipy, and the paper's
    gap from references.csv: like for like, both read the layers with a BiLSTM."""
    from scipy import stats as sps

    from bench.results.table7_agreement import agreement_sentence

    refs = load_references()
    (a,) = [r for _, r in agreement(_table(F1), refs).iterrows()]
    last, before = np.array(F1["last"]), np.array(F1["second_to_last"])
    res = sps.ttest_rel(last, before)
    ci = res.confidence_interval(0.95)
    assert a["last_gap"] == pytest.approx(100 * (last - before).mean())
    assert [a["last_gap_low"], a["last_gap_high"]] == pytest.approx([100 * ci.low, 100 * ci.high])
    assert a["last_gap_p"] == pytest.approx(res.pvalue) and a["last_gap_n"] == 4
    paper = refs[(refs.task == "conll2003") & (refs.split == "dev")].set_index("setting")
    gap = float(paper.loc["last", "value"] - paper.loc["second_to_last", "value"])
    assert a["paper_last_gap"] == pytest.approx(gap)
    text = agreement_sentence(a)
    assert f"ours {100 * (last - before).mean():+.1f} points (95% t-interval" in text
    assert f"4 paired seeds, paired t-test p = {res.pvalue:.2g}), BERT-base's {gap:+.1f}" in text


def test_without_both_rows_there_is_no_gap():
    from bench.results.table7_agreement import agreement_sentence

    f1 = {k: v for k, v in F1.items() if k != "last"}
    (a,) = [r for _, r in agreement(_table(f1), load_references()).iterrows()]
    assert np.isnan(a["last_gap"]) and a["last_gap_n"] == 0
    assert "second-to-last" not in agreement_sentence(a)
