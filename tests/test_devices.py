"""A setting whose heads trained on different devices is named, with which heads ran where.

Checked on the committed ``fair_heads_gpu`` cells (MRPC frozen ``last4_concat`` on the CPU
while the other heads trained on an H200; RTE frozen ``last4_concat`` split by seed), against
a count made here from ``cells.json`` alone, and on small made-up records for the cases the
committed results do not have.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from bench.report import readme
from bench.report.budget import budget_lines
from bench.report.context import build_context
from bench.report.devices import (
    describe_devices,
    device_caveat,
    device_lines,
    devices_by_setting,
    mixed_settings,
)
from bench.report.headline import budget_parts
from bench.report.inputs import load_inputs
from bench.results.stats import WHOLE_SPLIT
from conftest import ROOT

RESULTS = ROOT / "results"
GPU = RESULTS / "fair_heads_gpu"
TITLES = {"mrpc": "MRPC", "rte": "RTE", "sst2": "SST-2", "cola": "CoLA", "stsb": "STS-B"}


def _cells(source: Path) -> list[dict[str, Any]]:
    return json.loads((source / "cells.json").read_text(encoding="utf-8"))


def _where(record: dict[str, Any]) -> str:
    """Where a cell trained, from its hardware record alone."""
    hardware = record.get("hardware") or {}
    if hardware.get("gpu"):
        return str(hardware["gpu"])
    return f"CPU ({hardware['cpu_capability']})" if hardware.get("cpu_capability") else "?"


def _record(
    task: str, head: str, seed: int, hardware: dict | None, size: int | None = None
) -> dict:
    return {
        "cell": {
            "task": task,
            "encoder": "minilm",
            "head_label": head,
            "freeze_label": "frozen",
            "seed": seed,
            "train_size": size,
        },
        "status": "ok",
        "hardware": hardware,
    }


H200 = {"gpu": "NVIDIA H200", "cpu_capability": "AVX512"}
CPU = {"gpu": None, "cpu_capability": "AVX2"}


@pytest.mark.skipif(not (GPU / "cells.json").is_file(), reason="fair_heads_gpu not committed")
def test_the_committed_gpu_experiment_names_exactly_its_mixed_settings():
    cells = _cells(GPU)
    by_setting: dict[tuple, dict[str, dict[str, set[int]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(set))
    )
    for record in cells:
        cell = record["cell"]
        key = (cell["task"], cell["freeze_label"])
        by_setting[key][cell["head_label"]][_where(record)].add(cell["seed"])
    mixed = {
        key
        for key, heads in by_setting.items()
        if len({d for by in heads.values() for d in by}) > 1
    }
    assert mixed == {("mrpc", "frozen"), ("rte", "frozen")}  # what the audit found
    lines = device_lines(cells)
    assert [line.split(":", 1)[0] for line in lines] == [
        f"{TITLES[t]} {f}" for t, f in sorted(mixed)
    ]
    mrpc = by_setting[("mrpc", "frozen")]
    assert mrpc["last4_concat"] == {"CPU (AVX512)": set(range(1, 11))}
    assert all(set(by) == {"NVIDIA H200"} for h, by in mrpc.items() if h != "last4_concat")

    def ran(key: tuple[str, str], library: str) -> str:
        found = {
            r["versions"][library]
            for r in cells
            if (r["cell"]["task"], r["cell"]["freeze_label"]) == key
        }
        return " and ".join(sorted(found))

    # the CPU cells ran other library versions than the H200's: the line says which
    assert " and " in ran(("mrpc", "frozen"), "torch")
    also = {
        key: f" (torch {ran(key, 'torch')}, transformers {ran(key, 'transformers')}"
        + " among its cells)"
        for key in mixed
    }
    assert lines[0] == (
        "MRPC frozen: last4_concat on CPU (AVX512), the other heads on NVIDIA H200"
        + also[("mrpc", "frozen")]
    )
    rte = by_setting[("rte", "frozen")]["last4_concat"]
    assert rte == {"NVIDIA H200": {1, 2, 3, 4, 5}, "CPU (AVX512)": {6, 7, 8, 9, 10}}
    assert lines[1] == (
        "RTE frozen: last4_concat seeds 1-5 on NVIDIA H200 and 6-10 on CPU (AVX512), "
        "the other heads on NVIDIA H200" + also[("rte", "frozen")]
    )
    caveat = device_caveat(cells, code=True)
    assert caveat is not None and "in these 2 settings" in caveat
    assert "MRPC frozen: `last4_concat` on CPU (AVX512), the other heads on NVIDIA H200" in caveat


@pytest.mark.skipif(not (GPU / "cells.json").is_file(), reason="fair_heads_gpu not committed")
def test_the_results_readme_and_the_report_carry_the_device_caveat():
    cells = _cells(GPU)
    caveat = device_caveat(cells)
    assert caveat is not None
    assert not any("device" in line for line in budget_lines(cells))  # a caveat, not a budget
    text = readme.experiment_readme(GPU)
    caveats = text.split("**Caveats.**", 1)[1].split("## Verdict", 1)[0]
    assert caveat in caveats  # among the README's caveats, above its verdict
    parts = budget_parts(build_context(load_inputs(GPU)))
    assert any(caveat.replace("'", "&#x27;") in part and "warning" in part for part in parts)


@pytest.mark.parametrize("name", ["curves_sst2_rte", "fair_heads", "fair_table7_probe"])
def test_settings_that_share_a_device_are_not_named(name):
    source = RESULTS / name
    if not (source / "cells.json").is_file():
        pytest.skip(f"{name} not committed")
    cells = _cells(source)
    assert device_lines(cells) == [] and device_caveat(cells) is None
    assert not any("device" in line for line in budget_lines(cells))


def test_a_setting_split_the_same_way_for_every_head_says_every_head():
    cells = [
        _record("sst2", head, seed, H200 if seed <= 2 else CPU)
        for head in ("linear", "bilstm")
        for seed in (1, 2, 3)
    ]
    assert device_lines(cells) == [
        "SST-2 frozen: every head: seeds 1,2 on NVIDIA H200 and 3 on CPU (AVX2)"
    ]


def test_cells_without_a_device_record_are_said_so_and_failed_cells_do_not_count():
    cells = [_record("rte", "linear", s, H200) for s in (1, 2)]
    cells += [_record("rte", "bilstm", s, None) for s in (1, 2)]
    failed = _record("sst2", "linear", 1, CPU)
    cells += [{**failed, "status": "error"}, _record("sst2", "bilstm", 1, H200)]
    assert device_lines(cells, code=True) == [
        "RTE frozen: `bilstm` with no device recorded, `linear` on NVIDIA H200"
    ]
    assert set(devices_by_setting(cells)[("sst2", "minilm", "frozen", WHOLE_SPLIT)]) == {"bilstm"}


def test_versions_are_named_only_where_they_differ_within_a_mixed_setting():
    same = {"torch": "2.13.0", "transformers": "5.24.0"}
    cells = [
        {**_record("rte", "linear", 1, H200), "versions": same},
        {**_record("rte", "bilstm", 1, CPU), "versions": same},
        {**_record("sst2", "linear", 1, H200), "versions": {**same, "torch": "2.11.0"}},
        {**_record("sst2", "bilstm", 1, CPU), "versions": same},
    ]
    assert device_lines(cells) == [
        "RTE frozen: bilstm on CPU (AVX2), linear on NVIDIA H200",
        "SST-2 frozen: bilstm on CPU (AVX2), linear on NVIDIA H200 "
        "(torch 2.11.0 and 2.13.0 among its cells)",
    ]


def test_a_learning_curve_names_the_size_of_its_mixed_setting():
    cells = [_record("sst2", h, 1, H200, size) for h in ("linear", "bilstm") for size in (100, 400)]
    cells.append(_record("sst2", "mean_linear", 1, CPU, 400))
    cells.append(_record("sst2", "mean_linear", 1, H200, 100))
    (mixed,) = mixed_settings(cells)
    assert mixed.name == "SST-2 frozen, 400 examples"
    assert (
        describe_devices(mixed.heads) == "mean_linear on CPU (AVX2), the other heads on NVIDIA H200"
    )
