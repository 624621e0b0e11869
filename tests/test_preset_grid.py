"""A results README names what its experiment preset sweeps but no cell has yet."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from bench.paths import config_dir
from bench.report.preset_grid import preset_of, swept_values, unrun_text, unrun_values
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


@pytest.mark.skipif(not (RESULTS / "fair_heads_gpu" / "results.csv").is_file(), reason="not run")
def test_fair_heads_gpu_says_its_fine_tuning_half_has_not_run():
    table = pd.read_csv(RESULTS / "fair_heads_gpu" / "results.csv")
    params = yaml.safe_load((config_dir() / "experiment" / "fair_heads_gpu.yaml").read_text())
    swept = params["hydra"]["sweeper"]["params"]
    expected = {
        axis: [v for v in str(swept[axis]).split(",") if v not in set(table[axis].astype(str))]
        for axis in ("task", "head", "freeze")
    }
    expected = {axis: values for axis, values in expected.items() if values}
    name, missing = unrun_values(table, "python -m bench -m experiment=fair_heads_gpu")
    assert name == "fair_heads_gpu" and missing == expected
    readme = (RESULTS / "fair_heads_gpu" / "README.md").read_text(encoding="utf-8")
    if expected:
        assert "**Not run yet**: the preset conf/experiment/fair_heads_gpu.yaml" in readme
    else:
        assert "Not run yet" not in readme
