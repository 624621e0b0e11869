"""benchmarks/host_reads.py counts what would make a GPU's host wait, in a window of steps."""

from __future__ import annotations

import pytest
import torch

from benchmarks.host_reads import StepWindow, count


def _train(steps: int) -> None:
    """A tiny loop: each step reads its loss (one value), indexes by a mask (a data-dependent
    shape) and makes one tensor from Python data; the step before the window reads twice."""
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    for step in range(steps):
        x = torch.tensor([1.0, -2.0, 3.0])  # from Python data
        loss = (weight * x).sum()
        loss.backward()
        _ = x[x > 0]  # indexing by a boolean mask: its shape depends on the data
        _ = x[torch.tensor([0, 2])]  # by positions: not a read (but one more tensor from data)
        float(loss)  # a value read
        if step == 1:
            float(loss)  # outside the window (steps 3-4 are counted)
        optimizer.step()
        optimizer.zero_grad()


def test_a_window_counts_each_kind_per_step_with_its_caller() -> None:
    window = count(lambda: _train(6), wait=2, active=2)
    rows: dict[tuple[str, str], float] = {}
    for n, op, where in window.per_step():  # by operator and the innermost caller's file
        key = (op, where.split(" <- ")[0].split(":")[0])
        rows[key] = rows.get(key, 0.0) + n
    assert rows == {
        ("lift_fresh", "test_host_reads.py"): 2.0,
        ("index by a mask", "test_host_reads.py"): 1.0,
        ("_local_scalar_dense", "test_host_reads.py"): 1.0,
    }
    assert all("_train" in where for _, _, where in window.per_step())


def test_training_that_ends_inside_the_window_counts_nothing() -> None:
    window = count(lambda: _train(3), wait=2, active=5)
    assert not window.closed and window.per_step() == []
    assert torch._C._len_torch_dispatch_stack() == 0  # the mode was closed


def test_window_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="wait and active must be >= 1"):
        StepWindow(0, 3)
