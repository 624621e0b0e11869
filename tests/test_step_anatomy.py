"""What a training step asks of the host (#22 item 3): the step profiler and its host reads.

``benchmarks/step_anatomy.py`` counts, under ``torch.profiler``, the operators each optimizer
step dispatches; these tests check its counts on loops whose operators are known, on a real
headbench cell, and that headbench's own step code reads nothing back from a GPU.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode

from bench.run.timing import TrainLoopTimer
from bench.run.train import run
from benchmarks.step_anatomy import (
    STEP_SIDES,
    Event,
    StepWindow,
    batches_pinned,
    recorded_pinned,
    sides_to_measure,
    steps_table,
    summarise,
)


def _loop(steps: int, window: StepWindow) -> None:
    torch.manual_seed(0)
    w = torch.randn(8, 4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    with window.watching():
        for _ in range(steps):
            loss = (torch.randn(16, 8) @ w).relu().sum()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)


def test_a_window_counts_each_steps_operators_once():
    window = StepWindow(wait=3, active=4)
    _loop(12, window)
    record = window.record()
    assert record["steps_seen"] == 12
    assert record["step_ms"] > 0
    s = record["summary"]
    calls = s["calls"]
    # one step: randn, matmul, relu, sum forward; ones_like (the seed gradient) and each
    # backward node's operator; SGD's update; all once per step whatever the window's length
    for name in ("aten::randn", "aten::matmul", "aten::relu", "aten::sum", "aten::ones_like"):
        assert calls[name] == 1.0, name
    assert calls["aten::threshold_backward"] == 1.0
    assert s["ops"] == pytest.approx(sum(calls.values()))
    assert s["kernels"] == 0 and s["syncs"] == 0 and s["launches"] == 0  # a CPU
    assert 0 < s["op_ms"] <= s["profiled_step_ms"] * 1.5  # operators' time within the step's
    ms = [row[2] for row in s["top"]]
    assert ms == sorted(ms, reverse=True)  # the operators with the most host time first


def test_a_window_longer_than_training_records_no_summary():
    window = StepWindow(wait=3, active=20)
    _loop(10, window)
    assert window.record()["summary"] is None
    _loop(1, StepWindow(wait=2, active=1))  # the hook is gone: a new window starts afresh


def test_window_bounds_are_checked():
    with pytest.raises(ValueError, match="wait must be >= 2"):
        StepWindow(wait=1, active=5)


def test_summarise_classifies_device_runtime_and_nested_events():
    events = [
        Event("aten::linear", False, None, 30.0, 0.0),
        Event("aten::addmm", False, "aten::linear", 20.0, 0.0),  # nested: not counted
        Event("aten::view", False, "MulBackward0", 1.0, 0.0),  # from autograd: counted
        Event("cudaLaunchKernel", False, "aten::addmm", 4.0, 0.0),
        Event("cudaStreamSynchronize", False, "aten::item", 50.0, 0.0),
        Event("cudaMemcpyAsync", False, "aten::copy_", 5.0, 0.0),
        Event("sm90_gemm", True, None, 0.0, 12.0),
    ]
    s = summarise(events * 2, steps=2)
    assert s["ops"] == 2 and s["view_ops"] == 1
    assert s["op_ms"] == pytest.approx(0.031)
    assert (s["kernels"], s["kernel_ms"]) == (1, pytest.approx(0.012))
    assert (s["launches"], s["syncs"], s["memcpy"]) == (1, 1, 1)
    assert s["sync_sources"] == {"cudaStreamSynchronize in aten::item": 1}
    assert s["runtime_calls"] == {
        "cudaLaunchKernel": 1,
        "cudaMemcpyAsync": 1,
        "cudaStreamSynchronize": 1,
    }


def _tiny_cell(compose_cfg, data_dir: Path, tmp_path: Path, *overrides: str):
    return compose_cfg(
        "encoder=tiny_bert",
        "task=sst2",
        "head=linear",
        "freeze=full",
        "seed=1",
        "selection=dev",
        f"data.dir={data_dir}",
        "data.train_size=320",
        "data.max_length=32",
        "data.batch_size=16",
        "trainer.max_epochs=1",
        "optim.fused=true",
        f"cache.dir={tmp_path / 'cache'}",
        *overrides,
    )


def test_a_headbench_cells_steps_are_profiled(compose_cfg, data_dir, tmp_path):
    window = StepWindow(wait=6, active=5)
    with window.watching():
        result = run(_tiny_cell(compose_cfg, data_dir, tmp_path), tmp_path / "run")
    assert result["status"] == "ok"
    record = window.record()
    assert record["steps_seen"] == 20  # 320 examples, batch 16
    calls = record["summary"]["calls"]
    assert calls["aten::_fused_adamw_"] >= 1  # optim.fused=true
    # every step's batch is counted once (its word-embedding lookup), evaluation is not
    assert sorted(window.tokens) == list(range(20))
    assert all(n % 16 == 0 and 16 <= n <= 16 * 32 for n in window.tokens.values())
    assert record["ms_per_1k_tokens"] > 0
    assert 0 < record["first_step_s"] < result["wall_time_s"]
    assert record["summary"]["padded_tokens"] == sum(window.tokens[i] for i in range(6, 11)) / 5
    assert calls["aten::embedding"] == 3  # words, positions, token types: one forward a step
    assert calls["aten::layer_norm"] == 9  # embeddings + 2 per layer of the 4


def test_a_timer_does_not_read_a_device_mask_every_batch():
    timer = TrainLoopTimer()
    mask = torch.ones(4, 6, dtype=torch.long, device="meta")  # reading it back would raise
    timer.count(mask)
    timer.count(mask)
    assert timer.counts["batches"] == 2 and timer.counts["examples"] == 8
    assert timer.counts["padded_tokens"] == 48 and timer.counts["tokens"] == 0  # not read yet
    cpu = TrainLoopTimer()
    cpu.count(torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert cpu.summary()["tokens"] == 3


class _Reads(TorchDispatchMode):
    """Record every read of a GPU tensor's value (what makes the host wait), with its stack."""

    def __init__(self) -> None:
        super().__init__()
        self.stacks: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        reads = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default)
        if func in reads and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            self.stacks.append("".join(traceback.format_stack(limit=25)))
        return func(*args, **(kwargs or {}))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_headbench_steps_read_nothing_back(compose_cfg, data_dir, tmp_path):
    """Steps 5-15 of a fine-tuning cell: no host read but the encoder's own.

    transformers' SDPA mask check (``masking_utils``: ``padding_mask.all()``) reads the mask
    once per forward, in both frameworks; headbench's loss check reads every 50 steps and
    Lightning's loggers every ``trainer.log_every_n_steps`` (here 50 too, as in perf.py).
    """
    spy, steps = _Reads(), [0]

    def hook(*_: object) -> None:
        steps[0] += 1
        if steps[0] == 5:
            spy.__enter__()
        elif steps[0] == 15:
            spy.__exit__(None, None, None)

    handle = register_optimizer_step_post_hook(hook)
    try:
        cfg = _tiny_cell(
            compose_cfg,
            data_dir,
            tmp_path,
            "trainer.accelerator=gpu",
            "trainer.log_every_n_steps=50",
        )
        assert run(cfg, tmp_path / "run")["status"] == "ok"
    finally:
        handle.remove()
    ours = [s for s in spy.stacks if "masking_utils.py" not in s]
    assert not ours, ours[0]


def test_the_table_shows_gpu_columns_and_why_a_side_has_no_window():
    gpu = summarise(
        [Event("aten::mm", False, None, 10.0, 0.0), Event("gemm", True, None, 0.0, 4.0)], 1
    )
    gpu.update(profiled_step_ms=2.0, padded_tokens=512.0)
    part = {
        "settings": {"encoder": "minilm", "task": "sst2", "batch_size": 32, "max_length": 128}
        | {"wait": 20, "active": 10},
        "sides": {
            "headbench": {
                "first_step_s": 12.34,
                "step_ms": 2.5,
                "ms_per_1k_tokens": 4.9,
                "summary": gpu,
            },
            "headbench_compile": {
                "step_ms": None,
                "summary": None,
                "status": "failed",
                "reason": "BackendCompilerFailed: no | compiler\nmore",
            },
            "hf_trainer": {"step_ms": 9.0, "summary": None, "status": "ok"},
        },
    }
    machine = {"device": {"kind": "cuda", "name": "NVIDIA H100"}, "cpus": 16, "torch": "2.11"}
    text = "\n".join(steps_table(part, machine))
    assert "NVIDIA H100" in text and "steps 21-30 under torch.profiler" in text
    assert "| kernels | GPU busy ms | launches | syncs | copies |" in text
    row = "| headbench | 12.3 | 2.50 (4.90) | 512 | 1 | 0 | 0.01 | 1 | 0.00 | 0 | 0.0 | 0.0 |"
    assert row in text
    assert "| headbench_compile | BackendCompilerFailed: no / compiler |" in text
    assert "| hf_trainer | training ended before the window closed |" in text
    assert "Where the host waited" not in text  # no sync in the window: no list
    # Saved before pinning existed: headbench's batches were pageable, the Trainer's pinned.
    pinned = "headbench no, headbench_compile no, hf_trainer yes."
    assert f"Batches in pinned host memory (bench/data/pinning.py): {pinned}" in text
    gpu.update(sync_sources={"cudaStreamSynchronize in aten::is_nonzero": 1.0})
    text = "\n".join(steps_table(part, machine))
    assert "- headbench: 1.0 cudaStreamSynchronize in aten::is_nonzero" in text


def test_pinning_is_what_the_device_gives_and_old_records_read_as_measured():
    on_gpu = torch.cuda.is_available()
    assert batches_pinned("headbench") is on_gpu
    assert batches_pinned("hf_trainer") is on_gpu
    # A record from before the field: headbench pageable; the Trainer pinned on a GPU only.
    assert not recorded_pinned({"framework": "headbench"}, on_gpu=True)
    assert not recorded_pinned({"framework": "headbench_graphs"}, on_gpu=True)
    assert recorded_pinned({"framework": "hf_trainer"}, on_gpu=True)
    assert not recorded_pinned({"framework": "hf_trainer"}, on_gpu=False)
    assert recorded_pinned({"framework": "headbench", "batches_pinned": True}, on_gpu=False)


def test_a_saved_side_is_measured_again_only_when_its_batches_were_pinned_otherwise():
    wanted = ["headbench", "hf_trainer", "headbench_graphs"]
    here = torch.cuda.is_available()
    current = {"framework": "headbench", "batches_pinned": here}
    stale = {"framework": "headbench", "batches_pinned": not here}
    saved = {"headbench": current, "hf_trainer": {"framework": "hf_trainer"}}
    assert sides_to_measure(saved, wanted, here) == ["headbench_graphs"]
    assert sides_to_measure({**saved, "headbench": stale}, wanted, here) == [
        "headbench",
        "headbench_graphs",
    ]
    assert sides_to_measure({}, wanted, here) == wanted
    assert {STEP_SIDES[s][0] for s in wanted} == {"headbench", "hf_trainer"}
