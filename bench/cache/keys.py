"""Cache keys: everything that changes a split's cached hidden states, and its digests.

An entry's file name is a content hash of its :class:`FeatureKey`, which includes a hash of
the encoder's weights and of the encoded inputs, so a changed key can never be served stale
states. ``FORMAT_VERSION``, the key's fields and :meth:`FeatureKey.filename` define where
entries live on users' disks: change them only together with ``FORMAT_VERSION``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bench.cell import CACHE_DEFAULTS
from bench.data.encoder_inputs import ENCODER_KEYS

#: 3: each file records a checksum of its tensors in its metadata, verified on reading
#: (2: one file per hidden-state layer; 1: one file per layer set). Entries of an older
#: version have other file names: they are misses, never read.
FORMAT_VERSION = 3
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
#: ``cache.dtype`` default. In ``python -m bench.perf`` (32 frozen cells, 2,000 examples x 3
#: epochs) float32 reproduced the uncached dev accuracy of all 24 linear, pooler and
#: last4_concat cells exactly; 5 of 8 BiLSTM cells ended 1-18 of 872 dev examples apart
#: (same batches, losses equal to 7 digits at first: float rounding amplified by training at
#: lr 1e-2). float16 halves disk and memory but moved 10 of 32 cells, so it is opt-in.
DEFAULT_DTYPE = CACHE_DEFAULTS["dtype"]


def tensor_digest(tensors: dict[str, Tensor]) -> str:
    """Content hash (sha256) of named tensors: names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)  # hashed in place, not copied
    return h.hexdigest()


def weights_digest(module: nn.Module) -> str:
    """Content hash of a module's parameters and buffers (its ``state_dict``)."""
    return tensor_digest(dict(module.state_dict()))


def inputs_digest(examples: Sequence[dict[str, Any]]) -> str:
    """Content hash of a split's encoder inputs (ids, token types, lengths), in order."""
    h = hashlib.sha256()
    for key in ENCODER_KEYS:
        if key not in examples[0]:
            continue
        lengths = np.array([len(ex[key]) for ex in examples], dtype=np.int64)
        flat = np.concatenate([np.asarray(ex[key], dtype=np.int64) for ex in examples])
        h.update(key.encode())
        h.update(lengths.tobytes())
        h.update(flat.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class FeatureKey:
    """Everything that changes a split's cached states.

    Attributes:
        encoder: Encoder config name (for humans; identity is ``weights``).
        weights: Content hash of the encoder's weights.
        tokenizer: Content hash of the tokenizer.
        task: Task name.
        split: Split name (``train``, ``dev``...).
        train_size: Training subset size (None = all; evaluation splits: None).
        data_seed: Seed of the subset (evaluation splits: None).
        max_length: Maximum tokens per example.
        inputs: Content hash of the encoded inputs (catches any other data change).
        layers: Hidden-state indices stored (0 = embeddings); one per stored file, none
            for the key of a whole split (its lock and build log).
        dtype: Storage dtype.
        sentence: Under ``pair_encoding=siamese``, which sentence of each pair was encoded
            alone (1 or 2): its own entry, apart from the pair's ``cross`` entry (None,
            left out of the digest and the file name, so ``cross`` entries keep theirs).
    """

    encoder: str
    weights: str
    tokenizer: str
    task: str
    split: str
    train_size: int | None
    data_seed: int | None
    max_length: int
    inputs: str
    layers: tuple[int, ...]
    dtype: str
    sentence: int | None = None

    def digest(self) -> str:
        """Content hash of the key (and the storage format version)."""
        data = {"format": FORMAT_VERSION, **asdict(self)}
        if self.sentence is None:  # added with siamese pairs: cross entries keep their digests
            del data["sentence"]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def filename(self) -> str:
        """``<encoder>/<task>/<split>[-s<sentence>]-L<layers>-<digest>.safetensors``."""
        layers = "-".join(str(i) for i in self.layers)
        split = self.split if self.sentence is None else f"{self.split}-s{self.sentence}"
        return f"{self.encoder}/{self.task}/{split}-L{layers}-{self.digest()[:32]}.safetensors"

    def with_layers(self, layers: Sequence[int]) -> FeatureKey:
        """The same key for other layers (one layer: a stored file; none: the whole split)."""
        return replace(self, layers=tuple(int(i) for i in layers))
