"""The store of cached split states: encode a split once, publish it, verify it on reading.

Storage: one safetensors file per (encoder weights, tokenizer, task, split, subset,
max_length, hidden-state layer, dtype); float32 by default, float16 or bfloat16 on
request. Token states are stored without padding: ``states`` is (total tokens, 1, H),
concatenated example after example, and ``index`` holds each example's ``[start, length]``
rows (the same layout for sequence and token tasks).

Files are written to a temp file in the same directory and published with ``os.replace``;
a ``filelock`` lock per split makes concurrent processes of one sweep encode it once.

Every file carries a checksum of its contents in its safetensors metadata (``checksum``:
``sha256:<hex>`` of the tensors' names, dtypes, shapes and bytes, computed when it is
written) and is verified whenever it is read: the bytes are hashed as they are loaded, no
second read. A damaged file (truncated, overwritten in place, unreadable, with arrays that
do not fit its key) is never served: the reader holding the split's lock logs a warning
naming the file, removes it and encodes the split again (:attr:`FeatureStore.damaged`
lists what it found, for the cell's result).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock
from safetensors import safe_open
from safetensors.torch import save
from torch import Tensor, nn

from bench.atomic import append_json_line, atomic_write
from bench.cache.keys import DTYPES, ENCODER_KEYS, FeatureKey, tensor_digest
from bench.clock import utc_now
from bench.model.encoders import run_encoder

log = logging.getLogger(__name__)

#: ``<cache>/features/builds.jsonl``: one line per encoder pass (split entry, layers stored,
#: host, pid, seconds), appended under the split's lock, so it counts encoder passes across
#: every process and node sharing the cache.
BUILD_LOG = "builds.jsonl"
#: The tensors every file holds, and the metadata field with their checksum.
TENSORS = ("index", "states")
CHECKSUM = "checksum"


def checksum(tensors: dict[str, Tensor]) -> str:
    """The checksum a file records for its tensors: ``sha256:<hex>``.

    Args:
        tensors: The file's named tensors.

    Returns:
        The hash of their names, dtypes, shapes and bytes, with the algorithm's name.
    """
    return f"sha256:{tensor_digest(tensors)}"


class DamagedEntry(Exception):
    """A cache file that cannot be served: unreadable, altered, or not matching its key."""


@dataclass
class FlatStates:
    """A split's token states without padding.

    Attributes:
        states: (total tokens, n_layers, H), examples concatenated.
        index: (N, 2) int64: each example's ``[start, length]`` in ``states``.
    """

    states: Tensor
    index: Tensor

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def example(self, i: int) -> Tensor:
        """States of example ``i``: (T_i, n_layers, H), a view."""
        start, length = (int(v) for v in self.index[i])
        return self.states[start : start + length]

    def check(self, n_examples: int, n_layers: int) -> None:
        """Raise ``ValueError`` unless the arrays are consistent with the key."""
        s, idx = self.states, self.index
        if s.dim() != 3 or s.shape[1] != n_layers:
            raise ValueError(f"states shape {tuple(s.shape)}, expected (*, {n_layers}, H)")
        if idx.shape != (n_examples, 2):
            raise ValueError(f"index shape {tuple(idx.shape)}, expected ({n_examples}, 2)")
        if idx.dtype != torch.int64:
            raise ValueError(f"index dtype {idx.dtype}, expected torch.int64")
        if n_examples and (int(idx.min()) < 0 or int((idx[:, 0] + idx[:, 1]).max()) > len(s)):
            raise ValueError("index points outside the states")

    def layer(self, j: int) -> FlatStates:
        """The ``j``-th stored layer alone, (total tokens, 1, H)."""
        return FlatStates(self.states[:, j : j + 1].contiguous(), self.index)

    @staticmethod
    def join(parts: Sequence[FlatStates]) -> FlatStates:
        """Stack single-layer states of one split along the layer axis.

        Raises:
            ValueError: If the parts index their examples differently.
        """
        if len(parts) == 1:
            return parts[0]
        if any(not torch.equal(p.index, parts[0].index) for p in parts[1:]):
            raise ValueError("the layers' example indexes differ")
        return FlatStates(torch.cat([p.states for p in parts], dim=1), parts[0].index)


class FeatureStore:
    """A directory of cached split states, safe to share between processes.

    Args:
        root: The cache directory (created on demand).

    Attributes:
        root: The cache directory.
        damaged: Entries this store found damaged, removed and handed back for rebuilding
            (``{"file", "reason"}`` each, in the order found).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.damaged: list[dict[str, str]] = []

    def path(self, key: FeatureKey) -> Path:
        """Where the entry of ``key`` lives."""
        return self.root / key.filename()

    def load(self, key: FeatureKey, n_examples: int) -> FlatStates | None:
        """Read a verified entry, or None if it is missing or damaged.

        A damaged entry is removed with a warning and recorded in :attr:`damaged`; the
        caller rebuilds it (:meth:`get_layers` does, under the split's lock).

        Args:
            key: The entry's key (one layer).
            n_examples: Examples the split holds.

        Returns:
            The entry's states, or None.
        """
        path = self.path(key)
        try:
            return self._open(key, n_examples)
        except DamagedEntry as err:
            log.warning(
                "feature cache file %s is damaged (%s); removing it and rebuilding it",
                path,
                err,
            )
            path.unlink(missing_ok=True)
            self.damaged.append({"file": str(path), "reason": str(err)})
            return None

    def _open(self, key: FeatureKey, n_examples: int) -> FlatStates | None:
        """Read and verify an entry; None if missing (changes nothing on disk).

        Raises:
            DamagedEntry: If the file cannot be read, fails its checksum, or its arrays or
                metadata do not fit ``key``.
        """
        path = self.path(key)
        try:
            with safe_open(path, framework="pt") as handle:
                meta = handle.metadata() or {}
                names = sorted(handle.keys())
                if names != sorted(TENSORS):
                    raise DamagedEntry(f"holds tensors {names}, expected {sorted(TENSORS)}")
                tensors = {name: handle.get_tensor(name) for name in TENSORS}
        except FileNotFoundError:
            return None
        except DamagedEntry:
            raise
        except Exception as err:  # whatever the bytes are, an unreadable file is damage
            raise DamagedEntry(f"unreadable: {type(err).__name__}: {err}") from err
        recorded = meta.get(CHECKSUM)
        if recorded is None:
            raise DamagedEntry("no checksum recorded")
        if recorded != checksum(tensors):
            raise DamagedEntry("checksum mismatch: its contents changed after it was written")
        if meta.get("key_digest") != key.digest():
            raise DamagedEntry("key digest in the file does not match")
        flat = FlatStates(tensors["states"], tensors["index"])
        if key.dtype in DTYPES and flat.states.dtype != DTYPES[key.dtype]:
            raise DamagedEntry(f"states dtype {flat.states.dtype}, expected {key.dtype}")
        try:
            flat.check(n_examples, len(key.layers))
        except (ValueError, RuntimeError) as err:
            raise DamagedEntry(str(err)) from err
        return flat

    def save(self, key: FeatureKey, flat: FlatStates) -> Path:
        """Publish an entry atomically (temp file in the same directory, fsync, rename)."""
        tensors = {"states": flat.states.contiguous(), "index": flat.index.contiguous()}
        meta = {
            "key_digest": key.digest(),
            "key": json.dumps(asdict(key)),
            CHECKSUM: checksum(tensors),
        }
        data = save(tensors, metadata=meta)  # safetensors bytes, published in one rename
        return atomic_write(self.path(key), lambda handle: handle.write(data), binary=True)

    def get_layers(
        self,
        key: FeatureKey,
        layers: Sequence[int],
        n_examples: int,
        build: Callable[[list[int]], FlatStates],
        extra: Sequence[int] = (),
    ) -> tuple[FlatStates, list[int]]:
        """Return a split's states of ``layers``, encoding the missing ones in one pass.

        Each layer is its own entry. If any of ``layers`` is missing or damaged, one call
        of ``build`` under the split's lock computes every missing layer of ``layers`` and
        ``extra`` (the layers other cells of the sweep will read), and each is published.
        A damaged file is reported (a warning naming it) and recorded in :attr:`damaged`.

        Args:
            key: The split's key (its ``layers`` are ignored).
            layers: Hidden-state indices wanted, in the order of the returned states.
            n_examples: Examples the split holds (validation).
            build: Encodes the split and returns the given layers' states, in that order.
            extra: Further layers to store when a pass runs anyway.

        Returns:
            ``(states, built)``: the states (total tokens, len(layers), H) and the layers
            this call encoded (empty when everything was read from disk).
        """
        parts = self._read(key, layers, n_examples)
        if parts is not None:
            return FlatStates.join(parts), []
        group = key.with_layers(())
        lock = self.path(group).with_suffix(".lock")
        lock.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(lock)):
            damaged_before = len(self.damaged)
            have = {i: self.load(key.with_layers((i,)), n_examples) for i in layers}
            missing: list[int] = []
            if any(flat is None for flat in have.values()):  # else built meanwhile elsewhere
                have.update(
                    {
                        i: self.load(key.with_layers((i,)), n_examples)
                        for i in extra
                        if i not in have
                    }
                )
                missing = sorted(i for i, flat in have.items() if flat is None)
            if missing:
                repaired = [d["file"] for d in self.damaged[damaged_before:]]
                started = time.perf_counter()
                flat = build(missing)
                flat.check(n_examples, len(missing))
                for j, i in enumerate(missing):
                    have[i] = flat.layer(j)
                    self.save(key.with_layers((i,)), have[i])  # type: ignore[arg-type]
                append_json_line(
                    self.root / BUILD_LOG,
                    {
                        "entry": group.filename(),
                        "split": key.split,
                        "layers": missing,
                        "rebuilt": [str(Path(f).relative_to(self.root)) for f in repaired],
                        "host": socket.gethostname(),
                        "pid": os.getpid(),
                        "seconds": time.perf_counter() - started,
                        "time": utc_now(),
                    },
                )
        return FlatStates.join([have[i] for i in layers]), missing  # type: ignore[misc]

    def _read(
        self, key: FeatureKey, layers: Sequence[int], n_examples: int
    ) -> list[FlatStates] | None:
        """The stored layers, or None if any is missing, damaged, or they disagree.

        Runs without the lock, so it removes nothing but layers that disagree: a damaged
        file is left to :meth:`get_layers`' locked pass, which warns, removes and rebuilds it
        once (another process may have replaced it meanwhile).
        """
        parts = []
        for i in layers:
            try:
                flat = self._open(key.with_layers((i,)), n_examples)
            except DamagedEntry:  # reported and replaced under the lock, by whoever holds it
                return None
            if flat is None:
                return None
            parts.append(flat)
        if any(not torch.equal(p.index, parts[0].index) for p in parts[1:]):
            log.warning("feature cache layers of %s disagree; rebuilding them", key.split)
            for i in layers:
                self.path(key.with_layers((i,))).unlink(missing_ok=True)
            return None
        return parts


@torch.no_grad()
def encode_split(
    encoder: nn.Module,
    collate: Callable[[list[dict[str, Any]]], dict[str, Tensor]],
    examples: Sequence[dict[str, Any]],
    layers: Sequence[int],
    batch_size: int,
    dtype: torch.dtype,
    causal: bool = False,
) -> FlatStates:
    """Run the encoder once over a split and keep the chosen layers' unpadded states.

    Examples are encoded in length-sorted batches (little padding); the result is in the
    split's order.

    Args:
        encoder: The (frozen, eval-mode) encoder.
        collate: Pads a list of examples into encoder inputs.
        examples: The split's encoded examples.
        layers: Hidden-state indices to keep.
        batch_size: Examples per forward pass.
        dtype: Storage dtype.
        causal: Whether the encoder is causal (positions then counted over real tokens:
            :func:`bench.model.encoders.run_encoder`).

    Returns:
        The split's flat states.
    """
    modes = {m: m.training for m in encoder.modules()}  # frozen parts stay in eval afterwards
    home = next(encoder.parameters()).device
    device = torch.device("cuda") if torch.cuda.is_available() else home
    encoder.eval().to(device)
    lengths = np.array([len(ex["input_ids"]) for ex in examples], dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    pieces: list[Tensor] = []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = collate(
            [{k: examples[i][k] for k in ENCODER_KEYS if k in examples[i]} for i in rows]
        )
        inputs = {k: batch[k].to(device) for k in ENCODER_KEYS if k in batch}
        out = run_encoder(encoder, inputs, causal)
        stacked = torch.stack([out.hidden_states[i] for i in layers], dim=2)  # (B, T, n, H)
        kept = stacked[inputs["attention_mask"].bool()]  # (sum T_b, n, H)
        pieces.append(kept.to(dtype).cpu())
    encoder.to(home)
    for m, mode in modes.items():
        m.training = mode
    states = torch.cat(pieces) if pieces else torch.empty(0, len(layers), 0, dtype=dtype)
    index = torch.empty(len(examples), 2, dtype=torch.int64)
    index[torch.from_numpy(order), 0] = torch.from_numpy(np.cumsum(lengths[order]) - lengths[order])
    index[:, 1] = torch.from_numpy(lengths)
    return FlatStates(states, index)
