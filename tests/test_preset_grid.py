"""A results README and report say what of their experiment preset's grid has no cell yet."""

from __future__ import annotations

import itertools
import re

import pandas as pd
import pytest
import yaml

from bench.paths import config_dir
from bench.report.context import build_context
from bench.report.inputs import load_inputs
from bench.report.preset_grid import (
    grid_progress,
    partial_sentence,
    preset_cells,
    preset_of,
    progress_text,
    swept_values,
    unrun_text,
    unrun_values,
)
from bench.report.readme import what_ran
from conftest import ROOT

RESULTS = ROOT / "results"


def test_the_newest_launchs_preset_is_read_from_its_command():
    assert preset_of("python -m bench -m experiment=fair_heads_gpu freeze=full") == "fair_heads_gpu"
    assert preset_of("python -m bench -m +experiment=quick seed=1") == "quick"
    assert preset_of("python -m bench -m task=sst2 my_experiment=x") is None
    assert preset_of("") is None


def test_params_grids_and_ranges_are_expanded_with_hydras_grammar(tmp_path):
    (tmp_path / "experiment").mkdir()
    preset = tmp_path / "experiment" / "study.yaml"
    preset.write_text(
        yaml.safe_dump(
            {
                "hydra": {
                    "sweeper": {
                        "params": {"task": "sst2,rte", "seed": "range(1,4)", "lr": "1e-3,1e-4"},
                        "grids": [{"head": "linear"}, {"head": "bilstm,linear", "freeze": "full"}],
                    }
                }
            }
        )
    )
    assert swept_values(preset) == {
        "task": ["sst2", "rte"],
        "head": ["linear", "bilstm"],
        "freeze": ["full"],
        "seed": ["1", "2", "3"],
    }  # lr is no results axis
    table = pd.DataFrame(
        {"task": ["sst2", "sst2"], "head": ["linear", "linear"], "freeze": "full", "seed": [1, 2]}
    )
    name, missing = unrun_values(table, "python -m bench -m experiment=study", tmp_path)
    assert name == "study"
    assert missing == {"task": ["rte"], "head": ["bilstm"], "seed": ["3"]}
    text = unrun_text(table, "python -m bench -m experiment=study", tmp_path)
    assert "conf/experiment/study.yaml also sweeps task=rte; head=bilstm; seed=3" in text
    assert unrun_values(table, "python -m bench -m experiment=absent", tmp_path) == (None, {})
    assert unrun_text(table, "python -m bench -m task=sst2", tmp_path) == ""


def _write_preset(root, sweeper):
    (root / "experiment").mkdir(exist_ok=True)
    (root / "experiment" / "study.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": sweeper}}))
    return root / "experiment" / "study.yaml"


def _table(cells):
    """A normalised-looking results table: one row per (task, head, freeze, seed, size)."""
    rows = [
        {
            "task": task,
            "encoder": "minilm",
            "head": head,
            "head_label": "pooler-random" if head == "pooler" else head,
            "freeze": freeze,
            "seed": seed,
            "order_seed": -1,
            "train_size": size,
        }
        for task, head, freeze, seed, size in cells
    ]
    return pd.DataFrame(rows)


def test_the_whole_grid_is_counted_and_each_setting_says_what_it_lacks(tmp_path):
    _write_preset(
        tmp_path,
        {
            "params": {"head": "linear,pooler,bilstm", "seed": "range(1,5)"},
            "grids": [
                {"task": "sst2,rte", "freeze": "frozen", "data.train_size": "100,1000"},
                {"task": "sst2", "freeze": "full", "data.train_size": "null"},
            ],
        },
    )
    ran = [  # sst2 frozen complete at both sizes
        ("sst2", h, "frozen", s, n)
        for h in ("linear", "pooler", "bilstm")
        for s in range(1, 5)
        for n in (100, 1000)
    ]
    ran += [("rte", "linear", "frozen", s, 100) for s in range(1, 5)]  # rte 100: one head
    ran += [("rte", "pooler", "frozen", s, 100) for s in (1, 2)]  # ... and two seeds
    ran += [("sst2", "bilstm", "full", s, 0) for s in range(1, 4)]  # the whole split: 0
    table = _table(ran)
    command = "python -m bench -m experiment=study task=sst2"
    progress = grid_progress(table, command, tmp_path)
    assert progress is not None and progress.name == "study"
    assert progress.total == 3 * 4 * (2 * 2 + 1)  # heads × seeds × (tasks × sizes + 1)
    assert progress.done == len(ran) and not progress.complete
    assert progress.missing == (
        ("rte / frozen / 100 examples", "no bilstm cells, and pooler-random has 2 of 4 seeds"),
        ("rte / frozen / 1,000 examples", "no cell"),
        (
            "sst2 / full / whole training split",
            "no linear or pooler-random cells, and bilstm has 3 of 4 seeds",
        ),
    )
    text = progress_text(progress, planned=40)
    assert text.startswith(
        f"{len(ran)} of the 60 cells of the preset conf/experiment/study.yaml have a result "
        "(its launches so far planned 40); missing: rte / frozen / 100 examples: no bilstm"
    )
    assert "(its launches" not in progress_text(progress, planned=60)  # all of it planned
    sentence = partial_sentence(table, command, 40, tmp_path)
    assert sentence == f"Partial experiment: {text}."
    unrun = unrun_text(table, command, tmp_path)
    assert unrun.startswith(f"{60 - len(ran)} of the 60 cells of the preset ")
    assert unrun.endswith("; the verdict below covers only what ran.")
    # the whole grid: nothing to say
    whole = _table(
        [
            (t, h, "frozen", s, n)
            for t, h, s, n in itertools.product(
                ("sst2", "rte"), ("linear", "pooler", "bilstm"), range(1, 5), (100, 1000)
            )
        ]
        + [("sst2", h, "full", s, 0) for h in ("linear", "pooler", "bilstm") for s in range(1, 5)]
    )
    assert grid_progress(whole, command, tmp_path).complete
    assert partial_sentence(whole, command, None, tmp_path) == ""
    assert unrun_text(whole, command, tmp_path) == ""


def test_a_preset_whose_cells_the_table_cannot_tell_apart_falls_back_to_its_values(tmp_path):
    preset = _write_preset(
        tmp_path, {"params": {"head": "linear", "head.layers": "[0],[1]", "seed": "1,2"}}
    )
    assert preset_cells(preset) is None  # two layer selections look alike in the table
    table = _table([("sst2", "linear", "frozen", 1, 0)])
    command = "python -m bench -m experiment=study"
    assert grid_progress(table, command, tmp_path) is None
    assert partial_sentence(table, command, None, tmp_path) == ""
    assert "also sweeps seed=2, with no cell yet" in unrun_text(table, command, tmp_path)


@pytest.mark.skipif(not (RESULTS / "fair_heads_gpu" / "results.csv").is_file(), reason="not run")
def test_fair_heads_gpu_is_reported_against_its_presets_whole_grid():
    """The denominator is the preset's grid, not what the launches so far planned."""
    inputs = load_inputs(RESULTS / "fair_heads_gpu")
    table, command = inputs.table, str(inputs.launch["command"])
    sweep = yaml.safe_load((config_dir() / "experiment" / "fair_heads_gpu.yaml").read_text())
    params = sweep["hydra"]["sweeper"]["params"]
    tasks, freezes, heads = (str(params[k]).split(",") for k in ("task", "freeze", "head"))
    low, high = map(int, re.fullmatch(r"range\((\d+),(\d+)\)", params["seed"]).groups())
    grid = set(itertools.product(tasks, freezes, heads, map(str, range(low, high))))
    ran = {
        (t, f, h, str(s))
        for t, f, h, s in table[["task", "freeze", "head", "seed"]].itertuples(index=False)
    }
    planned = len(inputs.launch["planned"])
    progress = grid_progress(table, command)
    assert progress is not None
    assert (progress.total, progress.done) == (len(grid), len(grid & ran))
    # every (task, freezing) setting that lacks a head or a seed is named, and no other
    lacking = {
        f"{t} / {f}"
        for t, f in itertools.product(tasks, freezes)
        if any(
            (t, f, h, s) not in ran for h, s in itertools.product(heads, map(str, range(low, high)))
        )
    }
    assert {label for label, _ in progress.missing} == lacking
    if progress.complete:
        return
    # the README's "What ran" and the report's warning count against the preset's grid
    text = what_ran(build_context(inputs))
    assert f"**Partial experiment**: {progress_text(progress, planned)}" in text
    assert f"of the {planned} cells its launches planned" not in text
    if planned < len(grid):
        assert f"of the {len(grid)} cells of the preset" in text
        assert f"its launches so far planned {planned}" in text
    assert f"of the {len(grid)} cells of the preset" in unrun_text(table, command)


@pytest.mark.skipif(not (RESULTS / "fair_heads" / "results.csv").is_file(), reason="not run")
def test_a_finished_preset_is_not_called_partial():
    inputs = load_inputs(RESULTS / "fair_heads")
    progress = grid_progress(inputs.table, str(inputs.launch["command"]))
    assert progress is not None and progress.complete
    assert "Partial" not in what_ran(build_context(inputs))


def test_the_docs_list_every_experiment_preset():
    presets = {p.stem for p in (config_dir() / "experiment").glob("*.yaml")}
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    (row,) = [line for line in usage.splitlines() if line.startswith("| `experiment` |")]
    listed = set(re.findall(r"`([\w-]+)`", row.split("|")[2]))
    assert listed == presets, f"docs/usage.md: add {presets - listed}, drop {listed - presets}"
    experiments = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8")
    table = experiments.split("## Presets")[1].split("\n\n")[1]
    rows = {
        name
        for line in table.splitlines()[2:]
        for name in re.findall(r"`([\w-]+)`", line.split("|")[1])
    }
    assert rows == presets, f"docs/experiments.md: add {presets - rows}, drop {rows - presets}"
