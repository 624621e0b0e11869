"""An epoch's running training loss, kept on the loss's device: no host sync per step.

Reading a CUDA tensor's value (``float(loss)``, ``if not torch.isfinite(loss)``) makes the
host wait for the GPU to finish every queued kernel, so the host cannot prepare the next
batch while the GPU works on this one. :class:`RunningLoss` sums the batch losses and
notes the first non-finite one (its step and value) with tensor operations only; the
values are read when asked for (:meth:`RunningLoss.check`, :meth:`RunningLoss.totals`).

The sum is the one the module kept in Python before, to the bit: each batch's float32
mean loss times its size, added in float64 (float32 where the device has no float64).
"""

from __future__ import annotations

import torch
from torch import Tensor

from bench.errors import DivergedError


class RunningLoss:
    """Sum and count of an epoch's training losses, and its first non-finite loss."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Start a new epoch: nothing summed, nothing non-finite seen."""
        self.count = 0
        self._sum: Tensor | float = 0.0
        self._bad_step: Tensor | None = None  # -1 while every loss was finite
        self._bad_loss: Tensor | None = None

    def add(self, loss: Tensor | float, size: int, step: int = 0) -> None:
        """Add a batch's mean loss; a tensor stays on its device and is watched for NaN/inf.

        Args:
            loss: The batch's mean loss (a scalar tensor, or a value already read).
            size: The batch's number of examples.
            step: The global step of the batch (recorded if its loss is the first
                non-finite one).
        """
        if not isinstance(loss, Tensor):
            self._sum = self._sum + loss * size
            self.count += size
            return
        loss = loss.detach()
        if self._bad_step is None:
            self._bad_step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self._bad_loss = torch.zeros((), dtype=loss.dtype, device=loss.device)
        assert self._bad_loss is not None
        first = ~torch.isfinite(loss) & (self._bad_step < 0)
        self._bad_step = torch.where(first, step, self._bad_step)
        self._bad_loss = torch.where(first, loss, self._bad_loss)
        wide = torch.float32 if loss.device.type == "mps" else torch.float64
        self._sum = loss.to(wide) * size + self._sum
        self.count += size

    def check(self) -> None:
        """Raise if a loss added since the epoch started was not finite (one host sync).

        Raises:
            DivergedError: Naming the global step and value of the first non-finite loss.
        """
        if self._bad_step is None:
            return
        step = int(self._bad_step)
        if step >= 0:
            assert self._bad_loss is not None
            raise DivergedError(step, float(self._bad_loss))

    def totals(self) -> list[float]:
        """The sum of size-weighted losses and the number of examples (one host sync)."""
        return [float(self._sum), self.count]
