"""Packed fine-tuning: the memory estimate and the refusal to over-pack (bench/run/packing.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from bench.errors import ConfigError
from bench.model.module import HeadbenchModule
from bench.run import loky_worker
from bench.run.cli import plugin_installed
from bench.run.packing import (
    PROCESS_OVERHEAD_BYTES,
    MemoryEstimate,
    activation_bytes,
    check_pack,
    estimate_cell,
)
from conftest import ROOT


@pytest.mark.parametrize("freeze", ["full", "frozen", "bitfit", "top_k", "lora", "embeddings"])
@pytest.mark.parametrize("encoder", ["tiny_bert", "minilm"])
def test_parameter_counts_are_the_modules_own(compose_cfg, encoder, freeze):
    if freeze == "lora":
        pytest.importorskip("peft", reason="freeze=lora needs the 'lora' extra")
    cfg = compose_cfg(f"encoder={encoder}", "head=pooler", f"freeze={freeze}", "seed=1")
    plain = OmegaConf.to_container(cfg, resolve=True)
    module = HeadbenchModule(
        encoder=plain["encoder"],
        head=plain["head"],
        freeze=plain["freeze"],
        task="sst2",
        optim=plain["optim"],
    )
    counts = module.parameter_counts()
    estimate = estimate_cell(cfg)
    assert (estimate.parameters, estimate.trainable) == (counts["total"], counts["trainable"])
    assert estimate.weights == 4 * counts["total"]
    assert estimate.gradients + estimate.optimizer == 12 * counts["trainable"]
    assert (estimate.activations == 0) == (freeze == "frozen")


def test_activations_follow_the_formula():
    # 2 layers, S=128, B=32, H=384, A=12, 16-bit: 2 * S*B*H*(34 + 5*A*S/H) bytes
    expected = 2 * 128 * 32 * 384 * (34 + 5 * 12 * 128 / 384)
    assert activation_bytes(2, 128, 32, 384, 12, 2) == expected
    assert activation_bytes(2, 128, 32, 384, 12, 4) == 2 * expected


def _estimate(total_gib: float) -> MemoryEstimate:
    rest = int(total_gib * (1 << 30)) - PROCESS_OVERHEAD_BYTES
    return MemoryEstimate(1, 1, 1, 0, 0, 0, rest, PROCESS_OVERHEAD_BYTES)


def test_over_packing_is_refused_with_the_count_that_fits():
    cells = {"a/seed=1": _estimate(2.0), "b/seed=1": _estimate(9.0)}
    assert check_pack(8, cells, 80 << 30) == 8  # 0.9 * 80 / 9 = 8
    with pytest.raises(ConfigError, match=r"b/seed=1.*at most 8 fit.*cells_per_gpu=8"):
        check_pack(9, cells, 80 << 30)
    with pytest.raises(ConfigError, match="not even one fits"):
        check_pack(1, cells, 8 << 30)
    with pytest.raises(ConfigError, match="positive integer"):
        check_pack("auto", cells, 80 << 30)


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "bench", "-m", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(cwd),
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
        },
    )


SWEEP = (
    "task=sst2",
    "encoder=tiny_bert",
    "head=linear,mean_linear",
    "freeze=full",
    "seed=1",
    "data.train_size=64",
    "selection.size=32",
    "trainer.max_epochs=1",
    "data.max_length=32",
    "report_file=null",
    "hydra/launcher=gpu_pack",
)


def test_a_launch_that_would_over_pack_trains_nothing(tmp_path):
    if not plugin_installed("hydra_plugins.hydra_joblib_launcher"):
        pytest.skip("hydra/launcher=gpu_pack needs the 'joblib' extra")
    proc = _cli(
        *SWEEP,
        f"runs_dir={tmp_path}/runs",
        "runtime.cells_per_gpu=2",
        "runtime.gpu_memory_gb=1.5",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "would over-pack the GPU" in proc.stderr and "use runtime.cells_per_gpu=1" in proc.stderr
    assert not list(tmp_path.glob("runs/**/result.json"))


@pytest.mark.slow
def test_a_packed_sweep_trains_its_cells_and_records_the_estimate(tmp_path):
    if not plugin_installed("hydra_plugins.hydra_joblib_launcher"):
        pytest.skip("hydra/launcher=gpu_pack needs the 'joblib' extra")
    proc = _cli(
        *SWEEP,
        f"runs_dir={tmp_path}/runs",
        "runtime.cells_per_gpu=2",
        "runtime.gpu_memory_gb=8",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in tmp_path.glob("runs/**/result.json")]
    assert sorted(r["cell"]["head"] for r in results) == ["linear", "mean_linear"]
    host = loky_worker.host_memory_bytes()
    assert host is not None
    allowance = loky_worker.growth_allowance(2, host, int(3e8)) >> 20  # n_jobs = cells_per_gpu
    for r in results:
        assert r["status"] == "ok", r.get("reason")
        assert r["memory_estimate"]["trainable"] == r["params"]["trainable"]
        # each ran in a loky worker that loky no longer replaces after 300 MB of growth
        assert r["runtime"]["loky_worker"] == {
            "restart_after_mb": allowance,
            "loky_default_mb": 286,
        }
