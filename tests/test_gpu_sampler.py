"""bench.run.gpu_sampler: parsing nvidia-smi, the summary, the sampling thread, perf's table.

Without a GPU the sampler must record why it sampled nothing. The thread itself is driven
by an executable standing in for ``nvidia-smi`` (no GPU here); the last test samples the
real one where CUDA is present.
"""

from __future__ import annotations

import shutil
import stat
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.run.gpu_sampler import GpuSampler, parse_sample, summarise
from benchmarks import perf


def test_parse_sample_reads_the_visible_gpus_line():
    text = "12, 1024\n87, 40000\n"
    assert parse_sample(text) == (12.0, 1024.0)
    assert parse_sample(text, index=1) == (87.0, 40000.0)
    assert parse_sample(text, index=2) is None  # no such GPU
    assert parse_sample("[N/A], 1024\n") is None
    assert parse_sample("12\n") is None
    assert parse_sample("") is None


def test_summarise_matches_numpy():
    rng = np.random.default_rng(0)
    util = rng.uniform(0, 100, size=41)
    mem = rng.uniform(0, 80_000, size=41)
    got = summarise(list(zip(util.tolist(), mem.tolist(), strict=True)), 0.5)
    assert got["samples"] == 41 and got["interval_s"] == 0.5
    assert got["util_mean"] == pytest.approx(float(np.mean(util)))
    assert got["util_median"] == pytest.approx(float(np.median(util)))
    assert got["util_max"] == pytest.approx(float(np.max(util)))
    assert got["memory_used_mib_max"] == pytest.approx(float(np.max(mem)))
    assert summarise([], 0.5) == {"samples": 0, "interval_s": 0.5}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_without_a_gpu_nothing_is_sampled_and_the_reason_is_recorded():
    with GpuSampler(interval_s=0.01) as sampler:
        time.sleep(0.05)
    assert sampler._thread is None
    assert sampler.summary() == {"unavailable": "no CUDA device"}


def test_without_nvidia_smi_the_reason_is_recorded(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    sampler = GpuSampler(index=0)
    with sampler:
        pass
    assert sampler.summary() == {"unavailable": "nvidia-smi not found on PATH"}


def _stand_in(tmp_path: Path, lines: list[str]) -> str:
    """An executable answering like nvidia-smi, one line per GPU, cycling through answers."""
    counter = tmp_path / "n"
    counter.write_text("0")
    script = tmp_path / "nvidia-smi"
    answers = "\n".join(lines)
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import pathlib\n"
        f"c = pathlib.Path({str(counter)!r}); n = int(c.read_text()); c.write_text(str(n + 1))\n"
        f"answers = {answers!r}.split('\\n')\n"
        "print(answers[n % len(answers)].replace(';', '\\n'))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_the_thread_samples_the_chosen_gpu_until_the_block_ends(tmp_path):
    command = _stand_in(tmp_path, ["5, 100;90, 7000", "[N/A], 100;30, 9000"])
    with GpuSampler(interval_s=0.02, command=command, index=1) as sampler:
        deadline = time.monotonic() + 20
        while len(sampler.samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
    n = len(sampler.samples)
    time.sleep(0.1)
    assert len(sampler.samples) == n, "sampling went on after the block"
    assert n >= 4
    got = sampler.summary()
    util = [u for u, _ in sampler.samples]
    assert set(util) <= {90.0, 30.0}
    assert got["source"] == "nvidia-smi"
    assert got["util_mean"] == pytest.approx(statistics.fmean(util))
    assert got["memory_used_mib_max"] == max(m for _, m in sampler.samples)
    assert got["failed_samples"] == 0  # GPU 0's [N/A] is not this GPU's line


def test_perf_gpu_table_lists_only_sampled_parts():
    cpu_state = {
        "grid": {"uncached": [{"gpu_utilisation": {"unavailable": "no CUDA device"}}]},
    }
    assert perf.gpu_table(cpu_state) == []
    sampled = {"util_mean": 40.0}
    state = {
        "grid": {"cached": [{"gpu_utilisation": sampled}, {"gpu_utilisation": {"util_mean": 60}}]},
        "finetune": {
            "runs": [
                {"framework": "headbench", "gpu_utilisation": {"util_mean": 20.0}},
                {"framework": "hf_trainer", "gpu_utilisation": {"util_mean": 10.0}},
                {"framework": "hf_trainer", "gpu_utilisation": {"util_mean": 30.0}},
            ]
        },
        "lockstep": {
            "ratio": 2.0,  # measured
            "gpu_utilisation": {"alone": {"unavailable": "x"}, "lockstep": sampled},
        },
    }
    text = "\n".join(perf.gpu_table(state))
    assert "| frozen grid, cached | 50% |" in text
    assert "| fine-tuning, hb | 20% |" in text
    assert "| fine-tuning, hf | 20% |" in text
    assert "| lock-step part, lockstep | 40% |" in text
    assert "uncached" not in text and "alone" not in text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU and nvidia-smi")
def test_the_real_nvidia_smi_sees_a_busy_gpu():
    x = torch.randn(4096, 4096, device="cuda")
    with GpuSampler(interval_s=0.1) as sampler:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            x = (x @ x).clamp_(-1, 1)
        torch.cuda.synchronize()
    got = sampler.summary()
    assert got["samples"] >= 5
    assert got["util_max"] > 50
