"""Issue 20 case 12: one data-location rule, and an offline error that says where it looked.

The rule (bench/data/location.py): ``data.dir`` → ``$HEADBENCH_DATA`` → ``../shared/data``
beside the checkout → the Hub. Before, ``python -m bench`` outside nox ignored
``../shared/data`` and failed offline with the ``datasets`` library's own error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.data import location
from bench.data.location import checkout_data_dir, default_data_dir, load_from_hub
from bench.errors import DataError
from conftest import ROOT

CELL = (
    "task=sst2",
    "encoder=tiny_bert",
    "head=linear",
    "freeze=frozen",
    "seed=1",
    "data.train_size=48",
    "data.max_length=32",
    "trainer.max_epochs=1",
)


def _bench(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m bench`` run from another directory (as a user's shell would)."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *CELL, *args, f"hydra.run.dir={tmp_path}/run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != location.ENV_VAR}
    return {
        **env,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        **extra,
    }


def test_the_rule_order(monkeypatch, tmp_path):
    monkeypatch.setenv(location.ENV_VAR, str(tmp_path))
    assert default_data_dir() == str(tmp_path)  # the variable first, even if it is empty
    monkeypatch.delenv(location.ENV_VAR)
    shared = checkout_data_dir()
    assert shared == ROOT.parent / "shared" / "data"
    assert default_data_dir() == (str(shared) if shared.is_dir() else None)
    checkout = tmp_path / "elsewhere" / "checkout"
    checkout.mkdir(parents=True)
    monkeypatch.setattr(location, "CHECKOUT", checkout)
    assert default_data_dir() is None  # not a checkout (an installed wheel): the Hub
    (checkout / "pyproject.toml").write_text("[project]\n")
    assert default_data_dir() is None  # a checkout, no folder beside it: the Hub
    (tmp_path / "elsewhere" / "shared" / "data").mkdir(parents=True)
    assert default_data_dir() == str(tmp_path / "elsewhere" / "shared" / "data")


def test_a_cli_run_outside_nox_finds_the_data_beside_the_checkout(data_dir, tmp_path):
    if checkout_data_dir() != data_dir:
        pytest.skip(f"the test data is not the checkout's ../shared/data ({data_dir})")
    proc = _bench(tmp_path, env=_offline_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "ok" and result["config"]["data"]["dir"] == str(data_dir)


def test_offline_without_local_data_says_where_it_looked(monkeypatch, tmp_path):
    monkeypatch.delenv(location.ENV_VAR, raising=False)
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / "pyproject.toml").write_text("[project]\n")
    monkeypatch.setattr(location, "CHECKOUT", tmp_path / "checkout")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as err:
        load_from_hub(lambda: pytest.fail("the Hub was called while offline"), "glue sst2")
    assert str(err.value) == (
        "no local data for glue sst2 and the Hugging Face Hub is off (HF_HUB_OFFLINE is set); "
        f"looked at data.dir: not set; HEADBENCH_DATA: not set; {tmp_path}/shared/data: does "
        "not exist. Set data.dir=<dir> or HEADBENCH_DATA=<dir> to a folder holding "
        "glue/<TASK>/*.tsv and conll2003/*.txt"
    )

    monkeypatch.delenv("HF_HUB_OFFLINE")

    def unreachable() -> None:  # what datasets raises without a network
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (LocalEntryNotFoundError)")

    with pytest.raises(DataError, match=r"the Hub could not be reached \(ConnectionError\)"):
        load_from_hub(unreachable, "glue sst2")


def test_a_cli_run_with_data_dir_null_offline_is_one_clear_reason(data_dir, tmp_path):
    proc = _bench(tmp_path, "data.dir=null", env=_offline_env())
    assert proc.returncode == 1
    reason = [line for line in proc.stderr.splitlines() if line.startswith("reason: ")]
    assert reason and "DataError: data.dir=null asks for the Hub" in reason[0], proc.stderr[-3000:]
    assert "HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set" in reason[0]
