"""A preset's studies: read from the preset, their own Holm families, reported apart.

``conf/experiment/fair_heads.yaml`` names a full fine-tuning study (5 seeds, 4 trials)
beside its frozen headline (10 seeds, 6 trials); the headline's family and counts must not
include it, and the study is its own family in every text. Checked on the committed
results, against an independent Holm (``holm_reference``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose
from omegaconf import OmegaConf

from bench.cell import cell_path, config_hash
from bench.errors import ConfigError
from bench.paths import config_dir
from bench.report.context import build_context
from bench.report.findings import experiment_finding
from bench.report.headline import (
    headline_comparisons,
    headline_frame,
    headline_sentence,
    setting_ties,
)
from bench.report.inputs import load_inputs
from bench.report.readme import experiment_readme
from bench.results import stats
from bench.results.studies import (
    HEADLINE,
    STUDY_COLUMNS,
    Study,
    family_of,
    holm_families,
    preset_studies,
    results_studies,
    studies_of,
)
from bench.results.tables import build
from bench.run.plan import hydra_context
from conftest import ROOT, holm_reference

RESULTS = ROOT / "results"
FAIR = RESULTS / "fair_heads"
STUDY = "full fine-tuning study"
needs_fair = pytest.mark.skipif(not (FAIR / "results.csv").is_file(), reason="not run")


@pytest.fixture(scope="module")
def fair_ctx():
    return build_context(load_inputs(FAIR))


def test_the_fair_heads_preset_names_its_full_fine_tuning_study():
    studies = preset_studies(config_dir() / "experiment" / "fair_heads.yaml")
    assert studies == (Study(STUDY, (("freeze", ("full",)),)),)
    assert studies_of("python -m bench -m experiment=fair_heads head=linear") == studies
    assert studies_of("python -m bench -m experiment=fair_table7") == ()
    assert studies_of("python -m bench task=sst2 seed=1") == ()


@needs_fair
def test_the_partition_comes_from_the_newest_launchs_preset(fair_ctx):
    assert results_studies(FAIR) == fair_ctx.studies
    family = family_of(fair_ctx.cells, fair_ctx.studies)
    full = fair_ctx.cells["freeze_label"] == "full"
    assert (family[full] == STUDY).all() and (family[~full] == HEADLINE).all()
    # the study's runs have fewer seeds than the headline's: the reason it is apart
    assert fair_ctx.cells[full]["n_runs"].max() < fair_ctx.cells[~full]["n_runs"].min()


@needs_fair
def test_holm_runs_per_family_as_an_independent_holm_does(fair_ctx):
    shown = headline_comparisons(fair_ctx)
    assert set(shown["family"]) == {HEADLINE, STUDY}
    for _, rows in shown.groupby("family"):
        tested = rows[rows["p"].notna()]
        assert (rows["n_comparisons_all"] == len(tested)).all()
        np.testing.assert_allclose(tested["p_holm_all"], holm_reference(tested["p"]))
        m = len(tested)
        sim = [stats.simultaneous_interval(r.diff, r.se, r.df, m) for r in tested.itertuples()]
        np.testing.assert_allclose(tested["sim_low"], [low for low, _ in sim])
    # the tables CLI's family is the same partition, by the same function
    doc = build(pd.read_csv(FAIR / "results.csv"), "heads", studies=results_studies(FAIR))
    note = next(n for n in doc.notes if "Holm-adjusted over the headline family" in n)
    m_head = int(shown[shown["family"] == HEADLINE]["p"].notna().sum())
    m_study = int(shown[shown["family"] == STUDY]["p"].notna().sum())
    assert f"(all {m_head} headline comparisons with a test)" in note
    assert f"The {STUDY}'s settings are not part of the headline" in note
    assert f"over the study's {m_study} comparisons with a test" in note


@needs_fair
def test_the_fair_heads_texts_count_the_headline_and_the_study_apart(fair_ctx):
    shown = headline_comparisons(fair_ctx)
    frame = headline_frame(fair_ctx)
    m_head = int(shown[shown["family"] == HEADLINE]["p"].notna().sum())
    m_study = int(shown[shown["family"] == STUDY]["p"].notna().sum())
    settings = int((frame["family"] == HEADLINE).sum())
    seeds = int(fair_ctx.cells[fair_ctx.cells["freeze_label"] == "full"]["n_runs"].max())
    readme = experiment_readme(FAIR)
    verdict = readme.split("## Verdict", 1)[1].split("## Every head", 1)[0]
    headline, study = verdict.split("### ", 1)
    assert study.startswith(f"Full fine-tuning study ({seeds} seeds, 4 trials; not part of ")
    assert "full:" not in headline and ", full:" in study
    assert f"Holm-corrected over all {m_head} headline comparisons" in headline
    assert f"Holm over the study's {m_study} comparisons" not in headline
    assert f"Holm-corrected over the study's {m_study} comparisons" in study
    assert f"simultaneous 95% interval over the study's {m_study} comparisons" in study
    assert f"all {m_head + m_study} headline comparisons" not in readme
    finding = experiment_finding(FAIR)
    assert f"Holm over all {m_head} headline comparisons; a tier marks those) in 1 of " in finding
    assert f"of {settings} settings" in finding
    assert "Full fine-tuning study (" in finding and f"the study's {m_study} comparisons" in finding


def test_an_experiment_without_studies_is_one_family_as_before():
    ctx = build_context(load_inputs(RESULTS / "fair_table7"))
    assert ctx.studies == ()
    shown = headline_comparisons(ctx)
    before = stats.holm_all(stats.leader_comparisons(ctx.cells, ctx.comparisons))
    assert (shown["family"] == HEADLINE).all()
    pd.testing.assert_frame_equal(shown.drop(columns="family"), before)


def _preset(tmp_path: Path, studies: str) -> Path:
    (tmp_path / "experiment").mkdir(parents=True)
    preset = tmp_path / "experiment" / "bad.yaml"
    preset.write_text(f"# @package _global_\nsweep_name: bad\n{studies}", encoding="utf-8")
    return preset


@pytest.mark.parametrize(
    ("studies", "words"),
    [
        ("studies:\n  - name: s\n    where: {layer: 3}\n", "unknown column layer"),
        ("studies:\n  - name: s\n    where: {}\n", "expected a mapping of columns"),
        ("studies:\n  - name: s\n", "expected exactly the keys name and where"),
        ("studies: {name: s}\n", "expected a list"),
        ("studies:\n  - {name: headline, where: {freeze: full}}\n", "is taken"),
        ("studies:\n  - {name: s, where: {freeze: [[full]]}}\n", "a value or a non-empty list"),
    ],
)
def test_a_malformed_studies_key_is_a_clear_error(tmp_path, studies, words):
    preset = _preset(tmp_path, studies)
    with pytest.raises(ConfigError) as err:
        studies_of("python -m bench -m experiment=bad", tmp_path)
    message = str(err.value)
    assert str(preset) in message and "studies" in message and words in message
    if "unknown column" in words:
        assert f"valid choices: {', '.join(STUDY_COLUMNS)}" in message


def test_a_list_of_values_and_a_training_size_match(tmp_path):
    _preset(tmp_path, "studies:\n  - {name: small, where: {task: [rte, sst2], train_size: 1000}}\n")
    (study,) = studies_of("python -m bench -m experiment=bad", tmp_path)
    frame = pd.DataFrame(
        {"task": ["rte", "sst2", "rte", "cola"], "train_size": [1000.0, 1000, np.nan, 1000]}
    )
    assert list(family_of(frame, (study,))) == ["small", "small", HEADLINE, HEADLINE]


def test_the_studies_key_changes_no_cell_hash():
    """Composing fair_heads with its studies key gives committed cells their stored hashes."""
    stored = {
        cell_path(OmegaConf.create(c["config"])): c["config_hash"]
        for c in json.loads((FAIR / "cells.json").read_text())
    }
    with hydra_context(config_dir()):
        for overrides in (
            ["experiment=fair_heads", "task=rte", "head=bilstm", "freeze=full", "seed=3",
             "data.train_size=1000", "trainer.max_epochs=2", "search.trials=4"],
            ["experiment=fair_heads", "task=sst2", "head=linear", "freeze=frozen", "seed=7",
             "data.train_size=2000", "trainer.max_epochs=3", "search.trials=6"],
        ):  # fmt: skip
            cfg = compose("config", overrides=overrides)
            assert cfg.studies[0].name == STUDY
            assert config_hash(cfg) == stored[cell_path(cfg)], cell_path(cfg)


def _shown(diffs: list[float], holm: list[float]) -> pd.DataFrame:
    """Comparisons of one setting's winner (``a``) with ``b``, ``c``, ``d``."""
    return pd.DataFrame(
        {
            "task": "rte",
            "encoder": "minilm",
            "freeze_label": "full",
            "train_size": 1000,
            "head_a": "a",
            "head_b": ["b", "c", "d"],
            "diff": diffs,
            "p": [0.001, 0.2, np.nan],
            "p_holm_all": holm,
            "ahead": [False, False, False],
        }
    )


def test_a_head_significantly_ahead_of_the_winner_is_not_called_tied():
    # b: the winner by mean is significantly behind it on the seeds both ran
    shown = _shown([-0.02, 0.01, np.nan], [0.003, 0.4, np.nan])
    row = {"task": "rte", "encoder": "minilm", "freeze_label": "full", "train_size": 1000}
    ties = setting_ties(shown, row)
    assert ties.behind == ["b"] and ties.tied == ["c"] and ties.untested == ["d"]
    # and the families' Holm keeps it: rerun holm_families on the same rows
    redone = holm_families(shown.drop(columns=["p_holm_all", "ahead"]), ())
    assert setting_ties(redone, row).behind == ["b"]


@needs_fair
def test_a_verdict_names_a_head_ahead_of_the_winner_apart_from_the_ties(fair_ctx):
    frame = headline_frame(fair_ctx)
    r = frame[(frame["task"] == "sst2") & (frame["freeze_label"] == "full")].iloc[0].copy()
    r["tied"], r["behind"] = "last4_concat, pooler-random", "mean_linear"
    m = int(r["n_comparisons"])
    sentence = headline_sentence(r, multi_encoder=False)
    assert (
        f"Not distinguishable from the winner (paired t-test, Holm over the same {m}): "
        "last4_concat, pooler-random. Significantly ahead of the winner on the seeds both ran "
        f"(paired t-test, Holm over the same {m}): mean_linear."
    ) in sentence
    assert "mean_linear." not in sentence.split("Significantly ahead")[0].split("points")[-1]
