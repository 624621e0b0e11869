"""A preset's studies and equivalence margins: read from the preset, checked, and the
families the committed frames use (``conf/experiment/fair_heads.yaml`` names a full
fine-tuning study beside its frozen headline)."""

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
from bench.results.run_records import last_launch, read_launch_log
from bench.results.studies import (
    HEADLINE,
    STUDY_COLUMNS,
    Margin,
    Study,
    family_of,
    margins_of,
    studies_of,
)
from bench.run.plan import hydra_context
from conftest import ROOT

RESULTS = ROOT / "results"
FAIR = RESULTS / "fair_heads"
STUDY = "full fine-tuning study"
needs_fair = pytest.mark.skipif(not (FAIR / "results.csv").is_file(), reason="not run")


@pytest.fixture(scope="module")
def fair_frames():
    return pd.read_csv(FAIR / "scores.csv"), pd.read_csv(FAIR / "comparisons.csv")


def test_the_fair_heads_preset_names_its_full_fine_tuning_study():
    studies = studies_of("python -m bench -m experiment=fair_heads head=linear")
    assert studies == (Study(STUDY, (("freeze", ("full",)),)),)
    assert studies_of("python -m bench -m experiment=fair_table7") == ()
    assert studies_of("python -m bench task=sst2 seed=1") == ()


@needs_fair
def test_the_partition_comes_from_the_newest_launchs_preset(fair_frames):
    scores, comparisons = fair_frames
    command = str(last_launch(read_launch_log([FAIR])).get("command") or "")
    assert studies_of(command) == (Study(STUDY, (("freeze", ("full",)),)),)
    for frame in (scores, comparisons):
        full = frame["freeze_label"] == "full"
        assert (frame.loc[full, "family"] == STUDY).all()
        assert (frame.loc[~full, "family"] == HEADLINE).all()
    # the study's runs have fewer seeds than the headline's: the reason it is apart
    full = scores["freeze_label"] == "full"
    assert scores[full]["n"].max() < scores[~full]["n"].min()
    # each family is its own Holm correction: m is the number of its comparisons
    for family, rows in comparisons.groupby("family"):
        assert (rows["m"] == rows["p"].notna().sum()).all(), family


def test_the_fair_heads_preset_declares_margins_with_reasons():
    margins = margins_of("python -m bench -m experiment=fair_heads")
    assert {(m.task, m.metric) for m in margins} == {
        ("sst2", "accuracy"), ("mrpc", "f1"), ("rte", "accuracy"), ("cola", "mcc"),
        ("stsb", "pearson"),
    }  # fmt: skip
    assert all(isinstance(m, Margin) and m.margin > 0 and m.reason for m in margins)
    assert margins_of("python -m bench task=sst2 seed=1") == ()


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("{task: sst2, metric: accuracy, margin: 1.0}", "expected exactly the keys"),
        ("{task: sst2, metric: accuracy, margin: 0, reason: x}", "expected points in (0, 100)"),
        ("{task: sst2, metric: accuracy, margin: 1, reason: ' '}", "say why"),
    ],
)
def test_a_malformed_margin_is_a_clear_error(tmp_path, entry, words):
    preset = _preset(tmp_path, f"equivalence:\n  - {entry}\n")
    with pytest.raises(ConfigError) as err:
        margins_of("python -m bench -m experiment=bad", tmp_path)
    assert str(preset) in str(err.value) and "equivalence[0]" in str(err.value)
    assert words in str(err.value)


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
    """Composing fair_heads with its studies and equivalence keys gives committed cells their
    stored hashes."""
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
            assert cfg.studies[0].name == STUDY and cfg.equivalence[0].task == "sst2"
            assert config_hash(cfg) == stored[cell_path(cfg)], cell_path(cfg)
