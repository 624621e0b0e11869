"""Hydra launchers: one tiny sweep under the basic, joblib and submitit_local launchers.

Each launcher runs the same 4 cells (frozen and full × seeds 1, 2) in real processes with
its own runs, results and cache directories; the end-of-sweep callback collects each.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.cache.store import BUILD_LOG
from bench.results.collect import read_history, read_table
from bench.run.cli import LAUNCHER_PLUGINS, missing_launcher, plugin_installed
from conftest import ROOT

PLUGINS = ("hydra_plugins.hydra_joblib_launcher", "hydra_plugins.hydra_submitit_launcher")
needs_plugins = pytest.mark.skipif(
    not all(plugin_installed(m) for m in PLUGINS),
    reason="pip install 'headbench[joblib,slurm]' (nox -s tests does)",
)

SWEEP = (
    "-m",
    "task=sst2",
    "encoder=tiny_bert",
    "head=linear",
    "freeze=frozen,full",
    "seed=1,2",
    "data.train_size=32",
    "selection.size=32",  # the held-out slice: 500 by default, slow on two cores
    "data.max_length=32",
    "data.batch_size=16",
    "trainer.max_epochs=1",
    "report_file=null",
)
LAUNCHERS = {
    "basic": (),
    "joblib": ("hydra/launcher=joblib", "hydra.launcher.n_jobs=2"),
    "submitit_local": ("hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"),
}
# `ray` joins when its plugin is installed (nox -s tests does not install it: heavy). Ray
# replaces logging's record factory in its workers; the tiny models' tokenizer corpus is read
# from source files, so that no longer changes them (test_tiny_corpus_ignores_runtime_patches).
if plugin_installed("hydra_plugins.hydra_ray_launcher"):
    LAUNCHERS["ray"] = ("hydra/launcher=ray", "hydra.launcher.ray.init.num_cpus=2")
CELL_KEYS = ["task", "encoder", "head_label", "freeze_label", "seed"]


@pytest.fixture(scope="module")
def sweeps(data_dir, tmp_path_factory) -> dict[str, Path]:
    """Run the sweep once per launcher, the three at once; return their base directories."""
    root = tmp_path_factory.mktemp("launchers")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # 4 processes share the cores
    procs = {}
    for name, launcher in LAUNCHERS.items():
        base = root / name
        log = (root / f"{name}.log").open("w")
        procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench",
                *SWEEP,
                *launcher,
                f"runs_dir={base}/runs",
                f"results_dir={base}/results",
                f"cache.dir={base}/cache",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    for name, proc in procs.items():
        code = proc.wait(timeout=900)
        assert code == 0, f"{name}: {(root / f'{name}.log').read_text()[-3000:]}"
    return {name: root / name for name in LAUNCHERS}


def _scores(results: Path) -> pd.DataFrame:
    table = read_table(results)  # written by the end-of-sweep callback, whichever launcher
    keys = [*CELL_KEYS, "split", "metric"]
    return table[[*keys, "status", "value"]].sort_values(keys).reset_index(drop=True)


def _history(results: Path) -> pd.DataFrame:
    keys = [*CELL_KEYS, "epoch", "split", "metric"]
    history = read_history(results)[[*keys, "value", "train_loss"]]
    return history.sort_values(keys).reset_index(drop=True)


@pytest.mark.slow  # a sweep per launcher: about 2 minutes on two cores
@needs_plugins
def test_every_launcher_collects_the_same_table(sweeps):
    basic = _scores(sweeps["basic"] / "results")
    assert len(basic) == 4 and set(basic["status"]) == {"ok"}
    assert sorted(zip(basic["freeze_label"], basic["seed"], strict=True)) == [
        ("frozen", 1),
        ("frozen", 2),
        ("full", 1),
        ("full", 2),
    ]
    for name in (n for n in LAUNCHERS if n != "basic"):  # ray too, where it is installed
        other = sweeps[name] / "results"
        pd.testing.assert_frame_equal(_scores(other), basic, rtol=1e-6, obj=name)
        # per-epoch dev metrics and training loss too: the same training, not just the same score
        pd.testing.assert_frame_equal(
            _history(other), _history(sweeps["basic"] / "results"), rtol=1e-5, obj=name
        )


def _cache_record(runs: Path, seed: int) -> dict:
    result = runs / f"sst2/tiny_bert/linear/frozen/seed={seed}/result.json"
    return json.loads(result.read_text())["cache"]


@pytest.mark.slow  # shares the sweeps above
@needs_plugins
def test_two_concurrent_jobs_needing_one_cache_entry_run_the_encoder_once(sweeps):
    """joblib (n_jobs=2) starts both frozen cells at once; they need the same states."""
    runs, cache = sweeps["joblib"] / "runs", sweeps["joblib"] / "cache" / "features"
    records = [_cache_record(runs, seed) for seed in (1, 2)]
    # The lock is per split: which job encodes which split depends on scheduling (one job
    # may encode train while the other, arriving at dev first, encodes dev), but every
    # split is encoded by exactly one job and read from the cache by the other.
    for split in ("train", "select", "dev"):
        assert sorted(split in r["misses"] for r in records) == [False, True], split
        assert sorted(split in r["hits"] for r in records) == [False, True], split
    builds = [json.loads(line) for line in (cache / BUILD_LOG).read_text().splitlines()]
    assert sorted(b["split"] for b in builds) == ["dev", "select", "train"]  # one pass per split
    stored = sum(len(b["layers"]) for b in builds)  # one file per layer the passes stored
    assert stored >= 2 and len(list(cache.rglob("*.safetensors"))) == stored


def test_every_launcher_preset_has_a_plugin_entry_and_composes(compose_cfg):
    presets = sorted(p.stem for p in (ROOT / "conf" / "hydra" / "launcher").glob("*.yaml"))
    assert (
        presets
        == sorted(LAUNCHER_PLUGINS)
        == ["gpu_pack", "joblib", "ray", "submitit_local", "submitit_slurm"]
    )
    cfg = compose_cfg(
        "seed=1",
        "hydra/launcher=submitit_slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.gpus_per_task=2",
    )
    assert cfg.seed == 1  # the launcher knobs are Hydra's; composing them must not fail


def test_plugin_installed_is_false_when_even_the_parent_package_is_missing():
    with pytest.raises(ModuleNotFoundError):  # what the check used to call, unguarded
        importlib.util.find_spec("no_such_package_hb.plugin")
    assert plugin_installed("no_such_package_hb.plugin") is False
    assert plugin_installed("hydra_plugins.headbench_sweeper") is True  # headbench's own


def test_a_launcher_without_its_plugin_names_the_extra_to_install(tmp_path):
    installed = plugin_installed("hydra_plugins.hydra_ray_launcher")
    message = missing_launcher(["-m", "seed=1", "hydra/launcher=ray"])
    assert (message is None) == installed
    assert missing_launcher(["-m", "seed=1", "hydra/launcher=basic"]) is None
    if installed:
        pytest.skip("the ray plugin is installed here")
    assert "pip install 'headbench[ray]'" in message
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "-m",
            "seed=1",
            "hydra/launcher=ray",
            f"runs_dir={tmp_path}/runs",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.strip() == message
    assert not (tmp_path / "runs").exists()


def test_tiny_corpus_ignores_runtime_patches():
    """Replacing a stdlib attribute at runtime (as Ray does in its workers) leaves the tiny
    models' corpus, and so the tiny models, unchanged."""
    import logging

    from bench.model.tiny import corpus_lines

    before = corpus_lines()
    factory = logging.getLogRecordFactory()

    def patched(*args, **kwargs):
        """A replacement record factory with a docstring of its own."""
        return factory(*args, **kwargs)

    logging.setLogRecordFactory(patched)
    try:
        assert corpus_lines.__wrapped__() == before  # read again, not the process's copy
        assert corpus_lines() is before
    finally:
        logging.setLogRecordFactory(factory)
    assert len(before) > 1000 and len(set(before)) > 1000
