"""Crossed seed × batch-order runs: intervals and tests that respect both random effects.

The estimates are checked against independent constructions (a dummy-variable least
squares fit for the residual mean square, the row/column-mean form of the variance of
the grand mean) and their behaviour against simulation: under the null, the crossed test
keeps its level where the naive t-test over all runs does not.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.report.context import build_context
from bench.report.headline import headline_frame, headline_sentence
from bench.report.inputs import load_inputs
from bench.report.per_example import per_example_row
from bench.results import crossed, stats
from bench.results.curves import curve_leaders
from bench.results.reproduction import compare
from conftest import frozen_sst2_key

REPO = Path(__file__).resolve().parents[1]
VARIANCE = REPO / "results" / "variance_seeds"


def _grid(rng: np.random.Generator, n_i: int, n_j: int, sa: float, sb: float, se: float):
    return (
        rng.normal(0, sa, size=(n_i, 1))
        + rng.normal(0, sb, size=(1, n_j))
        + rng.normal(0, se, size=(n_i, n_j))
    )


def _residual_ms_by_least_squares(x: np.ndarray) -> float:
    """MS_E from the additive model fitted by least squares on dummy variables."""
    n_i, n_j = x.shape
    rows, cols = np.meshgrid(np.arange(n_i), np.arange(n_j), indexing="ij")
    design = np.column_stack(
        [np.ones(x.size)]
        + [(rows.ravel() == i).astype(float) for i in range(1, n_i)]
        + [(cols.ravel() == j).astype(float) for j in range(1, n_j)]
    )
    coef, *_ = np.linalg.lstsq(design, x.ravel(), rcond=None)
    resid = x.ravel() - design @ coef
    return float(resid @ resid) / ((n_i - 1) * (n_j - 1))


def test_mean_squares_and_variance_match_independent_constructions():
    x = _grid(np.random.default_rng(3), 5, 4, sa=1.0, sb=0.7, se=0.5)
    est = crossed.crossed_mean(x)
    assert est.ms_error == pytest.approx(_residual_ms_by_least_squares(x), rel=1e-10)
    assert est.ms_seed == pytest.approx(4 * np.var(x.mean(axis=1), ddof=1), rel=1e-12)
    assert est.ms_order == pytest.approx(5 * np.var(x.mean(axis=0), ddof=1), rel=1e-12)
    # both components positive here: V = var(row means)/I + var(col means)/J - MS_E/(IJ)
    assert est.ms_seed > est.ms_error and est.ms_order > est.ms_error
    var = (
        np.var(x.mean(axis=1), ddof=1) / 5
        + np.var(x.mean(axis=0), ddof=1) / 4
        - _residual_ms_by_least_squares(x) / 20
    )
    assert est.se == pytest.approx(np.sqrt(var), rel=1e-10)
    terms = (
        (est.ms_seed / 20) ** 2 / 4 + (est.ms_order / 20) ** 2 / 3 + (est.ms_error / 20) ** 2 / 12
    )
    assert est.df == pytest.approx(var**2 / terms, rel=1e-10)
    low, high = crossed.crossed_t_interval(x)
    half = sps.t.ppf(0.975, est.df) * est.se
    assert (low, high) == pytest.approx((x.mean() - half, x.mean() + half), rel=1e-10)


def test_a_negative_component_is_set_to_zero_and_drops_out():
    # no order effect at all and a large residual: MS_B < MS_E, so V = MS_A / (IJ)
    x = np.array([[0.0, 1.0, -1.0], [5.0, 4.0, 6.0], [2.0, 3.0, 1.0], [9.0, 7.0, 8.0]])
    est = crossed.crossed_mean(x)
    assert est.ms_order < est.ms_error
    assert est.se == pytest.approx(np.sqrt(est.ms_seed / 12), rel=1e-12)
    # with only MS_A left, its df are Satterthwaite's: I - 1
    assert est.df == pytest.approx(3.0, rel=1e-12)
    # and then the interval is the one-sample t over the seeds' means
    low, high = crossed.crossed_t_interval(x)
    ref = sps.t.interval(0.95, df=3, loc=x.mean(), scale=sps.sem(x.mean(axis=1)))
    assert (low, high) == pytest.approx(ref, rel=1e-10)


def test_the_crossed_test_keeps_its_level_where_the_naive_t_test_does_not():
    rng = np.random.default_rng(0)
    crossed_p, naive_p = [], []
    for _ in range(1000):
        d = _grid(rng, 5, 5, sa=1.0, sb=1.0, se=1.0)  # paired differences under H0
        crossed_p.append(crossed.crossed_t_test(d)[0])
        naive_p.append(sps.ttest_1samp(d.ravel(), 0.0).pvalue)
    crossed_rate = float(np.mean(np.asarray(crossed_p) < 0.05))
    naive_rate = float(np.mean(np.asarray(naive_p) < 0.05))
    assert 0.02 <= crossed_rate <= 0.07, crossed_rate
    assert naive_rate > 0.2, naive_rate  # 25 runs counted as independent: far too many


def test_the_crossed_interval_covers_the_mean_at_its_level():
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(1000):
        x = 3.0 + _grid(rng, 5, 5, sa=0.5, sb=1.0, se=0.3)
        low, high = crossed.crossed_t_interval(x)
        covered += low <= 3.0 <= high
    assert 0.92 <= covered / 1000 <= 0.99


def test_grids_are_found_only_where_seeds_and_orders_cross():
    index = pd.MultiIndex.from_tuples(
        list(itertools.product([1, 2, 3], [1, 2, 3, 4])), names=["seed", "order_seed"]
    )
    values = pd.Series(np.arange(12.0), index=index)
    grid = crossed.grid_of(values)
    assert grid is not None and grid.shape == (3, 4)
    assert crossed.design_text(grid) == "3 seeds × 4 orders"
    # one failed run: cut as the variance table cuts a grid (its seed goes first on a tie)
    holed = values.copy()
    holed[(2, 3)] = np.nan
    kept = crossed.grid_of(holed)
    assert kept is not None and list(kept.index) == [1, 3] and kept.shape == (2, 4)
    assert kept.equals(crossed.complete_grid(holed.unstack())[0])
    more = pd.Series(
        np.arange(16.0),
        index=pd.MultiIndex.from_tuples(
            list(itertools.product([1, 2, 3, 4], [1, 2, 3, 4])), names=["seed", "order_seed"]
        ),
    )
    more[(2, 3)] = np.nan
    kept = crossed.grid_of(more)
    assert kept is not None and list(kept.index) == [1, 3, 4] and kept.shape == (3, 4)
    # order drawn from the seed (one order per seed): not crossed
    own = pd.Series(
        [0.1, 0.2, 0.3],
        index=pd.MultiIndex.from_tuples([(1, -1), (2, -1), (3, -1)], names=["seed", "order_seed"]),
    )
    assert crossed.grid_of(own) is None
    diagonal = pd.Series(
        [0.1, 0.2, 0.3],
        index=pd.MultiIndex.from_tuples([(1, 1), (2, 2), (3, 3)], names=["seed", "order_seed"]),
    )
    assert crossed.grid_of(diagonal) is None


def test_the_pigeonhole_bootstrap_resamples_rows_and_columns():
    x = _grid(np.random.default_rng(5), 5, 5, sa=1.0, sb=1.0, se=0.2)
    low, high, how = crossed.pigeonhole_interval(x, n_resamples=4000, seed=0)
    assert how == crossed.PIGEONHOLE and low < x.mean() < high
    # the same resamples written as a loop
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 5, size=(4000, 5))
    cols = rng.integers(0, 5, size=(4000, 5))
    means = [x[np.ix_(r, c)].mean() for r, c in zip(rows, cols, strict=True)]
    assert (low, high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), rel=1e-12)
    # wider than the bootstrap that treats the 25 runs as independent
    iid = sps.bootstrap((x.ravel(),), np.mean, method="percentile", rng=0).confidence_interval
    assert high - low > 1.5 * (iid.high - iid.low)
    assert crossed.pigeonhole_interval(np.full((2, 3), 0.7)) == (0.7, 0.7, "constant")


def _row(head: str, seed: int, value: float, **extra: object) -> dict[str, object]:
    """One tidy-table row: a frozen SST-2 run of ``head`` with accuracy ``value``."""
    return {
        **frozen_sst2_key(head, seed),
        "status": "ok",
        "main_metric": "accuracy",
        "split": "dev",
        "metric": "accuracy",
        "value": value,
        "baseline": 0.5,
        "best_constant": 0.5,
        **extra,
    }


def _crossed_table(shift: float = 0.01) -> pd.DataFrame:
    rng = np.random.default_rng(11)
    seed_effect = rng.normal(0, 0.02, size=4)
    order_effect = rng.normal(0, 0.02, size=3)
    rows = []
    for head, offset in (("linear", 0.0), ("bilstm", shift)):
        for (i, s), (j, o) in itertools.product(enumerate(range(1, 5)), enumerate(range(1, 4))):
            value = 0.8 + offset + seed_effect[i] + order_effect[j] + rng.normal(0, 0.004)
            rows.append(_row(head, s, value, order_seed=o))
    return pd.DataFrame(rows)


def test_heads_compared_over_crossed_runs_use_the_crossed_analysis():
    table = _crossed_table()
    comp = stats.compare_heads(table).iloc[0]
    assert comp["design"] == "4 seeds × 3 orders" and comp["n_pairs"] == 12
    wide = table.pivot_table(index=["seed", "order_seed"], columns="head_label", values="value")
    d = (wide[comp["head_a"]] - wide[comp["head_b"]]).unstack().to_numpy()
    p, low, high, _ = crossed.crossed_t_test(d)
    assert (comp["p"], comp["t_low"], comp["t_high"]) == pytest.approx((p, low, high))
    assert comp["ci_method"] == crossed.PIGEONHOLE
    assert np.isnan(comp["p_wilcoxon"]) and comp["reason_wilcoxon"]
    cells = stats.cell_stats(table)
    assert set(cells["design"]) == {"4 seeds × 3 orders"}
    one = cells[cells["head_label"] == "linear"].iloc[0]
    grid = wide["linear"].unstack().to_numpy()
    assert (one["t_low"], one["t_high"]) == pytest.approx(crossed.crossed_t_interval(grid))
    # the same runs with the order drawn from each seed stay independent pairs
    plain = table[table["order_seed"] == 1].assign(order_seed=np.nan)
    row = stats.compare_heads(plain).iloc[0]
    assert row["design"] == ""
    a = plain[plain["head_label"] == row["head_a"]]["value"].to_numpy()
    b = plain[plain["head_label"] == row["head_b"]]["value"].to_numpy()
    assert row["p"] == pytest.approx(sps.ttest_rel(a, b).pvalue)


def test_the_verdict_names_the_crossed_design(tmp_path):
    out = tmp_path / "crossed"
    out.mkdir()
    _crossed_table().to_csv(out / "results.csv", index=False)
    frame = headline_frame(build_context(load_inputs(out)))
    r = frame.iloc[0]
    assert r["design"] == "4 seeds × 3 orders"
    sentence = headline_sentence(r, multi_encoder=False)
    assert "12 paired runs (4 seeds × 3 orders, crossed)" in sentence
    assert "Satterthwaite" in sentence


@pytest.mark.skipif(not (VARIANCE / "predictions.parquet").exists(), reason="no committed study")
def test_the_per_example_bootstrap_uses_every_run_of_a_crossed_study():
    ctx = build_context(load_inputs(VARIANCE))
    frame = headline_frame(ctx)
    n_runs = ctx.runs.groupby(["task", "head_label"]).size()
    for _, r in frame.iterrows():
        found = per_example_row(ctx.inputs.predictions, r, n_resamples=20)
        assert found is not None
        assert found["seeds_a"] == n_runs[(r["task"], r["winner"])]
        assert found["seeds_b"] == n_runs[(r["task"], r["runner_up"])]


def _uneven_table() -> pd.DataFrame:
    """Head a leads on its mean, but on the seeds both completed it is behind."""
    rows = []
    values = {"a": [0.80, 0.81, 0.82, 0.83, 0.95, 0.96], "b": [0.82, 0.83, 0.845, 0.85]}
    for head, seq in values.items():
        for seed, value in enumerate(seq, start=1):
            rows.append(_row(head, seed, value))
    for seed in (5, 6):
        rows.append({**rows[-1], "seed": seed, "status": "failed", "value": np.nan})
    return pd.DataFrame(rows)


def test_a_leader_significantly_behind_on_paired_seeds_is_not_called_ahead(tmp_path):
    out = tmp_path / "uneven"
    out.mkdir()
    _uneven_table().to_csv(out / "results.csv", index=False)
    ctx = build_context(load_inputs(out))
    frame = headline_frame(ctx)
    r = frame.iloc[0]
    assert r["winner"] == "a" and r["margin"] < 0 and r["p_holm"] < 0.05
    assert not r["significant"] and r["tier"].endswith("(behind)")
    sentence = headline_sentence(r, multi_encoder=False)
    assert "beats" not in sentence and "it is behind by 2.1 points" in sentence
    # significantly ahead of the winner by mean on the paired seeds: not a tie
    assert "b" in r["behind"].split(", ") and "b" not in r["tied"].split(", ")


def test_a_curve_change_to_a_head_behind_on_paired_seeds_is_not_significant():
    big = _uneven_table().assign(train_size=400)
    small = _uneven_table().assign(train_size=100)
    small.loc[small["head_label"] == "b", "value"] += 0.2  # b leads at 100, on every seed
    both = pd.concat([small, big], ignore_index=True)
    leaders = curve_leaders(both)
    # at 400, a leads on its mean (two extra high seeds) but is behind on paired seeds
    at_400 = leaders[leaders["train_size"] == 400].iloc[0]
    assert at_400["leader"] == "a" and at_400["changed"]
    assert at_400["change"] < 0 and at_400["change_p_holm"] < 0.05
    assert not at_400["change_significant"] and not at_400["margin_significant"]


@pytest.mark.skipif(not (VARIANCE / "results.csv").exists(), reason="no committed study")
def test_a_self_check_of_a_crossed_study_replaces_only_the_rerun_runs():
    committed = pd.read_csv(VARIANCE / "results.csv")
    mine = (
        (committed["task"] == "sst2")
        & (committed["head_label"] == "linear")
        & (committed["seed"] == 1)
        & committed["order_seed"].isin([2, 3])
    )
    today = committed[mine].copy()
    today.loc[today["order_seed"] == 2, "value"] += 0.05  # one run moved, one identical
    rep = compare(committed, today)
    cell = rep.cells.set_index("order_seed")
    assert cell.loc[2, "diff"] == pytest.approx(0.05) and cell.loc[3, "identical"]
    setting = rep.settings.iloc[0]
    runs = stats.run_values(committed)
    head = runs[(runs["task"] == "sst2") & (runs["head_label"] == "linear")]
    assert len(head) == 25
    expected = (head["value"].sum() + 0.05) / 25  # only (seed 1, order 2) moved
    assert setting["today_mean"] == pytest.approx(expected, rel=1e-9)
    assert setting["seeds"] == [1, 1]


def test_differences_constant_up_to_float_noise_get_a_constant_interval():
    table = pd.DataFrame(
        [
            _row(head, seed, value)
            for head, values in (("a", [0.81, 0.84, 0.9]), ("b", [0.78, 0.81, 0.87]))
            for seed, value in enumerate(values, start=1)
        ]
    )
    row = stats.compare_heads(table).iloc[0]
    assert row["reason"] == "differences constant: t undefined"
    assert row["ci_method"] == "constant" and row["ci_low"] == row["ci_high"]


def _crossed_heads_table() -> pd.DataFrame:
    """Three heads over 5 seeds × 4 orders, each head with its own seed and order effects."""
    rng = np.random.default_rng(23)
    rows = []
    for head, offset in (("linear", 0.0), ("bilstm", 0.012), ("mean_linear", 0.03)):
        seed_effect = rng.normal(0, 0.01, size=5)
        order_effect = rng.normal(0, 0.01, size=4)
        for (i, s), (j, o) in itertools.product(enumerate(range(1, 6)), enumerate(range(1, 5))):
            value = 0.8 + offset + seed_effect[i] + order_effect[j] + rng.normal(0, 0.003)
            rows.append(_row(head, s, value, order_seed=o))
    return pd.DataFrame(rows)


def _crossed_interval_by_hand(d: np.ndarray, confidence: float) -> tuple[float, float]:
    """Mean of a seeds × orders grid ± t(Satterthwaite df) × crossed standard error."""
    n_i, n_j = d.shape
    grand = d.mean()
    rows, cols = d.mean(axis=1), d.mean(axis=0)
    ms_a = n_j * ((rows - grand) ** 2).sum() / (n_i - 1)
    ms_b = n_i * ((cols - grand) ** 2).sum() / (n_j - 1)
    resid = d - rows[:, None] - cols[None, :] + grand
    ms_e = (resid**2).sum() / ((n_i - 1) * (n_j - 1))
    assert ms_a > ms_e and ms_b > ms_e  # both components positive: no truncation here
    cells = n_i * n_j
    var = (ms_a + ms_b - ms_e) / cells
    df = var**2 / (
        (ms_a / cells) ** 2 / (n_i - 1)
        + (ms_b / cells) ** 2 / (n_j - 1)
        + (ms_e / cells) ** 2 / ((n_i - 1) * (n_j - 1))
    )
    half = sps.t.ppf(1 - (1 - confidence) / 2, df) * np.sqrt(var)
    return grand - half, grand + half


def test_the_simultaneous_interval_of_a_crossed_grid_uses_its_se_and_satterthwaite_df():
    table = _crossed_heads_table()
    cells = stats.cell_stats(table)
    shown = stats.holm_all(stats.leader_comparisons(cells, stats.compare_heads(table)))
    m = int(shown["n_comparisons_all"].iloc[0])
    assert m == 2 and set(shown["design"]) == {"5 seeds × 4 orders"}
    wide = table.pivot_table(index=["seed", "order_seed"], columns="head_label", values="value")
    for _, r in shown.iterrows():
        d = (wide[r["head_a"]] - wide[r["head_b"]]).unstack().to_numpy()
        expected = _crossed_interval_by_hand(d, 1 - 0.05 / m)
        assert (r["sim_low"], r["sim_high"]) == pytest.approx(expected, rel=1e-9)
        # the unadjusted interval is the crossed one at 95%, and narrower
        one = _crossed_interval_by_hand(d, 0.95)
        assert (r["t_low"], r["t_high"]) == pytest.approx(one, rel=1e-9)
        assert r["sim_low"] < r["t_low"] and r["t_high"] < r["sim_high"]
        # not the naive paired interval over the 20 runs as if they were independent
        naive = sps.ttest_rel(
            wide[r["head_a"]].to_numpy(), wide[r["head_b"]].to_numpy()
        ).confidence_interval(1 - 0.05 / m)
        assert (r["sim_low"], r["sim_high"]) != pytest.approx((naive.low, naive.high), rel=1e-3)


def test_the_crossed_verdict_shows_the_simultaneous_interval(tmp_path):
    out = tmp_path / "crossed"
    out.mkdir()
    _crossed_heads_table().to_csv(out / "results.csv", index=False)
    frame = headline_frame(build_context(load_inputs(out)))
    r = frame.iloc[0]
    sentence = headline_sentence(r, multi_encoder=False)
    shown = f"{100 * r['sim_low']:.1f} to {100 * r['sim_high']:.1f}"
    assert f"simultaneous 95% interval over all 2 headline comparisons (Bonferroni): {shown}" in (
        sentence
    )
    assert f"{100 * r['ci_low']:.1f} to {100 * r['ci_high']:.1f}" not in sentence


@pytest.mark.skipif(not (VARIANCE / "results.csv").exists(), reason="no committed study")
def test_a_holm_significant_margin_whose_bonferroni_interval_reaches_zero_says_so():
    frame = headline_frame(build_context(load_inputs(VARIANCE)))
    mrpc = frame[frame["task"] == "mrpc"].iloc[0]
    # Holm's step-down test rejects (p = 0.046) where the simultaneous interval over the 8
    # comparisons still reaches 0: possible in that direction only
    assert mrpc["significant"] and mrpc["p_holm"] < 0.05
    assert mrpc["sim_low"] < 0 < mrpc["sim_high"] and mrpc["p"] > 0.05 / mrpc["n_comparisons"]
    sentence = headline_sentence(mrpc, multi_encoder=False)
    assert "Holm's step-down test is significant where the Bonferroni interval still reaches 0" in (
        sentence
    )
    sst2 = frame[frame["task"] == "sst2"].iloc[0]
    assert "step-down" not in headline_sentence(sst2, multi_encoder=False)
