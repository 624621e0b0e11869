"""Length-bucketed training order: batches of near-equal lengths, in random order.

``data.group_by_length=bucket``. The Hugging Face ``LengthGroupedSampler``
(``group_by_length=true``) sorts random mega-batches of 50 batches by length, so a batch
still mixes lengths from one mega-batch. Bucketing sorts the whole training split by a
noisy length (each length times ``1 + u``, ``u`` uniform in ``[-noise, noise]``, the
``padding_noise`` of AllenNLP's ``BucketBatchSampler``), cuts it into batches and shuffles
the batches: far less padding, while the noise and the shuffle still give every epoch other
batches in another order. The order comes from the given generator (``order_seed``), else
from torch's global one, which ``seed_everything`` seeds, so a seed gives the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class BucketedLengthSampler(Sampler[int]):
    """Indices such that each consecutive run of ``batch_size`` is one length bucket.

    A ``DataLoader`` with the same ``batch_size`` (and ``drop_last=False``) then forms the
    buckets as its batches; the one short bucket comes last.

    Args:
        lengths: Token count of every example.
        batch_size: The training batch size.
        noise: Relative length noise (0: plain sort, ties in random order).
        generator: Where the random numbers come from (None: torch's global generator).
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        noise: float = 0.1,
        generator: torch.Generator | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: must be at least 1")
        if not 0 <= noise < 1:
            raise ValueError(f"noise={noise}: must be in [0, 1)")
        self.lengths = torch.as_tensor(lengths, dtype=torch.float64)
        self.batch_size = batch_size
        self.noise = noise
        self.generator = generator

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        n = len(self.lengths)
        if n == 0:
            return iter(())
        # A random permutation first, so that a stable sort breaks ties at random too.
        perm = torch.randperm(n, generator=self.generator)
        jitter = 1 + self.noise * (
            2 * torch.rand(n, dtype=torch.float64, generator=self.generator) - 1
        )
        order = perm[torch.sort(self.lengths[perm] * jitter, stable=True).indices]
        buckets = list(torch.split(order, self.batch_size))
        short = buckets.pop() if n % self.batch_size else None
        shuffled = [
            buckets[i] for i in torch.randperm(len(buckets), generator=self.generator).tolist()
        ]
        if short is not None:
            shuffled.append(short)
        return iter(torch.cat(shuffled).tolist()) if shuffled else iter(())
