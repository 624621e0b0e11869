"""runtime.malloc: glibc keeps large freed blocks, so a step's big gradient stops page-faulting."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from bench.errors import ConfigError
from bench.run.allocator import CHOICES, configure_malloc
from conftest import ROOT

GLIBC = platform.libc_ver()[0] == "glibc"

# Free and re-allocate a minilm-sized word-embedding gradient (30522 x 384 floats, 47 MB),
# as fine-tuning does every step, and count the page faults of the second 20 rounds.
PROBE = """
import json, resource, sys, torch
from bench.run.allocator import configure_malloc
record = configure_malloc(sys.argv[1])
def rounds():
    for _ in range(20):
        grad = torch.zeros(30522, 384)
        del grad
rounds()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20
print(json.dumps({"record": record, "faults_per_round": faults}))
"""


def _probe(mode: str, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="the tuning is glibc's mallopt")
def test_tuned_malloc_reuses_the_big_gradient_instead_of_faulting_it_in_again():
    default, tuned = _probe("default"), _probe("tuned")
    assert default["record"] == {
        "mode": "default",
        "applied": False,
        "reason": "runtime.malloc=default",
    }
    assert tuned["record"]["applied"] is True and tuned["record"]["mmap_max"] == 0
    # 47 MB = 11,446 pages: glibc mmaps and munmaps the block every round by default.
    assert default["faults_per_round"] > 10_000
    assert tuned["faults_per_round"] < 100


def test_a_preloaded_allocator_is_left_alone(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    record = configure_malloc("tuned")
    assert record["applied"] is False and "jemalloc is preloaded" in record["reason"]


@pytest.mark.parametrize("mode", ["fast", "", None, "Tuned"])
def test_an_unknown_mode_names_the_key_and_the_choices(mode):
    with pytest.raises(ConfigError) as err:
        configure_malloc(mode)  # type: ignore[arg-type]
    assert f"runtime.malloc={mode!r}" in str(err.value)
    assert all(choice in str(err.value) for choice in CHOICES)


def _fine_tune(tmp_path, malloc: str) -> dict:
    """A real minilm fine-tuning cell (its 47 MB embedding gradient is an mmap block by default)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    args = [
        "encoder=minilm",
        "head=linear",
        "freeze=full",
        "task=sst2",
        "seed=1",
        "data.train_size=64",
        "data.max_length=32",
        "trainer.max_epochs=1",
        "selection.size=256",  # two validation batches of 128
        "trainer.log_every_n_steps=1",
        f"runtime.malloc={malloc}",
        f"hydra.run.dir={tmp_path / malloc}",
        f"cache.dir={tmp_path / 'cache'}",
    ]
    subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return json.loads((tmp_path / malloc / "result.json").read_text())


@pytest.mark.slow  # two full trainings compared number by number
@pytest.mark.skipif(not GLIBC, reason="the tuning is glibc's mallopt")
def test_the_setting_changes_no_number(tmp_path):
    default, tuned = _fine_tune(tmp_path, "default"), _fine_tune(tmp_path, "tuned")
    assert default["status"] == tuned["status"] == "ok"
    assert tuned["runtime"]["malloc"]["applied"] and not default["runtime"]["malloc"]["applied"]
    assert tuned["config_hash"] == default["config_hash"]  # not hashed: same cell
    # Bit for bit: every logged training loss and the dev metrics.
    steps = [
        (tmp_path / m / "logs" / "metrics.csv").read_text().splitlines()
        for m in ("default", "tuned")
    ]
    assert len(steps[0]) > 2 and steps[0] == steps[1]
    assert tuned["history"] == default["history"] and tuned["best"] == default["best"]
