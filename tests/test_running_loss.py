"""bench/model/running_loss.py: the epoch's training loss kept on the device.

The sum must be the one the module kept in Python before (float32 losses times batch sizes,
added in float64), to the bit: checked against NumPy's sequential float64 sum. The first
non-finite loss is found without reading any value until asked.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bench.errors import DivergedError
from bench.model.running_loss import RunningLoss


def test_the_sum_is_python_float64_summation_to_the_bit() -> None:
    rng = np.random.default_rng(0)
    losses = rng.lognormal(0.0, 1.0, 200).astype(np.float32)
    sizes = rng.integers(1, 33, 200)
    running = RunningLoss()
    expected = np.float64(0.0)
    for loss, size in zip(losses, sizes, strict=True):
        running.add(torch.tensor(loss), int(size), step=0)
        expected = np.float64(loss) * np.float64(size) + expected  # sequential, in float64
    total, count = running.totals()
    assert total == float(expected)  # exact, not approximate
    assert count == int(sizes.sum())
    running.check()  # every loss finite: nothing raised


def test_values_already_read_and_tensors_add_into_one_sum() -> None:
    running = RunningLoss()
    running.add(0.5, 4)
    running.add(torch.tensor(0.25), 8, step=3)
    assert running.totals() == [4.0, 12]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_first_non_finite_loss_is_reported_with_its_step(bad: float) -> None:
    running = RunningLoss()
    steps = {0: 1.0, 1: 0.9, 2: bad, 3: math.nan, 4: 0.7}
    for step, value in steps.items():
        running.add(torch.tensor(value, dtype=torch.float32), 16, step)
    with pytest.raises(DivergedError) as raised:
        running.check()
    assert raised.value.step == 2
    assert str(raised.value.loss) == str(bad)  # the first one, not the later NaN
    assert str(raised.value) == f"non-finite training loss {bad} at global step 2"


def test_reset_forgets_the_epoch() -> None:
    running = RunningLoss()
    running.add(torch.tensor(math.nan), 2, step=5)
    running.reset()
    assert running.totals() == [0.0, 0]
    running.check()
    running.add(torch.tensor(1.0), 2, step=6)
    assert running.totals() == [2.0, 2]
