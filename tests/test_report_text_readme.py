"""Generated README text that must say what the committed results are (bench/report/readme.py).

Each expectation is derived from the committed ``results.parquet`` alone, independently of
the code under test.
"""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
from bs4 import BeautifulSoup

from bench.report.context import build_context
from bench.report.inputs import load_inputs
from bench.report.readme import experiment_readme, order_text, what_ran
from bench.report.variance import variance_section
from bench.results.variance import CROSSED, FROM_SEED, ORDER_IS_SEED
from conftest import ROOT

RESULTS = ROOT / "results"
CELL = ["task", "encoder", "head_label", "freeze_label", "train_size"]


def _main_runs(name: str) -> pd.DataFrame:
    """One row per run of a committed experiment: its dev main-metric row.

    A cell that did not set ``train_size`` trained on the whole split (0 here) and one that
    did not set ``order_seed`` drew its batch order from its seed (-1 here).
    """
    raw = pd.read_parquet(RESULTS / name / "results.parquet")
    for column, unset in (("train_size", 0), ("order_seed", -1)):
        values = raw[column] if column in raw else pd.Series(None, index=raw.index)
        raw[column] = pd.to_numeric(values).fillna(unset).astype(int)
    main = raw[(raw["split"] == "dev") & (raw["metric"] == raw["main_metric"])]
    return main.drop_duplicates([*CELL, "seed", "order_seed"])


def _is_grid(cell: pd.DataFrame) -> bool:
    """Every seed ran with every order seed, at least 2 × 2 (the data here has no gaps)."""
    pairs = set(zip(cell["seed"], cell["order_seed"], strict=True))
    seeds, orders = set(cell["seed"]), set(cell["order_seed"])
    return len(seeds) >= 2 and len(orders) >= 2 and pairs == set(itertools.product(seeds, orders))


def _has(name: str) -> bool:
    return (RESULTS / name / "results.parquet").is_file()


@pytest.mark.skipif(not (_has("fair_heads_gpu") and _has("variance_seeds")), reason="not run")
def test_what_ran_calls_only_a_complete_seed_by_order_grid_crossed():
    """variance_seeds crosses every seed with every order seed; fair_heads_gpu pairs each
    seed with one order seed, its own (order_seed = seed), which is not crossed."""
    texts = {}
    for name in ("fair_heads_gpu", "variance_seeds"):
        ctx = build_context(load_inputs(RESULTS / name))
        text = what_ran(ctx)
        runs = _main_runs(name)
        grids = [_is_grid(cell) for _, cell in runs.groupby(CELL)]
        section = variance_section(ctx)
        assert section is not None
        note = BeautifulSoup(section.body, "html.parser").get_text()
        if all(grids):
            orders = runs.groupby(CELL)["order_seed"].nunique()
            assert orders.nunique() == 1
            assert (
                f"each crossed with {orders.iloc[0]} batch orders: every seed trained with "
                "every batch order." in text
            )
            assert "not varied independently" not in note  # the report decomposes it
        else:
            assert not any(grids)
            assert (runs["order_seed"] == runs["seed"]).all()
            assert "crossed" not in text
            assert "seeds per cell, each with its own batch order (order_seed = seed)." in text
            assert "Seed and batch order were not varied independently here" in note
        texts[name] = text
    assert "crossed" in texts["variance_seeds"] and "crossed" not in texts["fair_heads_gpu"]


@pytest.mark.skipif(not _has("fair_heads"), reason="not run")
def test_an_order_drawn_from_the_seed_adds_nothing_to_what_ran():
    """fair_heads: order_seed = -1 (the seed draws the batch order): no batch-order phrase."""
    runs = _main_runs("fair_heads")
    assert (runs["order_seed"] == -1).all()
    text = what_ran(build_context(load_inputs(RESULTS / "fair_heads")))
    seeds = runs.groupby(CELL)["seed"].nunique()
    span = f"{seeds.min()}–{seeds.max()}" if seeds.nunique() > 1 else f"{seeds.min()}"
    assert f"; {span} seeds per cell." in text
    assert "batch order" not in text


def test_cells_of_different_designs_are_each_counted():
    designs = pd.DataFrame(
        [
            {"design": CROSSED, "n_seeds": 5, "n_orders": 5},
            {"design": CROSSED, "n_seeds": 5, "n_orders": 4},
            {"design": ORDER_IS_SEED, "n_seeds": 5, "n_orders": 5},
        ]
    )
    text = order_text(designs)
    assert text.startswith(" (2 head settings each crossed with 4–5 batch orders")
    assert "; 1 head setting each with its own batch order (order_seed = seed))" in text
    assert order_text(designs.assign(design=FROM_SEED)) == ""
    assert order_text(designs.iloc[:2]) == (
        ", each crossed with 4–5 batch orders: every seed trained with every batch order"
    )


@pytest.mark.skipif(not _has("quick"), reason="not run")
def test_a_readme_without_any_testable_comparison_says_so():
    """quick has one seed per head: no comparison has a test, and the README says that."""
    runs = _main_runs("quick")
    per_head = runs.groupby(CELL)["seed"].nunique()
    assert per_head.max() == 1
    heads = runs.groupby(["task", "encoder", "freeze_label", "train_size"])["head_label"].nunique()
    comparisons = int((heads - 1).sum())
    text = experiment_readme(RESULTS / "quick")
    assert (
        f"No comparison could be tested: all {comparisons} headline comparisons (each winner "
        "against every other head of its setting) have 1 paired seed, too few for a test, so "
        "none has a p-value, a Holm correction or a tier." in text
    )
    assert "over all 0 headline comparisons" not in text and "Holm-corrected" not in text


@pytest.mark.skipif(not _has("variance_seeds"), reason="not run")
def test_a_readme_with_tested_comparisons_keeps_its_holm_note():
    text = experiment_readme(RESULTS / "variance_seeds")
    assert "Holm-corrected over all " in text and "No comparison could be tested" not in text


@pytest.mark.skipif(not _has("quick"), reason="not run")
def test_a_budget_without_a_search_chooses_no_trial():
    """quick ran no search (one fixed configuration): only the epoch is chosen."""
    text = experiment_readme(RESULTS / "quick")
    budget = text.split("## Budget", 1)[1].split("\n## ", 1)[0]
    assert "no tuning: one fixed configuration" in budget
    assert "epoch and trial chosen" not in budget
    assert "epoch chosen on 500 examples held out from train" in budget
