"""Cached splits held whole on the training device, batches gathered there by index.

A frozen cell's head reads cached hidden states (:mod:`bench.cache.serve`). Served as
examples, every batch builds one dict per example on the host, pads the states with
``pad_sequence`` and copies the batch to the device. Held *resident*, a split is a few
tensors on the device (the flat states, each example's start and length, the labels and
ids); the data loader yields row numbers and :class:`ResidentCollate` gathers a padded
batch with one indexing operation on the device: no per-example Python, no host-side
collation, no host-to-device copy per batch.

The batches are the ones the example path builds, value for value: the same rows in the
same order (the same sampler draws the rows from the same generator), the same padding
(zeros to the longest example of the batch) and float32 states. So ``cache.resident`` is
not part of a cell's config hash: it changes time, not numbers (``tests/test_resident.py``
trains a cell both ways and compares the histories).

Sequence tasks only: token tasks carry per-word alignments and keep the example path, as do
siamese pairs (two sentences' states per example).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from bench.data.encoder_inputs import SECOND_SENTENCE
from bench.errors import ConfigError

#: ``cache.resident``: ``auto`` (on the GPU when the splits fit in ``resident_max_gb``, else
#: in host memory; token tasks never), ``true`` (always, for sequence tasks), ``false``.
RESIDENT_CHOICES = ("auto", True, False)
#: ``cache.resident_max_gb`` default: the GPU memory resident splits may take.
DEFAULT_RESIDENT_MAX_GB = 8.0


_OWN = frozenset(
    {
        "source",
        "device",
        "states",
        "starts",
        "token_lengths",
        "lengths_t",
        "labels",
        "idx",
        "collate",
    }
)


class ResidentSplit(torch.utils.data.Dataset):
    """A cached sequence-task split as whole tensors on one device.

    Items are row numbers; :class:`ResidentCollate` turns a list of them into a batch.
    Attributes the example split has (``n_truncated``...) are read through.

    Args:
        split: The :class:`~bench.cache.serve.CachedSplit` (examples with ``labels`` and
            ``idx``, and their flat states).
        device: Where the tensors live.
    """

    def __init__(self, split: Any, device: torch.device) -> None:
        examples = split.examples
        self.source = split
        self.device = device
        self.states = split.flat.states.to(device)  # (total tokens, n_layers, H)
        self.starts = split.flat.index[:, 0].to(device)
        self.token_lengths: list[int] = split.flat.index[:, 1].tolist()
        self.lengths_t = split.flat.index[:, 1].to(device)
        self.labels = torch.tensor([examples[i]["labels"] for i in range(len(examples))])
        self.labels = self.labels.to(device)
        self.idx = torch.tensor([examples[i]["idx"] for i in range(len(examples))]).to(device)
        #: What the data loader collates this split's row numbers with.
        self.collate = ResidentCollate(self)

    def __len__(self) -> int:
        return len(self.token_lengths)

    def __getitem__(self, i: int) -> int:
        return i

    def lengths(self) -> list[int]:
        """Each example's number of tokens (what length-grouped samplers sort by)."""
        return list(self.token_lengths)

    def nbytes(self) -> int:
        """Device memory the split takes."""
        tensors = (self.states, self.starts, self.lengths_t, self.labels, self.idx)
        return sum(t.numel() * t.element_size() for t in tensors)

    def __getattr__(self, name: str) -> Any:  # n_truncated, words_cut... of the wrapped split
        if name in _OWN:
            raise AttributeError(name)
        return getattr(self.source, name)


class ResidentCollate:
    """Gathers a padded batch of a :class:`ResidentSplit` on its device.

    Args:
        split: The resident split the row numbers index.
    """

    def __init__(self, split: ResidentSplit) -> None:
        self.split = split

    def __call__(self, rows: Sequence[int]) -> dict[str, Tensor]:
        """``cached_states`` (B, T, n, H) float32, ``attention_mask``, ``labels``, ``idx``."""
        split = self.split
        width = max(split.token_lengths[i] for i in rows)  # host-side: no device sync
        index = torch.as_tensor(list(rows), dtype=torch.int64).to(split.device)
        positions = torch.arange(width, device=split.device)
        mask = positions.unsqueeze(0) < split.lengths_t[index].unsqueeze(1)  # (B, T)
        tokens = split.starts[index].unsqueeze(1) + positions.unsqueeze(0)
        tokens = tokens.clamp(max=max(len(split.states) - 1, 0))
        states = split.states[tokens].float()  # (B, T, n, H)
        states = states.masked_fill(~mask[:, :, None, None], 0.0)
        return {
            "cached_states": states,
            "attention_mask": mask.long(),
            "labels": split.labels[index],
            "idx": split.idx[index],
        }


def resident_device(splits: dict[str, Any], choice: object, max_gb: float) -> torch.device | None:
    """Where a cell's cached splits should live, or None to serve them as examples.

    Args:
        splits: The :class:`~bench.cache.serve.CachedSplit` s (``train`` and every
            evaluation split).
        choice: ``cache.resident`` (:data:`RESIDENT_CHOICES`).
        max_gb: ``cache.resident_max_gb``: the GPU memory they may take.

    Returns:
        ``cuda`` when a GPU is there and the splits fit, else the CPU (the tensors stay
        where the cache loaded them); None for ``false`` and for token tasks.

    Raises:
        ConfigError: For an invalid ``cache.resident``.
    """
    if choice not in RESIDENT_CHOICES:
        raise ConfigError(
            f"cache.resident={choice!r}; valid choices: auto, true, false (bench/cache/resident.py)"
        )
    if choice is False or not splits:
        return None
    if any(
        "word_pos" in split.examples[0] or SECOND_SENTENCE in split.examples[0]
        for split in splits.values()
        if len(split)
    ):
        return None  # token tasks (per-word alignments), siamese pairs: the example path
    if torch.cuda.is_available():
        need = sum(s.flat.states.numel() * s.flat.states.element_size() for s in splits.values())
        free, _ = torch.cuda.mem_get_info()
        if need <= min(max_gb * 2**30, 0.8 * free):
            return torch.device("cuda")
    return torch.device("cpu")
