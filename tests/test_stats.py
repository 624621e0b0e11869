"""Seed statistics against independent numpy/scipy computations on a hand-made table."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.results import frames, stats
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


def _t_by_hand(x, confidence=0.95):
    half = sps.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return x.mean() - half, x.mean() + half


SKEWED = [0.50, 0.51, 0.51, 0.52, 0.52, 0.53, 0.55, 0.60, 0.80, 0.90]


def test_failed_runs_use_the_majority_baseline_and_status(table):
    out = frames.scores(stats.run_values(table))
    row = _one(out, task="sst2", head_label="bilstm")
    # 5 runs: one at the baseline (counted, and inside the mean), one diverged, one failed
    assert (row["n"], row["n_failed"]) == (3, 3)
    assert row["mean"] == pytest.approx(np.mean([0.88, SST2_BASE, 0.87]))
    assert row["best_constant"] == SST2_BASE  # no best constant recorded: the baseline
    runs = stats.run_values(table)
    bil = runs[runs["head_label"] == "bilstm"].set_index("seed")["fail_reason"].to_dict()
    assert bil == {1: "", 2: "at or below baseline", 3: "", 4: "diverged", 5: "failed"}


def test_failed_runs_for_correlations_use_zero(table):
    out = frames.scores(stats.run_values(table))
    stsb = _one(out, task="stsb")
    assert stsb["metric"] == "pearson" and stsb["best_constant"] == 0.0
    assert stsb["n_failed"] == 2  # -0.02 and 0.0
    cola = _one(out, task="cola")
    assert cola["metric"] == "mcc" and cola["n_failed"] == 1
    # an explicit metric instead of the main one; crashed cells follow into every metric
    acc = stats.run_values(table, metric="accuracy")
    assert set(acc["task"]) == {"sst2", "cola"}
    assert not acc[acc["task"] == "cola"]["failed"].any()  # 0.7 > 0.69
    bilstm = acc[(acc["task"] == "sst2") & (acc["head_label"] == "bilstm")]
    assert (bilstm["status"] != "ok").sum() == 2


def test_t_interval_is_the_student_t_formula():
    x = np.array(SKEWED)
    assert stats.t_interval(x) == pytest.approx(_t_by_hand(x))
    assert stats.t_interval([*SKEWED, np.nan], 0.9) == pytest.approx(_t_by_hand(x, 0.9))
    assert stats.t_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)  # no spread: zero width
    assert np.isnan(stats.t_interval([0.7, np.nan])).all()


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
    crashed = stats.expected_validation_performance(table[table["status"] != "ok"])
    assert crashed.empty and list(crashed.columns) == list(evp.columns)


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
    cells = frames.scores(stats.run_values(table)).set_index("task")
    assert cells.loc["mrpc", "best_constant"] == 0.6 and cells.loc["mrpc", "n_failed"] == 3
    assert cells.loc["rte", "best_constant"] == 0.5  # the majority baseline stands in


def test_failure_threshold_precedence():
    assert stats.failure_threshold("accuracy", 0.5, 0.62) == 0.62
    assert stats.failure_threshold("accuracy", 0.5) == 0.5
    assert stats.failure_threshold("pearson", np.nan, 0.0) == 0.0
    assert stats.failure_threshold("mcc", np.nan) == 0.0
    assert np.isnan(stats.failure_threshold("f1", np.nan, np.nan))


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
