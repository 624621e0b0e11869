"""Seed statistics against independent numpy/scipy computations on a hand-made table."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.results import stats
from bench.results.collect import read_table

SST2_BASE = 0.5  # majority-class accuracy on the (pretend) dev set


def _row(task, head, freeze, seed, value, metric, baseline, status="ok", split="dev", main=None):
    ok = status == "ok"
    return {
        "task": task,
        "encoder": "enc",
        "head": head.split("-")[0],
        "head_label": head,
        "layers": "-1" if head == "bilstm" else None,
        "freeze": freeze,
        "freeze_label": freeze,
        "seed": seed,
        "status": status,
        "main_metric": main or metric,
        "split": split if ok else None,
        "metric": metric if ok else None,
        "value": value if ok else None,
        "baseline": baseline if ok else None,
        "reason": None if ok else "boom",
    }


LINEAR = [0.81, 0.84, 0.79, 0.86, 0.83, 0.80]
POOLER = [0.78, 0.80, 0.80, 0.80, 0.76, 0.82]  # differences 3, 4, -1, 6, 7, -2 (x 0.01)


@pytest.fixture
def table() -> pd.DataFrame:
    rows = []
    for seed, (a, b) in enumerate(zip(LINEAR, POOLER, strict=True), start=1):
        rows.append(_row("sst2", "linear", "frozen", seed, a, "accuracy", SST2_BASE))
        rows.append(_row("sst2", "pooler-random", "frozen", seed, b, "accuracy", SST2_BASE))
    # a run at the baseline (collapsed to the majority class) and one that crashed
    rows.append(_row("sst2", "bilstm", "frozen", 1, 0.88, "accuracy", SST2_BASE))
    rows.append(_row("sst2", "bilstm", "frozen", 2, SST2_BASE, "accuracy", SST2_BASE))
    rows.append(_row("sst2", "bilstm", "frozen", 3, 0.87, "accuracy", SST2_BASE))
    rows.append(_row("sst2", "bilstm", "frozen", 4, None, None, None, "diverged", main="accuracy"))
    rows.append(_row("sst2", "bilstm", "frozen", 5, None, None, None, "failed", main="accuracy"))
    # STS-B: no baseline for correlations; pearson <= 0 fails, spearman is a second metric
    for seed, value in enumerate([0.85, -0.02, 0.0, 0.80], start=1):
        rows.append(_row("stsb", "linear", "full", seed, value, "pearson", None))
        rows.append(_row("stsb", "linear", "full", seed, 0.5, "spearman", None, main="pearson"))
    # CoLA: mcc baseline of a constant predictor is 0 in the table
    for seed, value in enumerate([0.40, 0.0, 0.35], start=1):
        rows.append(_row("cola", "linear", "full", seed, value, "mcc", 0.0))
        rows.append(_row("cola", "linear", "full", seed, 0.7, "accuracy", 0.69, main="mcc"))
    return pd.DataFrame(rows)


def _one(frame: pd.DataFrame, **keys) -> pd.Series:
    mask = np.logical_and.reduce([frame[k] == v for k, v in keys.items()])
    assert mask.sum() == 1, keys
    return frame[mask].iloc[0]


def test_cell_stats_match_numpy_and_scipy(table):
    out = stats.cell_stats(table)
    row = _one(out, task="sst2", head_label="linear")
    x = np.array(LINEAR)
    assert row["n"] == 6 and row["n_failed"] == 0 and row["metric"] == "accuracy"
    assert row["mean"] == pytest.approx(x.mean())
    assert row["std"] == pytest.approx(x.std(ddof=1))
    assert row["median"] == pytest.approx(np.median(x))
    assert (row["min"], row["max"]) == (x.min(), x.max())
    ref = sps.bootstrap(
        (x,),
        np.mean,
        n_resamples=10_000,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(0),
    ).confidence_interval
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ref.low, ref.high))
    # an independent numpy percentile bootstrap agrees up to resampling noise
    rng = np.random.default_rng(123)
    means = x[rng.integers(0, x.size, size=(20_000, x.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    assert row["ci_low"] == pytest.approx(low, abs=0.003)
    assert row["ci_high"] == pytest.approx(high, abs=0.003)
    assert row["ci_low"] <= row["mean"] <= row["ci_high"]


def test_failed_runs_use_the_majority_baseline_and_status(table):
    out = stats.cell_stats(table)
    row = _one(out, task="sst2", head_label="bilstm")
    # 5 runs: one at the baseline (counted, and inside mean/std), one diverged, one failed
    assert (row["n_runs"], row["n"], row["n_failed"], row["n_error"]) == (5, 3, 3, 2)
    assert row["mean"] == pytest.approx(np.mean([0.88, SST2_BASE, 0.87]))
    assert row["baseline"] == SST2_BASE
    runs = stats.run_values(table)
    bil = runs[runs["head_label"] == "bilstm"].set_index("seed")["fail_reason"].to_dict()
    assert bil == {1: "", 2: "at or below baseline", 3: "", 4: "diverged", 5: "failed"}


def test_failed_runs_for_correlations_use_zero(table):
    out = stats.cell_stats(table)
    stsb = _one(out, task="stsb")
    assert stsb["metric"] == "pearson" and np.isnan(stsb["baseline"])
    assert stsb["threshold"] == 0.0 and stsb["n_failed"] == 2  # -0.02 and 0.0
    cola = _one(out, task="cola")
    assert cola["metric"] == "mcc" and cola["n_failed"] == 1
    # an explicit metric instead of the main one; crashed cells follow into every metric
    acc = stats.cell_stats(table, metric="accuracy")
    assert set(acc["task"]) == {"sst2", "cola"}
    assert _one(acc, task="cola")["n_failed"] == 0  # 0.7 > 0.69
    assert _one(acc, task="sst2", head_label="bilstm")["n_error"] == 2


def test_compare_heads_wilcoxon_and_holm(table):
    out = stats.compare_heads(table)
    sst2 = out[out["task"] == "sst2"]
    assert len(sst2) == 3 and set(sst2["n_comparisons"]) == {3}
    row = _one(sst2, head_a="linear", head_b="pooler-random")
    d = np.array(LINEAR) - np.array(POOLER)
    assert row["n_pairs"] == 6 and row["seeds"] == "1,2,3,4,5,6"
    assert row["diff"] == pytest.approx(d.mean())
    assert row["p"] == pytest.approx(sps.wilcoxon(d, method="exact").pvalue)
    # by hand: ranks of |d| are 3, 4, 1, 5, 6, 2; T = 1 + 2 = 3; P(T <= 3) = 5/64, two-sided
    assert row["p"] == pytest.approx(2 * 5 / 64)
    assert row["p_min"] == pytest.approx(2 / 2**6)
    assert row["ci_low"] < row["diff"] < row["ci_high"]
    # bilstm pairs only over seeds where both have a value: 1, 2, 3
    bil = _one(sst2, head_a="bilstm", head_b="linear")
    assert bil["n_pairs"] == 3 and bil["seeds"] == "1,2,3"
    expected = stats.holm(sst2["p"].to_numpy())
    np.testing.assert_allclose(sst2["p_holm"], expected)
    # a family of one comparison is its own correction
    stsb = out[out["task"] == "stsb"]
    assert stsb.empty  # one head only: nothing to compare


def test_compare_heads_degenerate_pairs():
    rows = [
        _row("rte", h, "full", s, v, "accuracy", 0.5)
        for h, vals in (("a", [0.6, 0.7]), ("b", [0.6, 0.7]), ("c", [0.9, None]))
        for s, v in zip((1, 2), vals, strict=True)
        if v is not None
    ]
    out = stats.compare_heads(pd.DataFrame(rows))
    ab = _one(out, head_a="a", head_b="b")
    assert np.isnan(ab["p"]) and ab["reason"] == "all differences zero"
    ac = _one(out, head_a="a", head_b="c")
    assert ac["n_pairs"] == 1 and np.isnan(ac["p"]) and "fewer than 2" in ac["reason"]
    assert set(out["n_comparisons"]) == {0} and out["p_holm"].isna().all()


def test_paired_test_ties_survive_float_noise():
    pairs = [
        (0.81, 0.78),
        (0.72, 0.75),
        (0.84, 0.81),
        (0.5, 0.47),
        (0.9, 0.8),
        (0.66, 0.69),
        (0.61, 0.58),
        (0.77, 0.8),
        (0.5, 0.5),
    ]
    d = np.array([a - b for a, b in pairs])
    p, reason = stats.paired_test(d)
    assert reason == ""
    exact = [0.03, -0.03, 0.03, 0.03, 0.1, -0.03, 0.03, -0.03, 0.0]  # the true differences
    assert p == pytest.approx(sps.wilcoxon(exact, zero_method="wilcox").pvalue)
    assert p != pytest.approx(sps.wilcoxon(d).pvalue)  # float noise would change the ranks


def test_holm_against_a_hand_computation():
    p = [0.01, 0.04, 0.03, 0.005, np.nan]
    # m = 4 finite: sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04
    # step-down monotone: 0.02, 0.03, 0.06, 0.06
    np.testing.assert_allclose(stats.holm(p), [0.03, 0.06, 0.06, 0.02, np.nan])
    assert stats.holm([0.6, 0.5]).tolist() == [1.0, 1.0]  # capped at 1
    assert np.isnan(stats.holm([np.nan])).all()


def test_expected_max_equals_enumeration():
    values = [0.70, 0.75, 0.75, 0.90]
    for n in range(1, 5):
        brute = np.mean([max(t) for t in itertools.product(values, repeat=n)])
        assert stats.expected_max(values, n) == pytest.approx(brute)
    np.testing.assert_allclose(stats.expected_max(values, [1, 2]), [np.mean(values), 0.8125])
    with pytest.raises(ValueError):
        stats.expected_max(values, 0)


def test_expected_validation_performance(table):
    evp = stats.expected_validation_performance(table)
    lin = evp[(evp["task"] == "sst2") & (evp["head_label"] == "linear")]
    assert lin["n_seeds"].tolist() == [1, 2, 3, 4, 5, 6]
    assert lin["expected_max"].iloc[0] == pytest.approx(np.mean(LINEAR))
    assert lin["expected_max"].iloc[-1] <= max(LINEAR)
    assert lin["expected_max"].is_monotonic_increasing
    rng = np.random.default_rng(1)
    draws = np.array(LINEAR)[rng.integers(0, 6, size=(200_000, 3))].max(axis=1)
    assert lin["expected_max"].iloc[2] == pytest.approx(draws.mean(), abs=1e-3)
    assert lin["expected_max_std"].iloc[2] == pytest.approx(draws.std(), abs=1e-3)
    bil = evp[(evp["task"] == "sst2") & (evp["head_label"] == "bilstm")]
    assert bil["n_seeds"].max() == 3  # crashed runs are not draws


def test_tables_read_back_with_their_dtypes_and_old_tables_are_completed(tmp_path, table):
    path = tmp_path / "results.csv"
    table.to_csv(path, index=False)
    back = stats.normalize_table(read_table(path))
    assert back["seed"].dtype == "Int64"
    assert back.loc[back["head_label"] == "bilstm", "layers"].dropna().unique().tolist() == ["-1"]
    old = table.drop(columns=["layers", "main_metric"])
    old.to_csv(path, index=False)
    back = stats.normalize_table(read_table(path))
    assert back["main_metric"].dropna().unique().tolist() == ["accuracy", "pearson", "mcc"]
    with pytest.raises(ValueError, match="required"):
        stats.normalize_table(table.drop(columns=["value"]))
