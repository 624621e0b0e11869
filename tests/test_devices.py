"""Budget, devices and provenance frames, against counts made here from ``cells.json`` alone.

Checked on the committed experiments (``fair_heads``: one budget per setting; ``fair_heads_gpu``:
MRPC and RTE frozen mix a CPU and an H200) and on small made-up records.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.report.budget import adequacy_frame, budget_frame, budget_section, cell_budgets
from bench.report.context import ReportContext
from bench.report.devices import device_frame, devices_section, seed_ranges
from bench.report.inputs import ReportInputs, load_inputs
from bench.report.provenance import provenance_section
from bench.report.style import Palette
from conftest import ROOT

RESULTS = ROOT / "results"
GPU, CPU = RESULTS / "fair_heads_gpu", RESULTS / "fair_heads"


def _cells(source: Path) -> list[dict[str, Any]]:
    return json.loads((source / "cells.json").read_text(encoding="utf-8"))


def _context(inputs: ReportInputs) -> ReportContext:
    return ReportContext(
        inputs, Palette([], []), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), False
    )


def _where(record: dict[str, Any]) -> tuple[str, str, str]:
    """Where a cell trained, from its hardware and versions records alone."""
    hardware, versions = record.get("hardware") or {}, record.get("versions") or {}
    device = (
        hardware.get("gpu") or f"CPU ({hardware.get('cpu_capability', 'kernels not recorded')})"
    )
    return device, versions.get("torch", "–"), versions.get("transformers", "–")


def _record(task: str, head: str, seed: int, gpu: str | None, trials: int = 6) -> dict[str, Any]:
    space = {"frozen_head_lr": [0.001, 0.01, 0.1], "weight_decay": [0.0]}
    cell = {"task": task, "encoder": "minilm", "head_label": head, "freeze_label": "frozen"}
    return {
        "cell": cell | {"seed": seed},
        "status": "ok",
        "hardware": {"gpu": gpu, "cpu_capability": "AVX2"},
        "config": {
            "freeze": {"name": "frozen"},
            "search": {"name": "random", "trials": trials, "space": {"frozen": space}},
            "trainer": {"max_epochs": 3},
            "data": {"train_size": 500},
            "selection": {"name": "heldout", "size": 200},
        },
        "search": {"selected_config": {"frozen_head_lr": 0.1}, "train_time_s": 60.0},
        "selection": {"best_epoch": seed % 3},
    }


def test_seed_ranges():
    assert seed_ranges([3, 1, 2, 7, 9, 8, None]) == "1-3,7-9"
    assert seed_ranges([5]) == "5" and seed_ranges([]) == ""


@pytest.mark.skipif(not (CPU / "cells.json").is_file(), reason="fair_heads not committed")
def test_the_adequacy_of_every_search_against_its_grid_and_epochs():
    cells = _cells(CPU)
    edge, last = defaultdict(set), defaultdict(int)
    for c in cells:
        family = "frozen" if c["config"]["freeze"]["name"] == "frozen" else "finetune"
        grid = c["config"]["search"]["space"][family]
        key = "frozen_head_lr" if family == "frozen" else "encoder_lr"
        chosen = c["search"]["selected_config"][key]
        where = (c["cell"]["task"], c["cell"]["freeze_label"], c["cell"]["head_label"])
        edge[where].add(chosen in (min(grid[key]), max(grid[key])))
        last[where] += c["selection"]["best_epoch"] == c["config"]["trainer"]["max_epochs"] - 1
    adequacy = adequacy_frame(cell_budgets(cells))
    found = adequacy.set_index(["task", "freeze_label", "head_label"])
    assert len(found) == len(edge)
    for where, flags in edge.items():
        assert found.loc[where, "at_edge"] == any(flags)
        assert found.loc[where, "last_epoch"] == last[where]
    assert adequacy["runs"].sum() == len(cells)


@pytest.mark.skipif(not (CPU / "cells.json").is_file(), reason="fair_heads not committed")
def test_every_setting_gave_its_heads_one_budget_and_its_tuning_time_counts_each_head_once():
    cells = _cells(CPU)
    frame = budget_frame(cell_budgets(cells)).set_index(["task", "freeze_label"])
    assert not frame.index.duplicated().any()  # one budget per setting: fair
    minutes: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for c in cells:
        key = (c["cell"]["task"], c["cell"]["freeze_label"])
        minutes[key][c["cell"]["head_label"]] = c["search"]["train_time_s"] / 60
        assert frame.loc[key, "trials"] == c["config"]["search"]["trials"]
        assert frame.loc[key, "max_epochs"] == c["config"]["trainer"]["max_epochs"]
    for key, heads in minutes.items():
        assert frame.loc[key, "tuning_min"] == pytest.approx(sum(heads.values()))
        assert frame.loc[key, "heads"] == ", ".join(sorted(heads))


def test_unequal_budgets_are_two_rows_of_one_setting_and_the_section_counts_them():
    cells = [_record("rte", "linear", s, None) for s in (1, 2)]
    cells += [_record("rte", "bilstm", s, None, trials=2) for s in (1, 2)]
    frame = budget_frame(cell_budgets(cells))
    assert sorted(frame["trials"]) == [2, 6] and set(frame["heads"]) == {"linear", "bilstm"}
    inputs = ReportInputs("t", pd.DataFrame(), pd.DataFrame(), cells, {})
    section = budget_section(_context(inputs))
    assert section is not None and "1 settings; 1 gave their heads unequal budgets" in section.body
    last = sum(c["selection"]["best_epoch"] == 2 for c in cells)  # of 3 epochs, from 0
    assert f"{last} of 4 runs selected their last" in section.body
    assert "2 of 2 heads selected a learning rate at its grid" in section.body  # 0.1: the top
    assert (
        budget_section(_context(ReportInputs("t", pd.DataFrame(), pd.DataFrame(), [], {}))) is None
    )


@pytest.mark.skipif(not (GPU / "cells.json").is_file(), reason="fair_heads_gpu not committed")
def test_the_gpu_experiment_lists_exactly_its_mixed_settings_head_by_head():
    cells = [c for c in _cells(GPU) if c.get("status", "ok") == "ok"]
    where: dict[tuple, dict[tuple, set[int]]] = defaultdict(lambda: defaultdict(set))
    for c in cells:
        key = (c["cell"]["task"], c["cell"]["freeze_label"])
        where[key][(c["cell"]["head_label"], *_where(c))].add(c["cell"]["seed"])
    mixed = {k for k, by in where.items() if len({w[1:] for w in by}) > 1}
    assert mixed == {("mrpc", "frozen"), ("rte", "frozen")}  # what the audit found
    frame = device_frame(cells).set_index(["task", "freeze_label", "head_label", "device"])
    for key, by in where.items():
        for (head, device, torch, transformers), seeds in by.items():
            r = frame.loc[(*key, head, device)]
            assert (r["torch"], r["transformers"]) == (torch, transformers)
            assert (r["runs"], r["seeds"]) == (len(seeds), seed_ranges(seeds))
    assert frame.loc[("rte", "frozen", "last4_concat", "NVIDIA H200"), "seeds"] == "1-5"
    inputs = ReportInputs("t", pd.DataFrame(), pd.DataFrame(), cells, {})
    section = devices_section(_context(inputs))
    assert section is not None
    rows = sum(len(by) for k, by in where.items() if k in mixed)
    assert section.body.count("<tr>") == rows + 1  # the header and one row per head and device
    assert f"{len(mixed)} of {len(where)} settings" in section.body


@pytest.mark.parametrize("name", ["curves_sst2_rte", "fair_heads", "fair_table7_probe"])
def test_experiments_run_on_one_device_with_one_set_of_versions_have_no_devices_section(name):
    if not (RESULTS / name / "cells.json").is_file():
        pytest.skip(f"{name} not committed")
    cells = _cells(RESULTS / name)
    places = {_where(c) for c in cells if c.get("status", "ok") == "ok"}
    inputs = ReportInputs("t", pd.DataFrame(), pd.DataFrame(), cells, {})
    assert (devices_section(_context(inputs)) is None) == (len(places) == 1)


def _flatten(config: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(config, dict) and config:
        return {
            k: v
            for key, value in config.items()
            for k, v in _flatten(value, f"{prefix}{key}.").items()
        }
    return {prefix.rstrip("."): json.dumps(config, sort_keys=True)}


@pytest.mark.skipif(not (CPU / "cells.json").is_file(), reason="fair_heads not committed")
def test_provenance_counts_statuses_and_splits_the_config_into_shared_and_varying_keys():
    inputs = load_inputs(CPU)
    body = provenance_section(_context(inputs)).body
    flat = [_flatten(c["config"]) for c in inputs.cells]
    keys = set().union(*flat)
    shared = {k for k in keys if len({f.get(k) for f in flat}) == 1}
    n = len(inputs.cells)
    assert f"Configuration shared by all {n} cells ({len(shared)} keys)" in body
    assert f"the {len(keys) - len(shared)} keys that vary" in body
    runs = inputs.table.drop_duplicates(subset=["run_dir"])
    for status, count in runs["status"].value_counts().items():
        assert f">{status}<" in body and f">{count}<" in body


@pytest.mark.skipif(not (CPU / "cells.json").is_file(), reason="fair_heads not committed")
def test_the_budget_shows_the_selection_size_each_cell_recorded():
    cells = _cells(CPU)
    sizes: dict[tuple[str, str], set[int]] = defaultdict(set)
    for c in cells:
        sizes[(c["cell"]["task"], c["cell"]["freeze_label"])].add(int(c["selection"]["size"]))
    assert set().union(*sizes.values()) == {490, 500}  # RTE's training subset leaves 490
    frame = budget_frame(cell_budgets(cells)).set_index(["task", "freeze_label"])
    for key, (size,) in sizes.items():
        assert frame.loc[key, "selection"] == f"held out ({size})"
