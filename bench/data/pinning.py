"""Whether a loader pins its batches: when the trainer that reads them runs on a CUDA device.

A batch collated on the host reaches a GPU by one copy per tensor (Lightning moves it with
``non_blocking=True``). From ordinary (pageable) host memory such a copy cannot be a DMA of
its own: the driver stages it through a pinned buffer and, as CUDA's API documentation puts
it, "might be synchronous with respect to host" (``cudaMemcpyAsync``). From pinned
(page-locked) memory the copy is queued like a kernel, and the host goes on. A sequence batch
holds five tensors (``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels``,
``idx``); ``benchmarks/perf.py --parts steps`` counted 9 copies a step for eager headbench on
an H100, where the HF ``Trainer``, which pins by default (``dataloader_pin_memory``), was
faster. How much pinning gains there is not measured yet (the ``finetune`` and ``steps``
parts on the next GPU run say).

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
