"""Grid progress: a preset's whole grid counted against the results, setting by setting."""

from __future__ import annotations

import itertools
import re

import pandas as pd
import pytest
import yaml

from bench.paths import config_dir
from bench.report.context import ReportContext
from bench.report.inputs import ReportInputs, load_inputs
from bench.report.preset_grid import grid_progress, grid_section, preset_cells, swept_values
from bench.report.style import Palette
from conftest import ROOT

RESULTS = ROOT / "results"
COMMAND = "python -m bench -m experiment=study task=sst2"


def _write_preset(root, sweeper):
    (root / "experiment").mkdir(exist_ok=True)
    (root / "experiment" / "study.yaml").write_text(yaml.safe_dump({"hydra": {"sweeper": sweeper}}))
    return root / "experiment" / "study.yaml"


def _table(cells, layers: str = "-1") -> pd.DataFrame:
    """A normalised-looking results table: one row per (task, head, freeze, seed, size)."""
    rows = [
        {
            "task": task,
            "encoder": "minilm",
            "head": head,
            "head_label": "pooler-random" if head == "pooler" else head,
            "layers": layers,
            "freeze": freeze,
            "seed": seed,
            "order_seed": -1,
            "train_size": size,
        }
        for task, head, freeze, seed, size in cells
    ]
    return pd.DataFrame(rows)


def _context(table: pd.DataFrame, command: str) -> ReportContext:
    inputs = ReportInputs("t", table, pd.DataFrame(), [], {"command": command})
    return ReportContext(
        inputs, Palette([], []), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), False
    )


def test_params_grids_and_ranges_are_expanded_with_hydras_grammar(tmp_path):
    preset = _write_preset(
        tmp_path,
        {
            "params": {"task": "sst2,rte", "seed": "range(1,4)", "lr": "1e-3,1e-4"},
            "grids": [{"head": "linear"}, {"head": "bilstm,linear", "freeze": "full"}],
        },
    )
    swept = swept_values(preset)
    assert {k: swept[k] for k in ("task", "head", "seed")} == {
        "task": ["sst2", "rte"],
        "head": ["linear", "bilstm"],
        "seed": ["1", "2", "3"],
    }
    assert swept["freeze"] == ["full"] and swept["lr"] == ["0.001", "0.0001"]


def test_the_whole_grid_is_counted_per_setting_with_the_heads_short_of_it(tmp_path):
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
    heads, seeds = ("linear", "pooler", "bilstm"), range(1, 5)
    ran = [("sst2", h, "frozen", s, n) for h in heads for s in seeds for n in (100, 1000)]
    ran += [("rte", "linear", "frozen", s, 100) for s in seeds]  # rte 100: one head
    ran += [("rte", "pooler", "frozen", s, 100) for s in (1, 2)]  # ... and two seeds
    ran += [("sst2", "bilstm", "full", s, 0) for s in range(1, 4)]  # the whole split: 0
    progress = grid_progress(_table(ran), COMMAND, tmp_path)
    assert progress is not None
    planned = {
        (t, f, n): len(heads) * len(seeds)
        for t in ("sst2", "rte")
        for f, n in [("frozen", 100), ("frozen", 1000)]
    }
    planned[("sst2", "full", 0)] = len(heads) * len(seeds)
    done = {key: sum(1 for t, _, f, _, n in ran if (t, f, n) == key) for key in planned}
    found = progress.set_index(["task", "freeze", "train_size"])
    found.index = [(t, f, int(n)) for t, f, n in found.index]
    assert found["planned"].to_dict() == planned and found["done"].to_dict() == done
    assert found.loc[[("rte", "frozen", 100)], "short"].item() == "pooler-random 2/4, bilstm 0/4"
    assert found.loc[[("sst2", "frozen", 100)], "short"].item() == ""
    assert set(progress["experiment"]) == {"study"}


def test_a_layer_sweep_is_matched_by_its_layer_labels(tmp_path):
    _write_preset(tmp_path, {"params": {"head": "linear", "head.layers": "[0],[1]", "seed": "1,2"}})
    table = pd.concat(
        [_table([("sst2", "linear", "frozen", s, 0)], str(j)) for j in (0, 1) for s in (1, 2)]
    )
    table = table[~((table["layers"] == "1") & (table["seed"] == 2))]  # layer 1 lacks seed 2
    table["head_label"] = "linear-L" + table["layers"]
    progress = grid_progress(table, COMMAND, tmp_path)
    assert progress is not None and (progress["planned"].sum(), progress["done"].sum()) == (4, 3)
    assert progress["short"].item() == "linear-L1 1/2"
    _write_preset(tmp_path, {"params": {"seed": "1,2"}})  # no head swept: seeds alone
    progress = grid_progress(table[table["layers"] == "1"], COMMAND, tmp_path)
    assert progress is not None and progress[["planned", "done", "short"]].values.tolist() == [
        [2, 1, "1/2"]
    ]


def test_presets_that_cannot_be_matched_give_no_progress(tmp_path):
    interval = _write_preset(tmp_path, {"params": {"optim.lr": "interval(0.1,1)", "seed": "1"}})
    assert preset_cells(interval) is None
    combined = _write_preset(tmp_path, {"params": {"head.layers": "[-4,-3,-2,-1]", "seed": "1"}})
    assert preset_cells(combined) is None  # several layers: the table also needs the combine
    assert grid_progress(_table([]), "python -m bench -m task=sst2", tmp_path) is None  # no preset


def _inputs_and_grid(name: str):
    inputs = load_inputs(RESULTS / name)
    sweep = yaml.safe_load((config_dir() / "experiment" / f"{name}.yaml").read_text())
    return inputs, sweep["hydra"]["sweeper"]["params"]


@pytest.mark.skipif(not (RESULTS / "fair_heads_gpu" / "results.csv").is_file(), reason="not run")
def test_fair_heads_gpu_is_counted_against_its_presets_whole_grid():
    inputs, params = _inputs_and_grid("fair_heads_gpu")
    tasks, freezes, heads = (str(params[k]).split(",") for k in ("task", "freeze", "head"))
    low, high = map(int, re.fullmatch(r"range\((\d+),(\d+)\)", params["seed"]).groups())
    grid = set(itertools.product(tasks, freezes, heads, map(str, range(low, high))))
    table = inputs.table
    ran = {(t, f, h, str(s)) for t, f, h, s in table[["task", "freeze", "head", "seed"]].values}
    command = str(inputs.launch["command"])
    progress = grid_progress(table, command)
    assert progress is not None
    assert (progress["planned"].sum(), progress["done"].sum()) == (len(grid), len(grid & ran))
    for _, r in progress.iterrows():
        cells = {c for c in grid if c[:2] == (r["task"], r["freeze"])}
        assert (r["planned"], r["done"]) == (len(cells), len(cells & ran))
    section = grid_section(_context(table, command))
    assert (section is None) == (grid <= ran)


@pytest.mark.skipif(not (RESULTS / "fair_heads" / "results.csv").is_file(), reason="not run")
def test_a_finished_preset_has_no_progress_section():
    inputs = load_inputs(RESULTS / "fair_heads")
    progress = grid_progress(inputs.table, str(inputs.launch["command"]))
    assert progress is not None and (progress["done"] == progress["planned"]).all()
    assert grid_section(_context(inputs.table, str(inputs.launch["command"]))) is None


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
