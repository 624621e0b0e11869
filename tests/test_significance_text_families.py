"""Every significance statement names its Holm family, and one comparison gets one verdict.

Checked on the committed results against an independent computation from results.csv
(scipy's paired t-test, Holm by hand):

- the notes under the heads tables use the headline's family (each setting's best head
  against every other head of its setting, all settings together), so heads.md, the report
  and the README give one adjusted p per comparison;
- a learning-curve sentence names its curve's family and says where the headline's family
  calls the same lead a tie;
- counts of significant winners separate "ahead of the runner-up" from "ahead of every
  other head";
- a paired margin over fewer seeds than a head has says what both average on those seeds;
- crossed runs are described as crossed, with the crossed test's name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ttest_rel

from bench.report import findings
from bench.report.context import build_context
from bench.report.findings import curves_sentence
from bench.report.headline import (
    at_a_glance,
    families,
    headline_comparisons,
    headline_frame,
    headline_sentence,
)
from bench.report.inputs import load_inputs
from bench.results import crossed, tables
from bench.results.curves import leaders_of
from conftest import ROOT, holm_reference

RESULTS = ROOT / "results"
CURVES, VARIANCE = RESULTS / "curves_sst2_rte", RESULTS / "variance_seeds"
FAIR, GPU = RESULTS / "fair_heads", RESULTS / "fair_heads_gpu"
Key = tuple[str, str, int]  # task, freeze, training size (0: the whole split)


def _dev(source: Path) -> pd.DataFrame:
    table = pd.read_csv(source / "results.csv")
    dev = table[(table.split == "dev") & (table.metric == table.main_metric)]
    dev = dev[dev.status == "ok"].copy()
    dev["train_size"] = dev["train_size"].fillna(0).astype(int)
    return dev


def _headline_tests(source: Path, family: Callable[[Key], bool] | None = None) -> dict[Key, dict]:
    """Per setting: winner, runner-up, and per other head (raw p, diff, Holm p over all).

    ``family`` keeps the settings of one Holm family (None: every setting).
    """
    found: dict[Key, dict] = {}
    keys, pvalues = [], []
    for key, rows in _dev(source).groupby(["task", "freeze_label", "train_size"]):
        if family is not None and not family(key):
            continue
        wide = rows.pivot_table(index="seed", columns="head_label", values="value")
        ranked = sorted(wide.columns, key=lambda h: (-round(wide[h].mean(), 12), h))
        found[key] = {"winner": ranked[0], "runner": ranked[1], "others": {}}
        for other in ranked[1:]:
            pair = wide[[ranked[0], other]].dropna()
            d = np.round(pair[ranked[0]] - pair[other], 12)
            if len(pair) < 2 or np.all(d == d.iloc[0]):
                continue  # no test
            p = ttest_rel(pair[ranked[0]], pair[other]).pvalue
            found[key]["others"][other] = {"p": p, "diff": d.mean()}
            keys.append((key, other))
            pvalues.append(p)
    for (key, other), adjusted in zip(keys, holm_reference(pvalues), strict=True):
        found[key]["others"][other]["holm"] = adjusted
    found[("", "", -1)] = {"m": len(pvalues)}
    return found


def _ahead(test: dict) -> bool:
    return bool(test["holm"] < 0.05 and test["diff"] > 0)


@pytest.fixture(scope="module")
def curves_ctx():
    return build_context(load_inputs(CURVES))


@pytest.mark.skipif(not (CURVES / "results.csv").is_file(), reason="not run")
def test_a_curve_lead_that_is_a_headline_tie_says_so_and_heads_md_agrees_with_the_headline(
    curves_ctx,
):
    tests = _headline_tests(CURVES)
    m = tests.pop(("", "", -1))["m"]
    assert m == 56
    # the SST-2 frozen curve's family: its sizes' comparisons only
    curve = {k: v for k, v in tests.items() if k[:2] == ("sst2", "frozen")}
    order = [(k, o) for k, v in curve.items() for o in v["others"]]
    curve_holm = dict(
        zip(order, holm_reference([curve[k]["others"][o]["p"] for k, o in order]), strict=True)
    )
    assert len(order) == 24
    at_2000 = curve[("sst2", "frozen", 2000)]
    assert (at_2000["winner"], at_2000["runner"]) == ("mean_linear", "bilstm")
    p_curve = curve_holm[(("sst2", "frozen", 2000), "bilstm")]
    p_all = at_2000["others"]["bilstm"]["holm"]
    assert p_curve < 0.05 <= p_all  # significant in the curve's family, a tie in the headline's
    ahead_in_curve = [k[2] for k in curve if curve_holm.get((k, curve[k]["runner"]), 1) < 0.05]
    assert ahead_in_curve == [100, 2000]
    ahead_in_all = [k[2] for k in curve if _ahead(curve[k]["others"][curve[k]["runner"]])]
    assert ahead_in_all == [100]

    shown = headline_comparisons(curves_ctx)
    sentence = curves_sentence(leaders_of(curves_ctx.cells, curves_ctx.comparisons), False, shown)
    assert sentence is not None
    assert (
        "SST-2 frozen: `mean_linear` from 100 to 200 examples, then `bilstm` at 500 examples, "
        "then `mean_linear` from 1,000 to 4,000 examples (with Holm over this curve's 24 "
        "comparisons, significantly ahead of its runner-up only at 100 examples and 2,000 "
        "examples, tied at the other sizes; over all 56 headline comparisons the lead at "
        "2,000 examples is a tie)"
    ) in sentence
    # every curve names its family; the changes of lead name theirs
    assert "with Holm over this curve's 20 comparisons, at no size" in sentence
    assert "with Holm over this curve's 12 comparisons, at no size" in sentence
    assert sentence.count("Holm over this curve's 24 comparisons: p = ") == 2

    # the README's verdict and the heads table's note give the same p: the headline's
    frame = headline_frame(curves_ctx)
    verdict = frame[(frame["task"] == "sst2") & (frame["freeze_shown"] == "frozen, 2,000 examples")]
    assert verdict.iloc[0]["p_holm"] == pytest.approx(p_all)
    doc = tables.build(pd.read_csv(CURVES / "results.csv"), "heads")
    table = next(t for t in doc.tables if t.title == "sst2 — minilm — 2,000 examples")
    note = next(n for n in table.notes if n.startswith("frozen: mean_linear − bilstm"))
    assert f"Holm-adjusted over all 56 headline comparisons: p = {p_all:.3g} (n.s.)" in note
    assert f"p = {p_curve:.3g}" not in note
    assert any("all 56 headline comparisons" in n for n in doc.notes)  # the family, defined


@pytest.mark.skipif(not (VARIANCE / "results.csv").is_file(), reason="not run")
def test_a_crossed_note_names_the_crossed_design_and_test_and_the_readme_family():
    ctx = build_context(load_inputs(VARIANCE))
    frame = headline_frame(ctx)
    mrpc = frame[frame["task"] == "mrpc"].iloc[0]
    assert (mrpc["winner"], mrpc["runner_up"], mrpc["n_comparisons"]) == (
        "last4_concat",
        "mean_linear",
        8,
    )
    dev = _dev(VARIANCE)
    dev = dev[(dev.task == "mrpc") & (dev.freeze_label == "frozen")]
    wide = dev.pivot_table(index=["seed", "order_seed"], columns="head_label", values="value")
    d = (wide["last4_concat"] - wide["mean_linear"]).unstack()
    assert d.shape == (5, 5) and not d.isna().any().any()
    p, _, _, _ = crossed.crossed_t_test(d.round(12))
    naive = ttest_rel(wide["last4_concat"], wide["mean_linear"]).pvalue
    assert f"{p:.3g}" != f"{naive:.3g}"  # the 25 runs are not 25 independent pairs
    doc = tables.build(pd.read_csv(VARIANCE / "results.csv"), "heads")
    table = next(t for t in doc.tables if t.title == "mrpc — minilm")
    note = next(n for n in table.notes if n.startswith("frozen: last4_concat − mean_linear"))
    assert "over 25 paired runs (5 seeds × 5 orders, crossed)" in note
    assert f"t-test with seed and order effects (Satterthwaite df) p = {p:.3g}, unadjusted" in note
    assert "paired seeds" not in note and "paired t-test" not in note
    # the same adjusted p and tier as the README's verdict (Holm over its 8 comparisons)
    assert mrpc["p_holm"] < 0.05 and mrpc["tier"] == "*"
    assert f"over all 8 headline comparisons: p = {mrpc['p_holm']:.3g} (\\*)" in note.replace(
        "(*)", "(\\*)"
    )
    # the README's verdict sentence uses the same words for the design and the test
    sentence = headline_sentence(mrpc, multi_encoder=False)
    assert "25 paired runs (5 seeds × 5 orders, crossed)" in sentence
    assert "t-test with seed and order effects (Satterthwaite df), Holm over the same 8" in sentence


@pytest.mark.skipif(not (GPU / "results.csv").is_file(), reason="not run")
def test_a_margin_over_fewer_seeds_than_a_head_has_says_what_both_average_on_them():
    dev = _dev(GPU)
    rte = dev[(dev.task == "rte") & (dev.freeze_label == "full")]
    wide = rte.pivot_table(index="seed", columns="head_label", values="value")
    counts = wide.count()
    assert dict(counts) == {"linear": 10, "pooler-random": 7}
    shared = wide.dropna()
    a, b = 100 * shared["pooler-random"].mean(), 100 * shared["linear"].mean()
    all_linear = 100 * wide["linear"].mean()
    assert f"{all_linear:.1f}" != f"{b:.1f}"  # the table's 10-seed mean is not the paired one
    ctx = build_context(load_inputs(GPU))
    frame = headline_frame(ctx)
    r = frame[(frame["task"] == "rte") & (frame["freeze_label"] == "full")].iloc[0]
    expected = (
        f"7 paired seeds, fewer than linear's 10: on the 7 seeds both ran, pooler-random "
        f"averages {a:.1f} and linear {b:.1f};"
    )
    assert expected in headline_sentence(r, multi_encoder=False)
    doc = tables.build(pd.read_csv(GPU / "results.csv"), "heads")
    table = next(t for t in doc.tables if t.title == "rte — minilm")
    note = next(n for n in table.notes if n.startswith("full: pooler-random − linear"))
    assert "over 7 paired seeds (fewer than linear's 10: on the 7 seeds both ran, " in note
    assert f"pooler-random averages {a:.1f} and linear {b:.1f})" in note
    # where both heads have every seed paired, nothing is added
    sst2 = frame[(frame["task"] == "sst2") & (frame["freeze_label"] == "frozen")].iloc[0]
    assert "fewer than" not in headline_sentence(sst2, multi_encoder=False)
    assert "over all 1 head comparisons" not in note and "the 1 head" not in note


@pytest.fixture(scope="module")
def fair_finding() -> str:
    return findings.experiment_finding(FAIR)


def _counts(source: Path, tests: dict[Key, dict]) -> tuple[list[Key], list[Key]]:
    """The settings whose winner beats the constant and is ahead of its runner-up / of all."""
    constant = _dev(source).groupby(["task", "freeze_label", "train_size"])["best_constant"].first()
    means = _dev(source).groupby(["task", "freeze_label", "train_size", "head_label"])["value"]
    won = {k: v for k, v in tests.items() if means.mean()[(*k, v["winner"])] > constant[k] + 1e-9}
    runner = [k for k, v in won.items() if _ahead(v["others"][v["runner"]])]
    every = [
        k
        for k in runner
        if len(won[k]["others"]) == len(means.mean()[k[:3]]) - 1
        and all(_ahead(t) for t in won[k]["others"].values())
    ]
    return runner, every


def _in_study(key: Key) -> bool:
    """fair_heads' full fine-tuning study (conf/experiment/fair_heads.yaml: freeze full)."""
    return key[1] == "full"


@pytest.mark.skipif(not (FAIR / "results.csv").is_file(), reason="not run")
def test_the_count_of_significant_winners_separates_the_runner_up_from_every_other_head(
    fair_finding,
):
    head = _headline_tests(FAIR, lambda k: not _in_study(k))
    m = head.pop(("", "", -1))["m"]
    study = _headline_tests(FAIR, _in_study)
    m_study = study.pop(("", "", -1))["m"]
    runner, every = _counts(FAIR, head)
    assert [k[:2] for k in runner] == [("stsb", "frozen")] and every == runner
    study_runner, study_every = _counts(FAIR, study)
    assert [k[:2] for k in study_runner] == [("rte", "full")] and study_every == []
    rte = study[study_runner[0]]
    ties = sorted(h for h, t in rte["others"].items() if not _ahead(t))
    assert ties == ["last4_concat", "pooler-random"]
    # the headline counts its own settings only, over its own family
    assert (
        f"The winner is significantly ahead of its runner-up (paired t-test over seeds, Holm "
        f"over all {m} headline comparisons; a tier marks those) in {len(runner)} of "
        f"{len(head)} settings, and of every other head of its setting in that one "
        "(STS-B frozen)"
    ) in fair_finding
    # the study is counted apart, over the study's family
    assert (
        f"The winner is significantly ahead of its runner-up (paired t-test over seeds, Holm "
        f"over the study's {m_study} comparisons; a tier marks those) in {len(study_runner)} "
        f"of {len(study)} settings and of every other head of its setting in 0 of those; in "
        "RTE full it still ties with heads ranked below its runner-up: `last4_concat`, "
        "`pooler-random`"
    ) in fair_finding
    assert f"all {m + m_study} headline comparisons" not in fair_finding
    # the report's glance says the same per family, and the verdict sentence names the ties
    ctx = build_context(load_inputs(FAIR))
    frame, shown = headline_frame(ctx), headline_comparisons(ctx)
    parts = {name: (f, c) for name, f, c in families(frame, shown)}
    glance = at_a_glance(*parts["headline"], 5)
    assert (
        f"tested headline comparisons (each winner against every other head of its setting, "
        f"paired t-test, Holm over all {m} headline comparisons) the winner is significantly "
        f"ahead at α = 0.05; the winner is significantly ahead of its runner-up in 1 of "
        f"{len(head)} settings, and of every other head of its setting in that one (STS-B "
        "frozen)."
    ) in glance
    glance = at_a_glance(*parts["full fine-tuning study"], 5)
    assert (
        f"the winner is significantly ahead of its runner-up in 1 of {len(study)} settings "
        "and of every other head of its setting in 0 of those; in RTE full it still ties "
        "with heads ranked below its runner-up: last4_concat, pooler-random."
    ) in glance
    r = frame[(frame["task"] == "rte") & (frame["freeze_label"] == "full")].iloc[0]
    sentence = headline_sentence(r, multi_encoder=False)
    assert "beats linear by 2.4 points" in sentence
    assert f"simultaneous 95% interval over the study's {m_study} comparisons" in sentence
    assert (
        f"It beats its runner-up but not every other head: still not distinguishable from the "
        f"winner (paired t-test, Holm over the same {m_study}): last4_concat, pooler-random."
    ) in sentence
    assert r["p_holm"] == pytest.approx(rte["others"][rte["runner"]]["holm"])


@pytest.mark.skipif(not (VARIANCE / "results.csv").is_file(), reason="not run")
def test_a_winner_ahead_of_its_runner_up_only_counts_for_no_setting_of_every_head():
    ctx = build_context(load_inputs(VARIANCE))
    frame, shown = headline_frame(ctx), headline_comparisons(ctx)
    glance = at_a_glance(frame, shown, 5)
    assert (
        "the winner is significantly ahead of its runner-up in 1 of 2 settings and of every "
        "other head of its setting in 0 of those; in MRPC frozen it still ties with heads "
        "ranked below its runner-up: bilstm, linear, pooler-random."
    ) in glance
