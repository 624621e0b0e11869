"""A cell's time: the training loop's, and where its whole wall time goes.

:class:`TrainLoopTimer` times the training epochs without their validation and counts what
they processed (for throughput and FLOP/s); :func:`phase` times the phases of a cell.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
from torch import Tensor

#: The phases of a cell's wall time a result records under ``phases_s`` (seconds each):
#: the data module (tokenizer, reading and tokenizing the splits), the model (the encoder
#: loaded, the head built), the frozen features (the cache read and checked, or built),
#: the Lightning ``Trainer`` built, training (epochs, selection and reporting passes; in a
#: lock-step group the cell's share), and the conclusion (scores chosen, predictions written).
PHASES = ("data", "model", "features", "trainer", "fit", "conclude")


@contextmanager
def phase(result: dict[str, Any], name: str) -> Iterator[None]:
    """Add the seconds the block takes to ``result["phases_s"][name]`` (also when it raises).

    Args:
        result: The cell's result being built.
        name: One of :data:`PHASES`.
    """
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}; valid: {', '.join(PHASES)}")
    started = time.perf_counter()
    try:
        yield
    finally:
        phases = result.setdefault("phases_s", {})
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - started


#: What :func:`count_batch` adds up over training batches.
BATCH_COUNTS = ("batches", "examples", "tokens", "padded_tokens", "padded_tokens_sq")
_SPANS = ("seconds", "cpu_seconds", "minor_faults", "first_batch_s", "first_batch_examples")


def minor_faults() -> int:
    """The process's minor page faults so far (pages the kernel mapped in and zeroed)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def count_batch(counts: dict[str, int], attention_mask: Tensor) -> Tensor | None:
    """Add one padded batch to ``counts`` (keys :data:`BATCH_COUNTS`).

    The real tokens of a mask on the CPU are added at once. Those of a mask on a GPU are not
    read back here (reading a value waits for every queued kernel: a sync every batch);
    their count is returned, still on the device, for the caller to add up and read once.

    Args:
        counts: Running totals, updated in place.
        attention_mask: The batch's (B, T) mask: examples B, real tokens ``sum(mask)``,
            padded tokens ``B * T`` and ``B * T**2`` (what attention costs).

    Returns:
        None, or the real tokens of a mask that is not on the CPU (a 0-d tensor there).
    """
    b, t = attention_mask.shape
    counts["batches"] += 1
    counts["examples"] += b
    counts["padded_tokens"] += b * t
    counts["padded_tokens_sq"] += b * t * t
    tokens = attention_mask.sum()
    if tokens.device.type != "cpu":
        return tokens
    counts["tokens"] += int(tokens)
    return None


class TrainLoopTimer(L.Callback):
    """Time the training epochs without their validation, and count what they processed.

    Counts examples, real tokens (attention mask), padded tokens ``sum(B * T)`` and
    ``sum(B * T**2)`` (what attention costs), so FLOPs follow from the model shape.
    Besides wall time it records the process's CPU time over the same spans
    (``time.process_time``: user + system, all threads), which time spent waiting for a
    core on a shared machine does not inflate, and the minor page faults (memory the C
    allocator returned to the kernel and took back: see :mod:`bench.run.allocator`).

    It also records how long the first training batch took the host (``first_batch_s``,
    from the first epoch's start to that batch's end), which for a compiled encoder
    (``trainer.compile``) includes compiling it, and the throughput of the batches after
    it, so that a compiled cell's one-time cost and its running speed read apart.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.minor_faults = 0
        self.first_batch_s: float | None = None
        self.first_batch_examples = 0
        self.counts = dict.fromkeys(BATCH_COUNTS, 0)
        self._since: tuple[float, float, int] | None = None  # (wall, cpu, faults) at start
        self._device_tokens: Tensor | None = None  # real tokens on a GPU, not yet read

    def count(self, attention_mask: Tensor) -> None:
        """Count one training batch (:func:`count_batch`) without waiting for its device.

        Args:
            attention_mask: The batch's (B, T) mask, wherever the batch is.
        """
        tokens = count_batch(self.counts, attention_mask)
        if tokens is not None:
            pending = self._device_tokens
            self._device_tokens = tokens if pending is None else pending + tokens

    def _read_tokens(self) -> None:
        """Add the real tokens still on a device to :attr:`counts` (one read)."""
        if self._device_tokens is not None:
            self.counts["tokens"] += int(self._device_tokens)
            self._device_tokens = None

    def start(self) -> None:
        """Start (or resume) timing; what :meth:`stop` adds up (also used without a Trainer)."""
        self._since = (time.perf_counter(), time.process_time(), minor_faults())

    def stop(self) -> None:
        """Stop timing and add the span since :meth:`start` to the totals."""
        if self._since is not None:
            wall, cpu, faults = self._since
            self.seconds += time.perf_counter() - wall
            self.cpu_seconds += time.process_time() - cpu
            self.minor_faults += minor_faults() - faults
            self._since = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Start timing the epoch."""
        self.start()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Pause while validating."""
        self.stop()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Resume if validation ran inside a training epoch."""
        if trainer.training:
            self.start()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Stop timing the epoch."""
        self.stop()

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """Count the batch's examples and tokens; time the first batch."""
        self.count(batch["attention_mask"])
        if self.first_batch_s is None and self._since is not None:
            self.first_batch_s = self.seconds + time.perf_counter() - self._since[0]
            self.first_batch_examples = self.counts["examples"]

    def state_dict(self) -> dict[str, Any]:
        """The totals so far (``ddp_spawn`` sends rank 0's back to the launching process)."""
        self._read_tokens()
        return {**{k: getattr(self, k) for k in _SPANS}, **self.counts}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Adopt totals from :meth:`state_dict`."""
        for key in _SPANS:
            if key in state_dict:  # checkpoints from before a total was added lack it
                setattr(self, key, state_dict[key])
        self.counts.update({k: state_dict[k] for k in BATCH_COUNTS if k in state_dict})

    def summary(self) -> dict[str, float | int | None]:
        """Seconds (wall and CPU), page faults, counts and examples/s of the training loop.

        ``first_batch_s`` and ``examples_per_s_after_first`` are None when no batch was
        timed through the Trainer's hooks (a lock-step group times its loop itself).
        """
        self._read_tokens()
        after = None
        if self.first_batch_s is not None and self.seconds > self.first_batch_s:
            rest = self.counts["examples"] - self.first_batch_examples
            after = rest / (self.seconds - self.first_batch_s)
        return {
            "train_loop_s": self.seconds,
            "train_loop_cpu_s": self.cpu_seconds,
            "train_loop_minor_faults": self.minor_faults,
            **self.counts,
            "examples_per_s": self.counts["examples"] / self.seconds if self.seconds else None,
            "first_batch_s": self.first_batch_s,
            "examples_per_s_after_first": after,
        }
