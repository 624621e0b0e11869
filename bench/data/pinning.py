"""Whether a loader pins its batches: when the trainer that reads them runs on a CUDA device.

A batch collated on the host reaches a GPU by one copy per tensor (Lightning moves it with
``non_blocking=True``). From ordinary (pageable) host memory such a copy is not
asynchronous: CUDA first waits for the stream to drain, then stages the data, so the host
waits for the GPU once per tensor of every batch. A sequence batch holds five tensors
(``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels``, ``idx``), and
``benchmarks/perf.py --parts steps`` counted 6.2 syncs and 9 copies a step for eager
headbench on an H100, with the HF ``Trainer`` (which pins by default,
``dataloader_pin_memory``) faster on that host. That these copies are most of those syncs is
inferred, not yet measured: the part's ``sync_sources`` name the calls on the next GPU run.
From pinned (page-locked) memory the copy is queued like a kernel, and the host goes on.

Pinning changes no number a cell computes, only when the host waits, so it is not a config
key (and not hashed): it follows the device.
"""

from __future__ import annotations

from typing import Any

import torch


def pins_batches(device: torch.device | None) -> bool:
    """Whether batches bound for ``device`` are collated into pinned memory.

    Args:
        device: Where the batches go (the trainer's root device), or None when no trainer
            reads them (a loader built on its own).

    Returns:
        True for a CUDA device, else False (a CPU reads host memory as it is).
    """
    return device is not None and device.type == "cuda"


def trainer_device(module: Any) -> torch.device | None:
    """The root device of the trainer a ``LightningDataModule`` is attached to, if any.

    Args:
        module: A ``LightningDataModule``.

    Returns:
        ``trainer.strategy.root_device``, or None before the module is attached to a trainer.
    """
    trainer = getattr(module, "trainer", None)
    return None if trainer is None else trainer.strategy.root_device
