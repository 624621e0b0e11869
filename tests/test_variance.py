"""Variance decomposition: initialisation against batch order (bench/results/variance.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from bs4 import BeautifulSoup
from scipy import stats as sps
from test_axes import _result

from bench.report import build_report
from bench.report.context import build_context
from bench.report.inputs import load_inputs
from bench.report.style import task_title
from bench.report.variance import variance_section, variance_sentence
from bench.results.collect import collect, read_table, tidy
from bench.results.crossed import complete_grid, grid_of, two_way
from bench.results.variance import (
    CROSSED,
    FROM_SEED,
    NOT_CROSSED,
    ONE_ORDER,
    ORDER_IS_SEED,
    failure_origin,
    order_design,
    order_designs,
    variance_table,
)
from bench.results.variance import crossed as crossed_runs
from conftest import ROOT


def _rss(design: np.ndarray, y: np.ndarray) -> float:
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(((y - design @ coef) ** 2).sum())


def _anova_by_regression(x: np.ndarray) -> dict[str, float]:
    """Sums of squares as reductions in residual sum of squares of dummy regressions."""
    n_rows, n_cols = x.shape
    y = x.ravel()
    ones = np.ones((y.size, 1))
    rows = np.kron(np.eye(n_rows), np.ones((n_cols, 1)))[:, 1:]
    cols = np.kron(np.ones((n_rows, 1)), np.eye(n_cols))[:, 1:]
    full = _rss(np.hstack([ones, rows, cols]), y)
    ss_rows = _rss(np.hstack([ones, cols]), y) - full
    ss_cols = _rss(np.hstack([ones, rows]), y) - full
    df_resid = (n_rows - 1) * (n_cols - 1)
    f_rows = (ss_rows / (n_rows - 1)) / (full / df_resid)
    f_cols = (ss_cols / (n_cols - 1)) / (full / df_resid)
    return {
        "ss_rows": ss_rows,
        "ss_cols": ss_cols,
        "ss_resid": full,
        "p_rows": float(sps.f.sf(f_rows, n_rows - 1, df_resid)),
        "p_cols": float(sps.f.sf(f_cols, n_cols - 1, df_resid)),
    }


@pytest.mark.parametrize(("shape", "seed"), [((5, 5), 0), ((3, 7), 1), ((10, 4), 2)])
def test_the_decomposition_matches_a_dummy_regression(shape, seed):
    x = np.random.default_rng(seed).normal(size=shape) + np.arange(shape[0])[:, None] * 0.3
    fit = two_way(x)
    ref = _anova_by_regression(x)
    assert fit.ss_rows == pytest.approx(ref["ss_rows"], rel=1e-9)
    assert fit.ss_cols == pytest.approx(ref["ss_cols"], rel=1e-9, abs=1e-12)
    assert fit.ss_resid == pytest.approx(ref["ss_resid"], rel=1e-9)
    assert fit.p_rows == pytest.approx(ref["p_rows"], rel=1e-9)
    assert fit.p_cols == pytest.approx(ref["p_cols"], rel=1e-9)
    total = ((x - x.mean()) ** 2).sum()
    assert fit.ss_rows + fit.ss_cols + fit.ss_resid == pytest.approx(total)


def test_the_components_recover_a_simulated_grid():
    rng = np.random.default_rng(7)
    n = 60
    x = (
        2.0 * rng.normal(size=(n, 1))
        + 0.5 * rng.normal(size=(1, n))
        + 0.3 * rng.normal(size=(n, n))
    )
    fit = two_way(x)
    assert math.sqrt(fit.var_rows) == pytest.approx(2.0, rel=0.25)
    assert math.sqrt(fit.var_cols) == pytest.approx(0.5, rel=0.25)
    assert math.sqrt(fit.var_resid) == pytest.approx(0.3, rel=0.05)
    assert fit.p_rows < 1e-10 and fit.p_cols < 1e-10


def test_small_grids_and_gaps_are_refused_or_dropped():
    with pytest.raises(ValueError, match="at least 2 x 2"):
        two_way(np.ones((1, 4)))
    with pytest.raises(ValueError, match="finite value"):
        two_way(np.array([[1.0, np.nan], [2.0, 3.0]]))
    wide = pd.DataFrame([[1, 2, 3], [4, np.nan, 6], [7, 8, 9]], dtype=float)
    grid, dropped = complete_grid(wide)
    assert grid.shape == (2, 3) and dropped == 2 and not grid.isna().any().any()


def test_failures_are_traced_to_their_source():
    rows = np.zeros((5, 5))
    rows[[1, 3], :] = 1  # two initialisations fail under every order
    assert failure_origin(rows)[0] == "initialisation"
    assert failure_origin(rows.T)[0] == "batch order"
    mostly = rows.copy()
    mostly[1, 0] = mostly[3, 4] = 0  # ... under most orders, and one stray failure
    mostly[0, 2] = 1
    origin, fit = failure_origin(mostly)
    assert origin == "initialisation" and fit is not None and fit.p_rows < 0.05 < fit.p_cols
    single = np.zeros((5, 5))
    single[2, 2] = 1
    assert failure_origin(single)[0] == "not separable"
    assert failure_origin(np.zeros((3, 3)))[0] == "none"
    assert failure_origin(np.ones((3, 3)))[0] == "every run"


def test_the_table_decomposes_each_head_of_a_crossed_study():
    rng = np.random.default_rng(3)
    init = rng.normal(0, 0.02, 4)
    order = rng.normal(0, 0.005, 3)
    grid = {
        (s, o): 0.8 + init[s - 1] + order[o - 1] + rng.normal(0, 0.002)
        for s in range(1, 5)
        for o in range(1, 4)
    }
    results = [_result(s, o, v, head="linear") for (s, o), v in grid.items()]
    results += [_result(s, None, 0.8, head="pooler") for s in range(1, 5)]  # not crossed
    out = variance_table(tidy(results))
    assert list(out["head_label"]) == ["linear"]
    row = out.iloc[0]
    x = np.array([[grid[s, o] for o in range(1, 4)] for s in range(1, 5)])
    assert (row["n_init"], row["n_order"], row["runs_left_out"]) == (4, 3, 0)
    assert row["mean"] == pytest.approx(x.mean())
    assert row["sd_total"] == pytest.approx(x.std(ddof=1))
    assert row["share_init"] + row["share_order"] + row["share_resid"] == pytest.approx(1.0)
    assert row["share_init"] > row["share_order"]
    assert row["failure_origin"] == "none" and row["failures"] == 0


def _crossed_sweep(root, grid, failing=()):
    """Result files of a crossed study (head × seed × order seed) in the collect layout."""
    from test_report import _result as report_result

    for (head, seed, order), value in grid.items():
        res = report_result("sst2", head, "frozen", seed, {"dev": {"accuracy": value}})
        res["cell"]["order_seed"] = order
        res["config"]["order_seed"] = order
        res["config_hash"] += f"-o{order}"
        run_dir = root / "sst2" / head / f"seed={seed}-order={order}"
        run_dir.mkdir(parents=True)
        (run_dir / "result.json").write_text(json.dumps(res))


def _moments(x):
    """Variance components of a complete grid, by the textbook mean squares (NumPy only)."""
    n_rows, n_cols = x.shape
    m = x.mean()
    ms_rows = n_cols * ((x.mean(axis=1) - m) ** 2).sum() / (n_rows - 1)
    ms_cols = n_rows * ((x.mean(axis=0) - m) ** 2).sum() / (n_cols - 1)
    r = x - x.mean(axis=1, keepdims=True) - x.mean(axis=0, keepdims=True) + m
    ms_res = (r**2).sum() / ((n_rows - 1) * (n_cols - 1))
    return max(0, (ms_rows - ms_res) / n_cols), max(0, (ms_cols - ms_res) / n_rows), ms_res


def test_the_report_shows_the_decomposition_and_findings_say_it(tmp_path):
    rng = np.random.default_rng(11)
    grid = {}
    for head, init_sd in (("linear", 0.03), ("bilstm", 0.002)):
        init = rng.normal(0, init_sd, 4)
        order = rng.normal(0, 0.01, 4)
        for s in range(1, 5):
            for o in range(1, 5):
                value = 0.85 + init[s - 1] + order[o - 1] + rng.normal(0, 0.003)
                if head == "linear" and s in (2, 4):
                    value = 0.40  # two initialisations fail under every order (baseline 0.509)
                grid[head, s, o] = float(value)
    _crossed_sweep(tmp_path / "runs", grid)
    collect([tmp_path / "runs"], tmp_path / "results")
    out = build_report(tmp_path / "results", tmp_path / "report.html")
    soup = BeautifulSoup(out.read_text(encoding="utf-8"), "html.parser")
    section = soup.find("section", id="variance")
    assert section is not None and section.select("figure > img")
    header = [th.get_text() for th in section.find("thead").find_all("th")]
    rows = {
        r[0]: dict(zip(header, r, strict=True))
        for r in (
            [td.get_text() for td in tr.find_all("td")]
            for tr in section.find("tbody").find_all("tr")
        )
    }
    for head in ("linear", "bilstm"):
        x = 100 * np.array([[grid[head, s, o] for o in range(1, 5)] for s in range(1, 5)])
        v_init, v_order, v_res = _moments(x)
        assert rows[head]["grid"] == "4×4"
        assert float(rows[head]["SD init"]) == pytest.approx(np.sqrt(v_init), abs=0.006)
        assert float(rows[head]["SD order"]) == pytest.approx(np.sqrt(v_order), abs=0.006)
        assert float(rows[head]["SD resid."]) == pytest.approx(np.sqrt(v_res), abs=0.006)
    assert rows["linear"]["failed"] == "8" and rows["linear"]["failures from"] == "initialisation"
    assert rows["bilstm"]["failures from"] == "none"
    sentence = variance_sentence(read_table(tmp_path / "results"))
    assert sentence is not None
    assert "4 initialisations × 4 batch orders" in sentence
    assert "from initialisation: `linear` on SST-2" in sentence
    assert "from batch order" not in sentence and "not separable" not in sentence


def test_no_crossed_seeds_no_section(tmp_path):
    grid = {("linear", s, 1): 0.8 + 0.01 * s for s in range(1, 4)}  # one order seed only
    _crossed_sweep(tmp_path / "runs", grid)
    collect([tmp_path / "runs"], tmp_path / "results")
    out = build_report(tmp_path / "results", tmp_path / "report.html")
    assert 'id="variance"' not in out.read_text(encoding="utf-8")
    assert variance_sentence(read_table(tmp_path / "results")) is None


def _section_text(results):
    section = variance_section(build_context(load_inputs(results)))
    assert section is not None
    return section, BeautifulSoup(section.body, "html.parser")


def test_order_seed_equal_to_seed_gives_one_sentence_not_an_empty_grid(tmp_path):
    """fair_heads_gpu's design: order_seed = seed, so nothing is crossed to decompose."""
    grid = {(h, s, s): 0.8 + 0.01 * s for h in ("linear", "bilstm") for s in range(1, 5)}
    _crossed_sweep(tmp_path / "runs", grid)
    collect([tmp_path / "runs"], tmp_path / "results")
    assert variance_table(read_table(tmp_path / "results")).empty  # no grid, so no row
    section, soup = _section_text(tmp_path / "results")
    assert soup.find("table") is None and soup.find("figure") is None
    (para,) = soup.find_all("p")
    text = para.get_text()
    assert "not varied independently" in text and "cannot be separated" in text
    assert "every run's batch order seed is its training seed" in text
    assert "0×" not in section.body
    assert variance_sentence(read_table(tmp_path / "results")) is None


def test_heads_without_a_grid_are_named_not_shown_empty(tmp_path):
    """A crossed head is decomposed; a head of the same setting with order = seed is named."""
    grid = {("linear", s, o): 0.8 + 0.01 * s + 0.003 * o for s in range(1, 4) for o in range(1, 4)}
    grid |= {("bilstm", s, s): 0.8 + 0.01 * s for s in range(1, 4)}
    _crossed_sweep(tmp_path / "runs", grid)
    collect([tmp_path / "runs"], tmp_path / "results")
    section, soup = _section_text(tmp_path / "results")
    rows = [tr.find("td").get_text() for tr in soup.find("tbody").find_all("tr")]
    assert rows == ["linear"]
    assert "0×" not in section.body
    notes = " ".join(p.get_text() for p in soup.find_all("p"))
    assert "cannot be separated: SST-2, frozen: bilstm." in notes


@pytest.mark.skipif(
    not (ROOT / "results" / "fair_heads_gpu" / "results.parquet").is_file(), reason="not run"
)
def test_the_committed_uncrossed_experiment_shows_no_empty_grid():
    table = read_table(ROOT / "results" / "fair_heads_gpu")
    runs = table.drop_duplicates(["task", "head_label", "freeze_label", "seed", "order_seed"])
    assert (runs["order_seed"] == runs["seed"]).all()  # not crossed
    section, soup = _section_text(ROOT / "results" / "fair_heads_gpu")
    assert soup.find("table") is None and "0×" not in section.body
    assert "cannot be separated" in soup.get_text()


def _runs(pairs, head="linear"):
    """run_values-like rows of one setting: one run per (seed, order_seed)."""
    return pd.DataFrame(
        [
            {"task": "sst2", "encoder": "minilm", "head_label": head, "freeze_label": "frozen"}
            | {"train_size": 0, "seed": s, "order_seed": o, "value": 0.8, "failed": False}
            for s, o in pairs
        ]
    )


@pytest.mark.parametrize(
    ("pairs", "design"),
    [
        ([(s, o) for s in (1, 2, 3) for o in (1, 2)], CROSSED),
        ([(s, s) for s in range(1, 11)], ORDER_IS_SEED),  # fair_heads_gpu: order_seed = seed
        ([(s, -1) for s in range(1, 6)], FROM_SEED),  # fair_heads: the seed draws the order
        ([(s, 7) for s in (1, 2, 3)], ONE_ORDER),
        ([(1, 1), (1, 2), (2, 3), (2, 4)], NOT_CROSSED),  # two orders each, none shared
        ([(1, 1), (1, 2), (2, 1), (2, 2), (3, 1)], CROSSED),  # a 2 × 2 grid after the gap
    ],
)
def test_a_design_is_crossed_only_where_its_runs_form_a_grid(pairs, design):
    """One definition: crossed ⇔ grid_of finds a complete ≥ 2 × 2 grid in the runs."""
    runs = _runs(pairs)
    assert order_design(runs) == design
    ones = pd.Series(1.0, index=pd.MultiIndex.from_tuples(pairs, names=["seed", "order_seed"]))
    own = ones[ones.index.get_level_values("order_seed") != -1]
    assert (design == CROSSED) == (grid_of(own) is not None if len(own) else False)
    assert (design == CROSSED) == (not crossed_runs(runs).empty)
    (row,) = order_designs(runs).to_dict("records")
    assert row["design"] == design and row["n_seeds"] == len({s for s, _ in pairs})


VARIANCE_SEEDS = ROOT / "results" / "variance_seeds"


@pytest.mark.skipif(not (VARIANCE_SEEDS / "results.parquet").is_file(), reason="not run")
def test_every_failure_origin_of_the_committed_crossed_study_is_named():
    """The Findings sentence names each head under the origin an independent F test gives.

    From results.parquet alone: each head's 0/1 failure grid (seed × order seed; a run
    fails when not ok or at or below the best constant prediction), its two-way F tests by
    dummy regressions (:func:`_anova_by_regression`), and the origin they decide.
    """
    raw = pd.read_parquet(VARIANCE_SEEDS / "results.parquet")
    main = raw[(raw["split"] == "dev") & (raw["metric"] == raw["main_metric"])]
    main = main.assign(
        fail=(main["status"] != "ok") | (main["value"] <= main["best_constant"] + 1e-6)
    )
    expected: dict[str, set[tuple[str, str]]] = {}
    failing = 0
    table = variance_table(read_table(VARIANCE_SEEDS)).set_index(["task", "head_label"])
    for (task, head), rows in main.groupby(["task", "head_label"]):
        x = rows.pivot_table(index="seed", columns="order_seed", values="fail").to_numpy(float)
        assert x.shape[0] >= 2 and x.shape[1] >= 2 and not np.isnan(x).any()
        failing += bool(x.any())
        if not x.any() or x.all():
            continue
        ref = _anova_by_regression(x)
        assert np.isfinite(ref["p_rows"]) and np.isfinite(ref["p_cols"])
        got = table.loc[(task, head)]
        assert got["fail_p_init"] == pytest.approx(ref["p_rows"], rel=1e-9)
        assert got["fail_p_order"] == pytest.approx(ref["p_cols"], rel=1e-9)
        n_rows, n_cols = x.shape
        ms_resid = ref["ss_resid"] / ((n_rows - 1) * (n_cols - 1))
        init = ref["p_rows"] < 0.05 and ref["ss_rows"] / (n_rows - 1) > ms_resid
        order = ref["p_cols"] < 0.05 and ref["ss_cols"] / (n_cols - 1) > ms_resid
        words = {
            (True, True): "from both initialisation and batch order",
            (True, False): "from initialisation",
            (False, True): "from batch order",
            (False, False): "not separable",
        }[(init, order)]
        expected.setdefault(words, set()).add((head, task_title(task)))
    assert len(expected) >= 2  # the sentence must name more than one origin here
    sentence = variance_sentence(read_table(VARIANCE_SEEDS))
    assert sentence is not None
    assert f"; {failing} of {main.groupby(['task', 'head_label']).ngroups} head settings had " in (
        sentence
    )
    named: dict[str, set[tuple[str, str]]] = {}
    for part in sentence.rstrip(".").split(" — ", 1)[1].split("; "):
        words, places = part.split(": ", 1)
        for place in places.split(" and "):
            heads, where = place.rsplit(" on ", 1)
            named.setdefault(words, set()).update((h.strip("` "), where) for h in heads.split(","))
    assert named == expected
