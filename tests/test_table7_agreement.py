"""Table 7 beside the paper's: our rows from the scores frame, ρ against scipy and a brute-force
count, the last − second-to-last gap as the comparisons frame has it."""

from __future__ import annotations

from itertools import combinations, permutations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.results import frames, stats
from bench.results.predictions import predictions_table
from bench.results.references import load_references
from bench.results.table7_agreement import FROZEN_ROWS, agreement, selection_rows, spearman
from conftest import ROOT

#: Made-up per-seed dev F1 by selection: seeds 1-3 agree on an order, seed 4 reverses it.
F1 = {
    "embeddings": [0.70, 0.71, 0.69, 0.90],
    "second_to_last": [0.85, 0.86, 0.84, 0.70],
    "last": [0.83, 0.82, 0.84, 0.72],
    "sum_last4": [0.88, 0.87, 0.89, 0.68],
    "concat_last4": [0.80, 0.81, 0.79, 0.75],
    "sum_all": [0.86, 0.84, 0.85, 0.71],
}
SELECTIONS = [s for s, _ in FROZEN_ROWS]
#: The paper's numbers, read straight from the CSV (percent → the metric's 0–1 scale).
REFS = pd.read_csv(ROOT / "bench" / "results" / "references.csv")
PAPER = REFS[(REFS.task == "conll2003") & (REFS.split == "dev")].set_index("setting")["value"] / 100


def _table(f1: dict[str, list[float]]) -> pd.DataFrame:
    rows = [
        {
            "task": "conll2003",
            "encoder": "minilm",
            "head": "bilstm",
            "head_label": f"bilstm-{layers}",
            "layers": layers,
            "freeze": "frozen",
            "freeze_label": "frozen",
            "seed": seed,
            "status": "ok",
            "main_metric": "f1",
            "split": "dev",
            "metric": "f1",
            "value": value,
            "best_constant": 0.0,
        }
        for layers, values in f1.items()
        for seed, value in enumerate(values, start=1)
    ]
    return stats.normalize_table(pd.DataFrame(rows))


def _frames(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    return frames.build(stats.run_values(table), predictions_table([]))


def _brute_p(a: np.ndarray, b: np.ndarray) -> float:
    """Share of the orderings of ``b`` whose |ρ| with ``a`` is at least the observed one."""
    rho = sps.spearmanr(a, b).statistic
    every = [sps.spearmanr(a, np.array(q)).statistic for q in permutations(b)]
    return float(np.mean(np.abs(every) >= abs(rho) - 1e-12))


def test_our_rows_are_the_scores_means_beside_the_papers_in_its_order():
    table = _table(F1)
    scores, _ = _frames(table)
    rows = selection_rows(table, scores, load_references())
    assert list(rows["layers"]) == SELECTIONS
    ours = np.array([np.mean(F1[s]) for s in SELECTIONS])
    assert rows["mean"].to_numpy() == pytest.approx(ours)
    assert rows["paper"].to_numpy() == pytest.approx(PAPER[SELECTIONS].to_numpy())
    assert list(rows["rank"]) == list(sps.rankdata(-ours))  # 1 = best
    assert list(rows["paper_rank"]) == list(sps.rankdata(-PAPER[SELECTIONS].to_numpy()))
    low, high = sps.t.interval(0.95, 3, loc=ours[0], scale=sps.sem(F1[SELECTIONS[0]]))
    assert rows[["low", "high"]].iloc[0].tolist() == pytest.approx([low, high])  # seeds only


def test_rho_matches_scipy_with_an_exact_p_and_our_seeds_agreement():
    table = _table(F1)
    scores, comparisons = _frames(table)
    (a,) = agreement(table, scores, comparisons, load_references()).itertuples()
    ours = np.array([np.mean(F1[s]) for s in SELECTIONS])
    assert a.rho == pytest.approx(sps.spearmanr(ours, PAPER[SELECTIONS]).statistic)
    assert a.p == pytest.approx(_brute_p(ours, PAPER[SELECTIONS].to_numpy()))
    per_seed = np.array([F1[s] for s in SELECTIONS]).T  # seeds × selections
    pairs = [
        sps.spearmanr(per_seed[i], per_seed[j]).statistic for i, j in combinations(range(4), 2)
    ]
    assert (a.n_selections, a.n_seeds) == (6, 4)
    assert a.seed_rho == pytest.approx(np.mean(pairs)) and a.seed_rho < 0.5  # seed 4 reverses


@pytest.mark.parametrize("n", [3, 4, 6])
def test_the_p_value_is_exact_over_every_pairing(n):
    rng = np.random.default_rng(n)
    a, b = rng.normal(size=n), rng.normal(size=n)
    rho, p = spearman(a, b)
    assert rho == pytest.approx(sps.spearmanr(a, b).statistic)
    assert p == pytest.approx(_brute_p(a, b)) and 0 < p <= 1
    assert np.isnan(spearman(a, np.ones(n))[0]) and np.isnan(spearman(a[:2], b[:2])[1])


def test_the_gap_is_the_comparisons_row_read_last_minus_second_to_last():
    table = _table(F1)
    scores, comparisons = _frames(table)
    (a,) = agreement(table, scores, comparisons, load_references()).itertuples()
    diff = np.array(F1["last"]) - np.array(F1["second_to_last"])
    assert a.gap == pytest.approx(diff.mean())
    assert a.paper_gap == pytest.approx(PAPER["last"] - PAPER["second_to_last"])
    # the same pair stored the other way round (head_a second_to_last): read flipped
    row = comparisons.iloc[:1].assign(
        head_a="bilstm-second_to_last",
        head_b="bilstm-last",
        estimate=0.02,
        low=0.01,
        high=0.05,
        verdict="better",
    )
    (b,) = agreement(table, scores, row, load_references()).itertuples()
    assert (b.gap, b.gap_low, b.gap_high, b.verdict) == (-0.02, -0.05, -0.01, "worse")


def test_missing_selections_seeds_and_rows():
    refs = load_references()
    two = _table({k: F1[k] for k in ("last", "sum_all")})
    assert agreement(two, *_frames(two), refs).empty  # fewer than three selections
    f1 = {k: list(v) for k, v in F1.items()}
    f1["last"] = f1["last"][:3]  # seed 4 never ran `last`: out of the seeds' agreement
    table = _table(f1)
    (a,) = agreement(table, *_frames(table), refs).itertuples()
    assert a.n_seeds == 3 and a.seed_rho > 0.5
    table = _table({k: v for k, v in F1.items() if k != "last"})
    (c,) = agreement(table, *_frames(table), refs).itertuples()
    assert np.isnan(c.gap) and c.n_selections == 5


SEVEN = ROOT / "results" / "fair_table7"


@pytest.mark.skipif(not (SEVEN / "results.csv").is_file(), reason="fair_table7 not run")
def test_the_committed_experiment_against_a_pandas_count():
    raw = pd.read_csv(SEVEN / "results.csv")
    dev = raw[(raw.split == "dev") & (raw.metric == "f1") & (raw.status == "ok")]
    means = dev.groupby("layers")["value"].mean()[SELECTIONS]
    table = stats.normalize_table(raw)
    keys = [*stats.SETTING_KEYS, "head_label"]
    scores = stats.run_values(table).groupby(keys)["value"].agg(mean="mean", n="size")
    scores = scores.reset_index().assign(low=np.nan, high=np.nan)
    no_pairs = pd.DataFrame(columns=frames.COMPARISON_COLUMNS)
    (a,) = agreement(table, scores, no_pairs, load_references()).itertuples()
    assert a.rho == pytest.approx(sps.spearmanr(means, PAPER[SELECTIONS]).statistic)
    assert a.n_seeds == dev["seed"].nunique() == 5 and np.isnan(a.gap)
