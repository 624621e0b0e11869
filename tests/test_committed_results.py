"""The committed reference results stay valid as the code changes.

Every ``results/<experiment>/cells.json`` holds the config and config hash of each cell
that produced the committed tables. Two things must keep holding:

- the hash recipe (:func:`bench.cell.config_hash`) still gives each stored config its
  stored hash, so resume recognises the cells as done and never retrains them silently;
- composing the experiment preset today yields exactly those cells (same run directories,
  same hashes), so ``nox -s reproduce`` resumes them instead of training new ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra import compose
from omegaconf import OmegaConf

from bench.cell import cell_path, config_hash
from bench.paths import config_dir
from bench.run.plan import hydra_context, plan
from bench.run.search import apply_values

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
COMMITTED = sorted(p.parent.name for p in RESULTS.glob("*/cells.json"))
#: Experiments whose committed cells were run with overrides (the command in their README).
OVERRIDES: dict[str, list[str]] = {}


def _cells(name: str) -> list[dict]:
    return json.loads((RESULTS / name / "cells.json").read_text())


def test_there_are_committed_results():
    assert {"quick", "fair_heads"} <= set(COMMITTED)


def _planned_config(cell: dict) -> dict:
    """The cell's own config: what its hash is of.

    A cell that ran a search stores the configuration it trained (the selected trial's
    ``optim`` values); its hash is of the planned cell, whose ``optim`` the committed
    ``.hydra/config.yaml`` of its run directory keeps. That file is parsed with libyaml, and
    only an ``optim`` with an interpolation (``${...}``) is resolved by OmegaConf: building
    every file as a DictConfig took most of this test's time (hundreds of cells).
    """
    config = dict(cell["config"])
    if cell.get("search"):
        text = (ROOT / cell["run_dir"] / ".hydra" / "config.yaml").read_text(encoding="utf-8")
        stored = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        optim = stored["optim"]
        if "${" in json.dumps(optim):
            optim = OmegaConf.to_container(OmegaConf.create(stored).optim, resolve=True)
        config["optim"] = optim
    return config


@pytest.mark.parametrize("name", COMMITTED)
def test_stored_configs_still_hash_to_their_stored_hash(name):
    for cell in _cells(name):
        planned = _planned_config(cell)
        assert config_hash(OmegaConf.create(planned)) == cell["config_hash"], cell["cell"]
        if cell.get("search"):  # what it trained is the planned cell with the trial's values
            # apply_values changes `optim` alone (the planned config is the stored one with
            # the planned `optim`): applied to that node, not to a deep copy of the whole
            # config per cell, which took most of this test's time
            optim = OmegaConf.create({"optim": planned["optim"]})
            trained = apply_values(optim, cell["search"]["selected_config"])
            assert OmegaConf.to_container(trained.optim) == cell["config"]["optim"], cell["cell"]


#: Presets of more than 50 cells compose for a minute or more: run with -m slow.
LARGE = {
    "fair_heads",
    "fair_table7",
    "fair_table7_probe",
    "variance_seeds",
    "curves_sst2_rte",
    "fair_heads_gpu",
}
#: Experiments resumed across sessions, committed as far as they got (their README says so).
IN_PROGRESS = {"fair_heads_gpu"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in LARGE else n for n in COMMITTED]
)
def test_composing_the_preset_gives_the_committed_cells(name):
    overrides = [f"experiment={name}", *OVERRIDES.get(name, [])]
    planned = plan(config_dir(), overrides, multirun=True)
    with hydra_context(config_dir()):
        composed = {}
        for job in planned:
            cfg = compose("config", overrides=list(job.overrides))
            composed[cell_path(cfg)] = config_hash(cfg)
    stored = {cell_path(OmegaConf.create(c["config"])): c["config_hash"] for c in _cells(name)}
    # Every committed cell is planned today, with its stored hash (resume skips it) ...
    assert {path: composed.get(path) for path in stored} == stored
    # ... and a finished experiment is the whole preset.
    if name not in IN_PROGRESS:
        assert composed == stored
