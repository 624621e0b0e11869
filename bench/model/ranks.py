"""Collectives the module needs when a cell trains on several ranks (``trainer=ddp``).

Each rank evaluates a ``DistributedSampler`` shard of every dev split, padded with
repeated examples; :func:`gather_rows` brings the predictions of all ranks together and
keeps each example once. On a single process both functions return their input.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def world_size() -> int:
    """Number of processes in the default process group (1 when none is initialised)."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather_rows(rows: Sequence[T], key: Callable[[T], Hashable]) -> list[T]:
    """Every rank's rows on every rank, each key once, sorted by key.

    With one process this only de-duplicates and sorts. Rows must be picklable (plain
    Python values or CPU tensors); ``all_gather_object`` works on gloo and NCCL.

    Args:
        rows: This rank's rows.
        key: A row's identity, e.g. the example's ``idx``; the first copy is kept
            (the ``DistributedSampler`` pads a shard with repeated examples).

    Returns:
        The union of all ranks' rows.
    """
    parts: list[Any] = [list(rows)]
    if world_size() > 1:
        parts = [None] * world_size()
        torch.distributed.all_gather_object(parts, list(rows))
    unique: dict[Hashable, T] = {}
    for part in parts:
        for row in part:
            unique.setdefault(key(row), row)
    return [unique[k] for k in sorted(unique)]  # type: ignore[type-var]


def sum_across_ranks(values: Sequence[float]) -> list[float]:
    """Element-wise sum of a few numbers over all ranks (the numbers themselves with one)."""
    if world_size() == 1:
        return list(values)
    parts: list[Any] = [None] * world_size()
    torch.distributed.all_gather_object(parts, list(values))
    return [sum(column) for column in zip(*parts, strict=True)]
