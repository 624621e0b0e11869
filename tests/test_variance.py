"""Variance sources: initialisation against batch order (bench/results/variance.py).

Every component, share and p-value is recomputed from the runs' values with statsmodels'
two-way ANOVA of the additive model (``value ~ C(seed) + C(order_seed)``).
"""

from __future__ import annotations

import itertools
import types

import numpy as np
import pandas as pd
import pytest
from bs4 import BeautifulSoup
from statsmodels.formula.api import ols
from statsmodels.stats.anova import anova_lm

from bench.results.variance import two_way, variance_table
from conftest import ROOT, frozen_sst2_key

CONSTANT = 0.509  # SST-2's best constant prediction: a run at or below it failed


def _table(values: dict[tuple[str, int, int | None], float]) -> pd.DataFrame:
    """A tidy results table of frozen SST-2 runs: (head, seed, order seed) → accuracy."""
    rows = [
        {**frozen_sst2_key(head, seed), "order_seed": order, "train_size": 2000}
        | {"status": "ok" if np.isfinite(value) else "failed", "split": "dev"}
        | {"metric": "accuracy", "value": value, "baseline": CONSTANT, "best_constant": CONSTANT}
        for (head, seed, order), value in values.items()
    ]
    return pd.DataFrame(rows)


def _anova(grid: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Components (init, order, residual) and the two F-test p-values, by statsmodels."""
    long = (
        pd.DataFrame(np.asarray(grid, dtype=float))
        .stack()
        .rename("y")
        .rename_axis(["seed", "order"])
        .reset_index()
    )
    fit = anova_lm(ols("y ~ C(seed) + C(order)", long).fit())
    ms_a, ms_b, ms_e = fit["mean_sq"]
    n_i, n_j = grid.shape
    var = np.array([max(0, (ms_a - ms_e) / n_j), max(0, (ms_b - ms_e) / n_i), ms_e])
    return var, fit["PR(>F)"].to_numpy()[:2]


@pytest.mark.parametrize(("shape", "seed"), [((5, 5), 0), ((3, 7), 1), ((10, 4), 2)])
def test_the_components_and_f_tests_equal_statsmodels(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape) + np.arange(shape[0])[:, None] * 0.3
    var, p = two_way(x)
    ref_var, ref_p = _anova(pd.DataFrame(x))
    np.testing.assert_allclose(var, ref_var, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(p, ref_p, rtol=1e-9)


def test_the_components_recover_a_simulated_grid():
    rng = np.random.default_rng(7)
    x = 2.0 * rng.normal(size=(60, 1)) + 0.5 * rng.normal(size=(1, 60))
    var, p = two_way(x + 0.3 * rng.normal(size=(60, 60)))
    np.testing.assert_allclose(np.sqrt(var), [2.0, 0.5, 0.3], rtol=0.25)
    assert (p < 1e-10).all()


def _crossed_study() -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """`linear` 4 × 3, two seeds failing under every order and one stray failure; `bilstm`
    4 × 3 with one run that crashed; `pooler` with its order drawn from its seed (not crossed).
    """
    rng = np.random.default_rng(3)
    values: dict[tuple[str, int, int | None], float] = {}
    for head, sd_init in (("linear", 0.02), ("bilstm", 0.002)):
        init, order = rng.normal(0, sd_init, 4), rng.normal(0, 0.01, 3)
        for s, o in itertools.product(range(1, 5), range(1, 4)):
            values[head, s, o] = 0.8 + init[s - 1] + order[o - 1] + rng.normal(0, 0.003)
    for s, o in ((2, 1), (2, 2), (2, 3), (4, 1), (4, 2), (4, 3), (1, 3)):
        values["linear", s, o] = 0.45  # below the best constant: failed
    values["bilstm", 3, 2] = np.nan
    values |= {("pooler", s, None): 0.8 for s in range(1, 5)}
    grids = {
        head: pd.Series({(s, o): v for (h, s, o), v in values.items() if h == head}).unstack()
        for head in ("linear", "bilstm")
    }
    return _table(values), grids


def test_the_table_decomposes_each_crossed_head_as_statsmodels_does():
    table, grids = _crossed_study()
    out = variance_table(table).set_index("head_label")
    assert sorted(out.index) == ["bilstm", "linear"]  # pooler is not crossed
    for head, grid in grids.items():
        row = out.loc[head]
        complete = grid.drop(index=3) if head == "bilstm" else grid  # the crashed run's seed
        var, p = _anova(complete)
        assert (row["n_init"], row["n_order"]) == complete.shape
        assert row["runs_left_out"] == (3 if head == "bilstm" else 0)
        assert row["mean"] == pytest.approx(complete.to_numpy().mean(), rel=1e-12)
        got = row[["sd_init", "sd_order", "sd_resid"]].to_numpy(float)
        np.testing.assert_allclose(got, np.sqrt(var), rtol=1e-8)
        shares = row[["share_init", "share_order", "share_resid"]].to_numpy(float)
        np.testing.assert_allclose(shares, var / var.sum(), rtol=1e-8)
        np.testing.assert_allclose(row[["p_init", "p_order"]].to_numpy(float), p, rtol=1e-8)
    linear = out.loc["linear"]
    failed = (grids["linear"] <= CONSTANT).astype(float)
    _, fail_p = _anova(failed)
    assert linear["failures"] == 7
    assert linear[["fail_p_init", "fail_p_order"]].to_numpy(float) == pytest.approx(fail_p)
    assert fail_p[0] < 0.05 < fail_p[1] and linear["failure_origin"] == "initialisation"
    bilstm = out.loc["bilstm"]  # the crashed run failed: its grid is whole, one failure
    assert bilstm["failures"] == 1 and bilstm["failure_origin"] == "not separable"


@pytest.mark.parametrize(
    ("failing", "origin"),
    [
        ({(2, o) for o in range(1, 6)} | {(4, o) for o in range(1, 6)}, "initialisation"),
        ({(s, 3) for s in range(1, 6)}, "batch order"),
        ({(s, 3) for s in range(1, 6)} | {(1, o) for o in range(1, 6)}, "both"),
        ({(2, 2)}, "not separable"),
        (set(), "none"),
        (set(itertools.product(range(1, 6), range(1, 6))), "every run"),
    ],
)
def test_failures_are_traced_to_what_they_follow(failing, origin):
    grid = itertools.product(range(1, 6), range(1, 6))
    values = {("linear", s, o): 0.4 if (s, o) in failing else 0.8 + 0.01 * s for s, o in grid}
    (row,) = variance_table(_table(values)).to_dict("records")
    assert row["failures"] == len(failing) and row["failure_origin"] == origin


def _context(table: pd.DataFrame) -> types.SimpleNamespace:
    from bench.report.style import Palette

    palette = Palette(table["head_label"], table["freeze_label"])
    return types.SimpleNamespace(inputs=types.SimpleNamespace(table=table), palette=palette)


def test_the_section_shows_each_heads_components_and_their_shares():
    from bench.report.variance import variance_section

    table, _ = _crossed_study()
    section = variance_section(_context(table))
    assert section is not None and section.id == "variance"
    soup = BeautifulSoup(section.body, "html.parser")
    assert soup.select("figure > img")[0]["src"].startswith("data:image/svg+xml;base64,")
    header = [th.get_text() for th in soup.find("thead").find_all("th")]
    shown = {
        r["head"]: r
        for r in (
            dict(zip(header, (td.get_text() for td in tr.find_all("td")), strict=True))
            for tr in soup.find("tbody").find_all("tr")
        )
    }
    assert list(shown) == ["linear", "bilstm"]  # the report's head order
    out = variance_table(table).set_index("head_label")
    for head, r in shown.items():
        assert r["seeds × orders"] == f"{out.loc[head, 'n_init']}×{out.loc[head, 'n_order']}"
        assert float(r["SD init"]) == pytest.approx(100 * out.loc[head, "sd_init"], abs=0.006)
        assert float(r["order %"]) == pytest.approx(100 * out.loc[head, "share_order"], abs=0.6)
        assert r["failures from"] == out.loc[head, "failure_origin"]
    uncrossed = _table({("linear", s, s): 0.8 + 0.01 * s for s in range(1, 5)})
    assert variance_section(_context(uncrossed)) is None  # order seed = seed: nothing crossed


VARIANCE_SEEDS = ROOT / "results" / "variance_seeds"


@pytest.mark.skipif(not (VARIANCE_SEEDS / "results.parquet").is_file(), reason="not run")
def test_the_committed_crossed_study_is_decomposed_as_statsmodels_does():
    """From results.parquet alone: each head's score and 0/1 failure grids by statsmodels."""
    from bench.results.collect import read_table

    raw = pd.read_parquet(VARIANCE_SEEDS / "results.parquet")
    main = raw[(raw["split"] == "dev") & (raw["metric"] == raw["main_metric"])]
    main = main.assign(fail=(main["status"] != "ok") | (main["value"] <= main["best_constant"]))
    out = variance_table(read_table(VARIANCE_SEEDS)).set_index(["task", "head_label"])
    assert len(out) == main.groupby(["task", "head_label"]).ngroups
    origins = set()
    for (task, head), rows in main.groupby(["task", "head_label"]):
        got = out.loc[(task, head)]
        scores = rows.pivot_table(index="seed", columns="order_seed", values="value")
        var, p = _anova(scores)
        shares = got[["share_init", "share_order"]].to_numpy(float)
        np.testing.assert_allclose(shares, (var / var.sum())[:2], rtol=1e-8)
        np.testing.assert_allclose(got[["p_init", "p_order"]].to_numpy(float), p, rtol=1e-8)
        failed = rows.pivot_table(index="seed", columns="order_seed", values="fail")
        assert got["failures"] == failed.to_numpy().sum()
        if 0 < got["failures"] < failed.size:
            _, fail_p = _anova(failed.astype(float))
            np.testing.assert_allclose(got[["fail_p_init", "fail_p_order"]].to_numpy(float), fail_p)
            init, order = fail_p < 0.05
            expected = ["not separable", "initialisation", "batch order", "both"][init + 2 * order]
            assert got["failure_origin"] == expected
            origins.add(expected)
    assert len(origins) >= 2  # the study's failures follow more than one source
