"""Seed statistics against independent numpy/scipy computations on a hand-made table."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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


def _numpy_bca(x, confidence, n_resamples, rng):
    """Efron's BCa interval of the mean, written out in NumPy (independent of scipy's)."""
    theta = x.mean()
    boot = x[rng.integers(0, x.size, size=(n_resamples, x.size))].mean(axis=1)
    z0 = sps.norm.ppf(np.mean(boot < theta))
    jack = (x.sum() - x) / (x.size - 1)
    dev = jack.mean() - jack
    accel = np.sum(dev**3) / (6 * np.sum(dev**2) ** 1.5)
    z = sps.norm.ppf([(1 - confidence) / 2, (1 + confidence) / 2])
    levels = sps.norm.cdf(z0 + (z0 + z) / (1 - accel * (z0 + z)))
    return np.quantile(boot, levels)


def _t_by_hand(x, confidence=0.95):
    half = sps.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return x.mean() - half, x.mean() + half


def test_cell_stats_match_numpy_and_scipy(table):
    out = stats.cell_stats(table)
    row = _one(out, task="sst2", head_label="linear")
    x = np.array(LINEAR)
    assert row["n"] == 6 and row["n_failed"] == 0 and row["metric"] == "accuracy"
    assert row["mean"] == pytest.approx(x.mean())
    assert row["std"] == pytest.approx(x.std(ddof=1))
    assert row["median"] == pytest.approx(np.median(x))
    assert (row["min"], row["max"]) == (x.min(), x.max())
    assert (row["t_low"], row["t_high"]) == pytest.approx(_t_by_hand(x))
    assert row["ci_method"] == "BCa"
    ref = sps.bootstrap(
        (x,), np.mean, n_resamples=10_000, method="BCa", rng=np.random.default_rng(0)
    ).confidence_interval
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ref.low, ref.high))
    assert row["ci_low"] <= row["mean"] <= row["ci_high"]
    assert np.isnan(row["best_constant"])  # the fixture is an older table without it


SKEWED = [0.50, 0.51, 0.51, 0.52, 0.52, 0.53, 0.55, 0.60, 0.80, 0.90]


def test_the_bootstrap_interval_is_bca_not_percentile():
    """On a skewed sample BCa shifts the interval right of the percentile one."""
    rows = [_row("rte", "linear", "full", s, v, "accuracy", 0.5) for s, v in enumerate(SKEWED)]
    row = _one(stats.cell_stats(pd.DataFrame(rows)), head_label="linear")
    x = np.array(SKEWED)
    low, high = _numpy_bca(x, 0.95, 40_000, np.random.default_rng(123))
    assert row["ci_method"] == "BCa"
    assert row["ci_low"] == pytest.approx(low, abs=0.006)
    assert row["ci_high"] == pytest.approx(high, abs=0.012)
    percentile = stats.bootstrap_ci(x)  # the old default stays the percentile method
    assert row["ci_low"] > percentile[0] + 0.005 and row["ci_high"] > percentile[1] + 0.01
    assert (row["t_low"], row["t_high"]) == pytest.approx(_t_by_hand(x))


def test_intervals_for_one_two_and_constant_samples_leak_no_warning():
    values = {"one": [0.7], "two": [0.6, 0.7], "constant": [0.55, 0.55, 0.55]}
    rows = [
        _row("rte", head, "full", seed, v, "accuracy", 0.5)
        for head, sample in values.items()
        for seed, v in enumerate(sample)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = stats.cell_stats(pd.DataFrame(rows))
        diffs = stats.compare_heads(pd.DataFrame(rows))
    one = _one(out, head_label="one")
    assert one["ci_method"] == "none"
    assert np.isnan([one["ci_low"], one["ci_high"], one["t_low"], one["t_high"]]).all()
    two = _one(out, head_label="two")
    assert two["ci_method"] == "BCa" and two["ci_low"] >= 0.6 and two["ci_high"] <= 0.7
    # t with one degree of freedom: mean ± 12.706 · s / sqrt(2)
    half = 12.7062047 * np.std([0.6, 0.7], ddof=1) / np.sqrt(2)
    assert (two["t_low"], two["t_high"]) == pytest.approx((0.65 - half, 0.65 + half))
    const = _one(out, head_label="constant")
    assert const["ci_method"] == "constant"
    assert (const["ci_low"], const["ci_high"], const["t_low"], const["t_high"]) == (0.55,) * 4
    assert _one(diffs, head_a="constant", head_b="two")["reason"] == ""


def test_bca_falls_back_to_percentile_when_scipy_cannot_compute_it():
    x = np.array([0.0, 1.0, 1.0])

    def scipy_bca(seed):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sps.bootstrap(
                (x,), np.mean, n_resamples=3, method="BCa", rng=np.random.default_rng(seed)
            ).confidence_interval

    degenerate = [s for s in range(200) if np.isnan(scipy_bca(s).low)]
    assert degenerate  # three resamples that all land at or above the mean
    for seed in degenerate[:3]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            low, high, method = stats.bootstrap_interval(x, n_resamples=3, seed=seed)
        ref = sps.bootstrap(
            (x,), np.mean, n_resamples=3, method="percentile", rng=np.random.default_rng(seed)
        ).confidence_interval
        assert method == "percentile" and (low, high) == pytest.approx((ref.low, ref.high))


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


def test_compare_heads_paired_t_wilcoxon_and_holm(table):
    out = stats.compare_heads(table)
    sst2 = out[out["task"] == "sst2"]
    assert len(sst2) == 3 and set(sst2["n_comparisons"]) == {3}
    row = _one(sst2, head_a="linear", head_b="pooler-random")
    d = np.array(LINEAR) - np.array(POOLER)
    assert row["n_pairs"] == 6 and row["seeds"] == "1,2,3,4,5,6"
    assert row["diff"] == pytest.approx(d.mean())
    # the headline test is the paired t-test: by hand and by scipy
    t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
    assert row["p"] == pytest.approx(2 * sps.t.sf(abs(t), d.size - 1))
    assert row["p"] == pytest.approx(sps.ttest_rel(LINEAR, POOLER).pvalue)
    assert (row["t_low"], row["t_high"]) == pytest.approx(_t_by_hand(d))
    assert row["p_min"] == 0.0 and row["reason"] == ""
    # Wilcoxon stays beside it; by hand: ranks of |d| are 3, 4, 1, 5, 6, 2; T = 1 + 2 = 3;
    # P(T <= 3) = 5/64, two-sided
    assert row["p_wilcoxon"] == pytest.approx(2 * 5 / 64)
    assert row["p_wilcoxon"] == pytest.approx(sps.wilcoxon(d, method="exact").pvalue)
    assert row["p_wilcoxon_min"] == pytest.approx(2 / 2**6)
    assert row["ci_method"] == "BCa" and row["ci_low"] < row["diff"] < row["ci_high"]
    # bilstm pairs only over seeds where both have a value: 1, 2, 3
    bil = _one(sst2, head_a="bilstm", head_b="linear")
    assert bil["n_pairs"] == 3 and bil["seeds"] == "1,2,3"
    np.testing.assert_allclose(sst2["p_holm"], stats.holm(sst2["p"].to_numpy()))
    stsb = out[out["task"] == "stsb"]
    assert stsb.empty  # one head only: nothing to compare


def test_ten_seeds_the_t_test_passes_holm_where_wilcoxon_cannot():
    """With 28 comparisons, 0.05/28 is below the exact Wilcoxon floor at 10 seeds."""
    gains = 0.02 + 0.002 * np.sin(np.arange(10))  # a clear, consistent gain
    rows = [
        _row("sst2", head, "frozen", seed, 0.8 + (gain if head == "a" else 0.0), "accuracy", 0.5)
        for seed, gain in enumerate(gains)
        for head in ("a", "b")
    ]
    row = _one(stats.compare_heads(pd.DataFrame(rows)), head_a="a")
    assert row["p_wilcoxon"] == pytest.approx(row["p_wilcoxon_min"])
    assert row["p_wilcoxon_min"] == pytest.approx(2 / 2**10) and 2 / 2**10 > 0.05 / 28
    assert row["p"] < 0.05 / 28
    assert row["p"] == pytest.approx(sps.ttest_1samp(gains, 0.0).pvalue)


def test_compare_heads_degenerate_pairs():
    rows = [
        _row("rte", h, "full", s, v, "accuracy", 0.5)
        for h, vals in (("a", [0.6, 0.7]), ("b", [0.6, 0.7]), ("c", [0.9, None]), ("d", [0.5, 0.6]))
        for s, v in zip((1, 2), vals, strict=True)
        if v is not None
    ]
    out = stats.compare_heads(pd.DataFrame(rows))
    ab = _one(out, head_a="a", head_b="b")
    assert np.isnan(ab["p"]) and ab["reason"] == "all differences zero"
    assert np.isnan(ab["p_wilcoxon"]) and ab["reason_wilcoxon"] == "all differences zero"
    assert (ab["ci_low"], ab["ci_high"], ab["ci_method"]) == (0.0, 0.0, "constant")
    ac = _one(out, head_a="a", head_b="c")
    assert ac["n_pairs"] == 1 and np.isnan(ac["p"]) and "fewer than 2" in ac["reason"]
    # a constant non-zero difference (float noise aside): no t, but Wilcoxon has its floor
    ad = _one(out, head_a="a", head_b="d")
    assert np.isnan(ad["p"]) and np.isnan(ad["t_low"]) and "constant" in ad["reason"]
    assert ad["p_wilcoxon"] == pytest.approx(0.5) and ad["p_wilcoxon_min"] == 0.5
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


def test_paired_test_is_scipys_wilcoxon_with_ties_zeros_or_neither():
    rng = np.random.default_rng(7)
    cases = [rng.integers(-4, 5, size=n) / 100 for n in (2, 3, 5, 8, 10, 12, 13, 14, 20)]
    cases += [rng.normal(size=n) for n in (2, 6, 10, 13, 30)]  # distinct: the exact path
    cases += [np.array([0.02, 0.02, 0.02]), np.array([0.0, 0.01, -0.01, 0.0, 0.03])]
    permuted = 0
    for d in cases:
        if np.all(d == 0):
            continue
        p, reason = stats.paired_test(d)
        expected = sps.wilcoxon(np.round(d, stats.DECIMALS), zero_method="wilcox").pvalue
        assert reason == "" and p == pytest.approx(expected, rel=1e-12, abs=1e-15), d
        nonzero = np.abs(d[d != 0])
        permuted += (len(set(nonzero)) < len(d)) and len(d) <= 13
    assert permuted >= 6  # the vectorised permutation path was taken and agreed


def test_positive_rank_sum_is_wilcoxons_statistic_along_an_axis():
    d = np.array([[0.3, -0.1, 0.0, 0.1, 0.2], [-0.5, 0.5, 0.25, -0.25, 0.0]])
    # row 0: non-zero |d| 0.3, 0.1, 0.1, 0.2 -> ranks 4, 1.5, 1.5, 3; positives 0.3, 0.1, 0.2
    np.testing.assert_allclose(stats.positive_rank_sum(d), [4 + 1.5 + 3, 3.5 + 1.5])
    np.testing.assert_allclose(stats.positive_rank_sum(d.T, axis=0), [8.5, 5.0])
    for row in d:
        expected = sps.wilcoxon(row, zero_method="wilcox", alternative="greater").statistic
        assert stats.positive_rank_sum(row) == pytest.approx(expected)


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
    assert back["best_constant"].isna().all() and back["best_constant"].dtype == "float64"
    with pytest.raises(ValueError, match="required"):
        stats.normalize_table(table.drop(columns=["value"]))


# --------------------------------------------------------------------------- best constant


def test_failure_against_the_best_constant_where_the_table_has_it():
    values = {1: 0.55, 2: 0.60 + 1e-9, 3: 0.61, 4: 0.59}
    rows = []
    for seed, value in values.items():
        row = _row("mrpc", "linear", "full", seed, value, "f1", 0.0)
        row["best_constant"] = 0.6  # all-positive F1 on the reporting split
        rows.append(row)
    # an older setting in the same table: no best constant, the majority baseline rules
    for seed, value in {1: 0.55, 2: 0.49}.items():
        rows.append(_row("rte", "linear", "full", seed, value, "accuracy", 0.5))
    rows.append(_row("rte", "linear", "full", 3, None, None, None, "failed", main="accuracy"))
    table = pd.DataFrame(rows)
    runs = stats.run_values(table).set_index(["task", "seed"])
    mrpc = runs.loc["mrpc"]
    # an independent rule: value <= best constant + atol
    expected = {s: v <= 0.6 + stats.BASELINE_ATOL for s, v in values.items()}
    assert mrpc["failed"].to_dict() == expected
    assert set(mrpc.loc[mrpc["failed"], "fail_reason"]) == {"at or below best constant"}
    assert (mrpc["threshold"] == 0.6).all()
    rte = runs.loc["rte"]
    assert rte["fail_reason"].to_dict() == {1: "", 2: "at or below baseline", 3: "failed"}
    cells = stats.cell_stats(table).set_index("task")
    assert cells.loc["mrpc", "best_constant"] == 0.6 and cells.loc["mrpc", "baseline"] == 0.0
    assert cells.loc["mrpc", "n_failed"] == 3 and cells.loc["mrpc", "threshold"] == 0.6
    assert np.isnan(cells.loc["rte", "best_constant"]) and cells.loc["rte", "threshold"] == 0.5


def test_failure_threshold_precedence():
    assert stats.failure_threshold("accuracy", 0.5, 0.62) == 0.62
    assert stats.failure_threshold("accuracy", 0.5) == 0.5
    assert stats.failure_threshold("pearson", np.nan, 0.0) == 0.0
    assert stats.failure_threshold("mcc", np.nan) == 0.0
    assert np.isnan(stats.failure_threshold("f1", np.nan, np.nan))


# --------------------------------------------------------------------------- per example


def _accuracy(labels, preds):
    """A plain Python metric, as callers pass one."""
    return sum(int(a == b) for a, b in zip(labels, preds, strict=True)) / len(labels)


@pytest.fixture
def predictions():
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 2, size=80)
    # head A right ~80% of the time (3 seeds), head B ~70% (2 seeds): different seed counts
    a = np.where(rng.random((3, 80)) < 0.8, labels, 1 - labels)
    b = np.where(rng.random((2, 80)) < 0.7, labels, 1 - labels)
    return labels, a, b


def test_a_mean_is_placed_against_the_threshold_with_its_t_interval():
    scores = np.array([0.50, 0.51, 0.53, 0.52, 0.54])
    low, _ = sps.t.interval(0.95, len(scores) - 1, scores.mean(), sps.sem(scores))
    assert low < 0.51 < scores.mean() < 0.527
    where = stats.against_threshold
    assert where(scores.mean(), low, 0.527) == stats.NOT_ABOVE  # RTE's best constant
    assert where(scores.mean(), low, 0.51) == stats.INTERVAL_REACHES
    assert where(scores.mean(), low, 0.40) == stats.ABOVE_THRESHOLD
    # a mean equal to the threshold up to float noise is not above it (as a failed run)
    assert where(0.5 + 1e-9, 0.49, 0.5) == stats.NOT_ABOVE
    assert where(0.7, np.nan, 0.5) == stats.ABOVE_THRESHOLD  # one seed: the mean decides
    assert where(0.7, 0.6, np.nan) == "" and where(np.nan, np.nan, 0.5) == ""


def test_paired_bootstrap_equals_a_direct_numpy_implementation(predictions):
    labels, a, b = predictions
    res = stats.paired_bootstrap(labels, a, b, _accuracy, n_resamples=2_000, rng=11)
    rng = np.random.default_rng(11)
    draws = []
    for _ in range(2_000):
        idx = rng.integers(0, labels.size, size=labels.size)
        acc_a = (a[:, idx] == labels[idx]).mean(axis=1).mean()
        acc_b = (b[:, idx] == labels[idx]).mean(axis=1).mean()
        draws.append(acc_a - acc_b)
    dist = np.array(draws)
    observed = (a == labels).mean(axis=1).mean() - (b == labels).mean(axis=1).mean()
    np.testing.assert_allclose(res.distribution, dist, atol=1e-12)
    assert res.diff == pytest.approx(observed)
    assert (res.low, res.high) == pytest.approx(tuple(np.percentile(dist, [2.5, 97.5])))
    tail = min(np.sum(dist <= 0), np.sum(dist >= 0))
    assert res.p == pytest.approx(min(1.0, 2 * (tail + 1) / (dist.size + 1)))
    assert res.method == "percentile" and res.n_examples == 80 and res.n_undefined == 0
    assert res.low < res.diff < res.high


def test_paired_bootstrap_matches_scipy_on_per_example_differences():
    """One seed each, accuracy: δ* is the bootstrap mean of the per-example differences."""
    rng = np.random.default_rng(8)
    labels = rng.integers(0, 2, size=150)
    a = np.where(rng.random((1, 150)) < 0.85, labels, 1 - labels)
    b = np.where(rng.random((1, 150)) < 0.75, labels, 1 - labels)
    per_example = (a[0] == labels).astype(float) - (b[0] == labels)
    for method in ("percentile", "BCa"):
        res = stats.paired_bootstrap(labels, a, b, _accuracy, 4_000, rng=1, method=method)
        ref = sps.bootstrap(
            (per_example,), np.mean, n_resamples=20_000, method=method, rng=np.random.default_rng(2)
        ).confidence_interval
        assert res.method == method
        assert (res.low, res.high) == pytest.approx((ref.low, ref.high), abs=0.01)


def test_paired_bootstrap_known_answers(predictions):
    labels, a, _ = predictions
    same = stats.paired_bootstrap(labels, a, a.copy(), _accuracy, n_resamples=300)
    assert (same.diff, same.p, same.low, same.high) == (0.0, 1.0, 0.0, 0.0)
    assert same.method == "constant"
    right, wrong = labels[None, :], 1 - labels[None, :]
    perfect = stats.paired_bootstrap(labels, right, wrong, _accuracy, n_resamples=300)
    assert perfect.diff == 1.0 and perfect.p == pytest.approx(2 / 301)
    swapped = stats.paired_bootstrap(labels, wrong, right, _accuracy, n_resamples=300)
    assert swapped.diff == -1.0 and swapped.p == perfect.p
    with pytest.raises(ValueError, match="shape"):
        stats.paired_bootstrap(labels, a[:, :10], a, _accuracy)


# --------------------------------------------------------------------------- Holm over all


def _holm_rejections(p, alpha):
    """Holm's step-down test as a decision rule, written out (independent of stats.holm)."""
    finite = [(v, i) for i, v in enumerate(p) if not np.isnan(v)]
    rejected = set()
    for rank, (v, i) in enumerate(sorted(finite)):
        if v > alpha / (len(finite) - rank):
            break
        rejected.add(i)
    return rejected


def test_holm_all_corrects_once_over_every_setting():
    comps = pd.DataFrame(
        {
            "task": ["sst2", "sst2", "rte", "rte", "cola", "cola"],
            "freeze_label": ["frozen", "frozen", "full", "full", "full", "frozen"],
            "p": [0.0001, 0.004, 0.03, 0.2, np.nan, 0.0004],
        }
    )
    out = stats.holm_all(comps)
    # m = 5 finite: sorted 0.0001, 0.0004, 0.004, 0.03, 0.2 -> x5, x4, x3, x2, x1
    # = 0.0005, 0.0016, 0.012, 0.06, 0.2 (already monotone)
    np.testing.assert_allclose(out["p_holm_all"], [0.0005, 0.012, 0.06, 0.2, np.nan, 0.0016])
    assert out["significance"].tolist() == ["***", "*", "n.s.", "n.s.", "", "**"]
    assert set(out["n_comparisons_all"]) == {5}
    assert out["p"].equals(comps["p"])  # the input is not modified
    # one family over everything is stricter than a family per setting
    per_setting = comps.groupby(["task", "freeze_label"])["p"].transform(
        lambda s: pd.Series(stats.holm(s), index=s.index)
    )
    assert (out["p_holm_all"].dropna() >= per_setting.dropna()).all()
    assert (out["p_holm_all"].dropna() > per_setting.dropna()).any()
    rng = np.random.default_rng(3)
    for _ in range(50):
        p = rng.random(12) ** 3
        p[rng.random(12) < 0.1] = np.nan
        adjusted = stats.holm_all(pd.DataFrame({"p": p}))["p_holm_all"].to_numpy()
        for alpha in (0.001, 0.01, 0.05, 0.2):
            assert set(np.flatnonzero(adjusted <= alpha)) == _holm_rejections(p, alpha)


def test_holm_all_on_compare_heads_output(table):
    comps = stats.compare_heads(table)
    out = stats.holm_all(comps)
    np.testing.assert_allclose(out["p_holm_all"], stats.holm(comps["p"].to_numpy()))
    tiers = {
        "***": lambda v: v < 0.001,
        "**": lambda v: 0.001 <= v < 0.01,
        "*": lambda v: 0.01 <= v < 0.05,
        "n.s.": lambda v: v >= 0.05,
    }
    for tier, p in zip(out["significance"], out["p_holm_all"], strict=True):
        assert tiers[tier](p)


# --------------------------------------------------------------------------- EVP of trials


def _trial(task, head, freeze, trial, status, score):
    return {
        "task": task,
        "encoder": "enc",
        "head": head,
        "head_label": head,
        "layers": "-1",
        "freeze": freeze,
        "freeze_label": freeze,
        "trial": trial,
        "status": status,
        "selection_metric": "accuracy",
        "selection_score": score,
    }


def _brute_force_evp(scores, n):
    """Over every ordered n-tuple of trials: mean/std of the best successful score, P(none)."""
    best = []
    for draw in itertools.product(scores, repeat=n):
        ok = [s for s in draw if s is not None]
        best.append(max(ok) if ok else None)
    got = np.array([b for b in best if b is not None])
    none = sum(b is None for b in best) / len(best)
    return (got.mean(), got.std(), none) if got.size else (np.nan, np.nan, none)


def test_evp_from_trials_against_enumeration():
    linear = [0.70, 0.74, 0.74, 0.81, 0.78]
    bilstm = [("ok", 0.72), ("failed", np.nan), ("ok", 0.85), ("diverged", np.nan),
              ("ok", -np.inf), ("ok", 0.80)]  # fmt: skip
    rows = [_trial("sst2", "linear", "frozen", k, "ok", v) for k, v in enumerate(linear, 1)]
    rows += [_trial("sst2", "bilstm", "frozen", k, s, v) for k, (s, v) in enumerate(bilstm, 1)]
    rows.append(_trial("sst2", "linear", "frozen", 5, "ok", 0.78))  # listed twice: counts once
    rows += [_trial("rte", "linear", "full", k, "failed", None) for k in (1, 2)]
    evp = stats.evp_from_trials(pd.DataFrame(rows))

    lin = evp[(evp["task"] == "sst2") & (evp["head_label"] == "linear")]
    assert lin["n_trials"].tolist() == [1, 2, 3, 4, 5] and set(lin["trials"]) == {5}
    np.testing.assert_allclose(lin["expected_max"], stats.expected_max(linear, range(1, 6)))
    for n, row in zip(range(1, 6), lin.itertuples(), strict=True):
        mean, std, none = _brute_force_evp(linear, n)
        assert (row.expected_max, row.expected_max_std, row.p_all_failed) == pytest.approx(
            (mean, std, none)
        )

    bil = evp[(evp["task"] == "sst2") & (evp["head_label"] == "bilstm")]
    assert set(bil["trials"]) == {6} and set(bil["failed_trials"]) == {3}  # incl. the -inf
    scores = [v if s == "ok" and np.isfinite(v) else None for s, v in bilstm]
    for n, row in zip(range(1, 7), bil.itertuples(), strict=True):
        mean, std, none = _brute_force_evp(scores, n)
        assert row.expected_max == pytest.approx(mean)
        assert row.expected_max_std == pytest.approx(std)
        assert row.p_all_failed == pytest.approx(none) == pytest.approx(0.5**n)
    assert bil["expected_max"].is_monotonic_increasing
    # excluding the failed trials instead would be the curve of the 3 successes alone
    assert bil["expected_max"].iloc[1] < stats.expected_max([0.72, 0.85, 0.80], 2)

    rte = evp[evp["task"] == "rte"]
    assert rte["n_trials"].tolist() == [1, 2] and rte["expected_max"].isna().all()
    assert rte["p_all_failed"].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="selection_score"):
        stats.evp_from_trials(pd.DataFrame(rows).drop(columns=["selection_score"]))


# --------------------------------------------------------------------------- simultaneous


def _family_table(rng: np.random.Generator) -> tuple[pd.DataFrame, dict]:
    """Three settings of four heads, ten paired seeds each; some gaps are real, some not."""
    rows, values = [], {}
    for task, gaps in (("sst2", (0.0, 0.038, 0.03)), ("rte", (0.0, 0.01, 0.037))):
        for freeze in ("frozen", "full"):
            base = rng.normal(0.7, 0.01, size=10)
            for head, gap in zip(("a", "b", "c", "d"), (0.05, *gaps), strict=True):
                scores = base + gap + rng.normal(0, 0.01, size=10)
                values[(task, freeze, head)] = scores
                for seed, value in enumerate(scores, start=1):
                    rows.append(_row(task, head, freeze, seed, value, "accuracy", 0.5))
    return pd.DataFrame(rows), values


def test_the_simultaneous_interval_is_scipys_t_interval_at_one_minus_alpha_over_m():
    table, values = _family_table(np.random.default_rng(13))
    cells = stats.cell_stats(table)
    shown = stats.holm_all(stats.leader_comparisons(cells, stats.compare_heads(table)))
    m = int(shown["p"].notna().sum())
    assert m == 12 and set(shown["n_comparisons_all"]) == {m}
    assert shown["sim_confidence"].iloc[0] == pytest.approx(1 - 0.05 / m)
    for _, r in shown.iterrows():
        a = values[(r["task"], r["freeze_label"], r["head_a"])]
        b = values[(r["task"], r["freeze_label"], r["head_b"])]
        test = sps.ttest_rel(a, b)
        sim = test.confidence_interval(confidence_level=1 - 0.05 / m)
        assert (r["sim_low"], r["sim_high"]) == pytest.approx((sim.low, sim.high), rel=1e-9)
        # the per-comparison interval stays what it was: the unadjusted 95% one
        one = test.confidence_interval(confidence_level=0.95)
        assert (r["t_low"], r["t_high"]) == pytest.approx((one.low, one.high), rel=1e-9)
        assert r["sim_low"] < r["t_low"] and r["t_high"] < r["sim_high"]
    # the frame is oriented leader − other; the intervals flip with it
    assert (shown["head_a"] == "a").all() and (shown["diff"] > 0).all()


def test_a_t_interval_can_exclude_zero_where_holm_is_not_significant_the_simultaneous_cannot():
    table, _ = _family_table(np.random.default_rng(13))
    cells = stats.cell_stats(table)
    shown = stats.holm_all(stats.leader_comparisons(cells, stats.compare_heads(table)))
    unadjusted = (shown["t_low"] > 0) & (shown["p_holm_all"] >= 0.05)
    assert unadjusted.any()  # the audit's inconsistency exists in this family
    assert not ((shown["sim_low"] > 0) & (shown["p_holm_all"] >= 0.05)).any()


@given(
    seed=st.integers(0, 2**32 - 1),
    m=st.integers(1, 30),
    n=st.integers(2, 12),
    effect=st.floats(0.0, 3.0),
)
@settings(max_examples=200, deadline=None)
def test_a_simultaneous_interval_that_excludes_zero_is_always_holm_significant(seed, m, n, effect):
    """Property: for any family, sim interval excludes 0 => raw p < α/m => Holm p < α."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(m):
        d = rng.normal(effect * rng.random() * rng.choice([-1, 1]), 1.0, size=n)
        test = sps.ttest_1samp(d, 0.0)
        rows.append(
            {
                "diff": d.mean(),
                "se": d.std(ddof=1) / np.sqrt(n),
                "df": n - 1,
                "p": test.pvalue,
            }
        )
    out = stats.holm_all(pd.DataFrame(rows))
    excludes = (out["sim_low"] > 0) | (out["sim_high"] < 0)
    assert (out["p_holm_all"][excludes] < 0.05).all()
    # and it is exactly Bonferroni's test of the same t statistic
    bonferroni = out["p"] < 0.05 / m
    assert (excludes == bonferroni).all()


def test_simultaneous_intervals_are_exercised_on_both_sides_of_zero():
    """The property test above is not vacuous: large effects exclude 0, small ones do not."""
    rng = np.random.default_rng(5)
    d_big = [rng.normal(2.0, 1.0, size=10) for _ in range(5)]
    d_none = [rng.normal(0.0, 1.0, size=10) for _ in range(5)]
    frame = pd.DataFrame(
        {
            "diff": [d.mean() for d in d_big + d_none],
            "se": [d.std(ddof=1) / np.sqrt(d.size) for d in d_big + d_none],
            "df": 9,
            "p": [sps.ttest_1samp(d, 0.0).pvalue for d in d_big + d_none],
        }
    )
    out = stats.holm_all(frame)
    assert (out["sim_low"].iloc[:5] > 0).all() and (out["sim_low"].iloc[5:] < 0).all()
    direct = [
        d.mean() + np.array([-1, 1]) * sps.t.ppf(1 - 0.05 / 20, 9) * d.std(ddof=1) / np.sqrt(10)
        for d in d_big + d_none
    ]
    np.testing.assert_allclose(out[["sim_low", "sim_high"]].to_numpy(), np.array(direct))


def test_comparisons_without_a_test_have_no_simultaneous_interval():
    rows = [
        _row("rte", h, "full", s, v, "accuracy", 0.5)
        for h, vals in (("a", [0.6, 0.7, 0.8]), ("b", [0.5, 0.6, 0.75]), ("d", [0.5, 0.6, 0.7]))
        for s, v in zip((1, 2, 3), vals, strict=True)
    ]
    out = stats.compare_heads(pd.DataFrame(rows))
    ad = _one(out, head_a="a", head_b="d")  # constant difference: no t
    assert np.isnan(ad["se"]) and np.isnan(ad["df"])
    shown = stats.holm_all(out)
    assert shown["n_comparisons_all"].iloc[0] == 2
    assert np.isnan(_one(shown, head_a="a", head_b="d")["sim_low"])
    ab = _one(shown, head_a="a", head_b="b")
    a, b = [0.6, 0.7, 0.8], [0.5, 0.6, 0.75]
    ci = sps.ttest_rel(a, b).confidence_interval(confidence_level=1 - 0.05 / 2)
    assert (ab["sim_low"], ab["sim_high"]) == pytest.approx((ci.low, ci.high))
