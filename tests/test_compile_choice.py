"""benchmarks/compile_choice.py: the rule that fixes whether fair_heads_gpu fine-tunes compiled."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose
from omegaconf import OmegaConf

from bench.cell import config_hash
from bench.paths import config_dir
from bench.run.plan import hydra_context
from benchmarks import compile_choice as cc
from benchmarks import perf

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "conf" / "experiment" / "fair_heads_gpu.yaml"


def _run(framework: str, speed: float, first: float, acc: float) -> dict[str, Any]:
    """One run of perf.py's finetune part, with the fields the rule reads."""
    return {
        "framework": framework,
        "throughput": {"examples_per_s_after_first": speed, "first_batch_s": first},
        "dev_accuracy": {"final": acc},
    }


def test_side_figures_are_medians_over_each_sides_runs() -> None:
    runs = [
        _run("headbench", 2000, 2.0, 0.850),
        _run("headbench", 2200, 1.0, 0.860),
        _run("headbench", 2100, 3.0, 0.840),
        _run("headbench_graphs", 5000, 40.0, 0.852),
        _run("hf_trainer", 1800, 1.0, 0.851),  # not a candidate
        {"framework": "headbench_compile", "throughput": {"first_batch_s": None}},  # no speed
    ]
    figures = cc.side_figures(runs)
    assert set(figures) == {"headbench", "headbench_graphs"}
    assert figures["headbench"] == {
        "examples_per_s_after_first": statistics.median([2000, 2200, 2100]),
        "first_batch_s": statistics.median([2.0, 1.0, 3.0]),
        "dev_accuracy": statistics.median([0.850, 0.860, 0.840]),
    }


def test_the_fastest_side_within_the_accuracy_tolerance_is_chosen() -> None:
    figures = {
        "headbench": {"examples_per_s_after_first": 2000, "first_batch_s": 1, "dev_accuracy": 0.85},
        "headbench_compile": {
            "examples_per_s_after_first": 3000,
            "first_batch_s": 30,
            "dev_accuracy": 0.853,
        },
        "headbench_graphs": {
            "examples_per_s_after_first": 6000,
            "first_batch_s": 60,
            "dev_accuracy": 0.846,
        },
    }
    decision = cc.choose(figures, share=1_000_000)
    assert decision["side"] == "headbench_graphs"
    assert decision["overrides"] == list(cc.SIDES["headbench_graphs"])
    assert decision["sides"]["headbench_graphs"]["estimated_s"] == pytest.approx(
        60 + 1_000_000 / 6000
    )
    # 0.6 points from eager's accuracy: the graphs side does not count, compile wins
    figures["headbench_graphs"]["dev_accuracy"] = 0.856
    decision = cc.choose(figures, share=1_000_000)
    assert decision["side"] == "headbench_compile"
    assert not decision["sides"]["headbench_graphs"]["counts"]
    # a share too small to repay compiling: eager
    assert cc.choose(figures, share=20_000)["side"] == "headbench"


def test_no_eager_run_decides_nothing() -> None:
    decision = cc.choose({}, share=1e6)
    assert decision["side"] is None and decision["overrides"] == []
    only_graphs = {
        "headbench_graphs": {
            "examples_per_s_after_first": 9e9,
            "first_batch_s": 0,
            "dev_accuracy": 0.9,
        }
    }
    assert cc.choose(only_graphs, share=1e6)["side"] is None


def test_a_workers_share_counts_every_training_of_the_launch() -> None:
    share = cc.worker_examples(
        {"rte": 2490, "mrpc": 3668}, selection=500, epochs=3, trainings_per_task=80, workers=4
    )
    assert share == (1990 + 3168) * 3 * 80 / 4


def test_the_preset_counts_are_the_presets() -> None:
    """Epochs, trials, heads and seeds as the preset file states them (read with PyYAML)."""
    preset = yaml.safe_load(PRESET.read_text())
    params = preset["hydra"]["sweeper"]["params"]
    heads = len(params["head"].split(","))
    assert params["seed"] == "range(1,11)"
    counts = cc._preset_counts(["rte"])
    assert counts == {
        "selection": 500,
        "epochs": preset["trainer"]["max_epochs"],
        "trainings_per_task": heads * (preset["search"]["trials"] + 10),
    }


@pytest.mark.parametrize("side", sorted(cc.SIDES))
def test_each_sides_overrides_set_what_perf_measured(side: str) -> None:
    """The preset with a side's overrides trains a fine-tuning cell as perf.py's side did,
    and leaves every frozen cell's hash as committed (nothing to compile in cached states)."""
    measured = dict(o.split("=", 1) for o in perf._SIDE_OVERRIDES.get(side, []))
    base = ["experiment=fair_heads_gpu", "task=rte", "head=linear", "seed=1"]
    with hydra_context(config_dir()):
        full = compose("config", overrides=[*base, "freeze=full", *cc.SIDES[side]])
        frozen = compose("config", overrides=[*base, "freeze=frozen"])
        frozen_chosen = compose("config", overrides=[*base, "freeze=frozen", *cc.SIDES[side]])
    assert str(OmegaConf.select(full, "trainer.compile")).lower() == measured.get(
        "trainer.compile", "false"
    )
    assert str(full.data.pad_to_multiple_of).lower() == measured.get(
        "data.pad_to_multiple_of", "none"
    )
    # perf.py's headbench sides: bucketed batches and the fused AdamW, as the preset pins
    assert full.data.group_by_length == perf._GROUPING[side] and full.optim.fused is True
    assert frozen.data.group_by_length is False and frozen.optim.fused is False
    assert config_hash(frozen_chosen) == config_hash(frozen)
