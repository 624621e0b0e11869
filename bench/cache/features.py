"""The on-disk cache of frozen hidden states, keyed by everything that changes them.

For a ``frozen`` cell the encoder runs once per split (train and every evaluation split)
and the head trains on the cached states with no encoder forward at all. For ``top_k``
the cache holds the output of the last frozen layer and only the top k layers run.

Storage: one safetensors file per (encoder weights, tokenizer, task, split, subset,
max_length, hidden-state layer, dtype); float32 by default, float16 or bfloat16 on
request. Token states are stored without padding: ``states`` is (total tokens, 1, H),
concatenated example after example, and ``index`` holds each example's ``[start, length]``
rows. The file name is a content hash of the key, which includes a hash of the encoder's
weights and of the encoded inputs, so a changed key can never be served stale states.

One file per layer lets one encoder pass serve every head of a sweep: when a split must
be encoded anyway, the pass also stores the layers other cells will read
(``cache.store_layers``: ``auto`` = every hidden state while the split's states fit in
``cache.auto_max_gb``, else only the head's), so a linear cell's pass also serves the
last4_concat and top_k cells after it, and each cell reads only its own layers.

Files are written to a temp file in the same directory and published with ``os.replace``;
a ``filelock`` lock per split makes concurrent processes of one sweep encode it once. A
damaged (e.g. truncated) file fails validation and is rebuilt, never read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import Tensor, nn

from bench.atomic import append_json_line, atomic_write
from bench.cell import CACHE_DEFAULTS
from bench.clock import utc_now
from bench.data.token_cache import tokenizer_digest
from bench.errors import ConfigError
from bench.model.cached_forward import PARTIAL_FAMILIES, FeaturePlan
from bench.paths import cache_dir

log = logging.getLogger(__name__)

#: 2: one file per hidden-state layer (1: one file per layer set).
FORMAT_VERSION = 2
#: ``<cache>/features/builds.jsonl``: one line per encoder pass (split entry, layers stored,
#: host, pid, seconds), appended under the split's lock, so it counts encoder passes across
#: every process and node sharing the cache.
BUILD_LOG = "builds.jsonl"
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
#: ``cache.dtype`` default. In ``python -m bench.perf`` (32 frozen cells, 2,000 examples x 3
#: epochs) float32 reproduced the uncached dev accuracy of all 24 linear, pooler and
#: last4_concat cells exactly; 5 of 8 BiLSTM cells ended 1-18 of 872 dev examples apart
#: (same batches, losses equal to 7 digits at first: float rounding amplified by training at
#: lr 1e-2). float16 halves disk and memory but moved 10 of 32 cells, so it is opt-in.
DEFAULT_DTYPE = CACHE_DEFAULTS["dtype"]
ENCODER_KEYS = ("input_ids", "token_type_ids", "attention_mask")
#: ``cache.store_layers``: which layers an encoder pass stores besides the head's own.
STORE_CHOICES = ("auto", "head", "all")
#: ``cache.auto_max_gb`` default: ``auto`` stores every layer while a cell's splits need at
#: most this much (minilm on a 2,000-example SST-2 subset: 0.5 GB in float32; bert-base on
#: all of CoNLL-2003: about 16 GB, so there only the head's layers are stored).
DEFAULT_AUTO_MAX_GB = 2.0


def tensor_digest(tensors: dict[str, Tensor]) -> str:
    """Content hash (sha256) of named tensors: names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
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

    def digest(self) -> str:
        """Content hash of the key (and the storage format version)."""
        data = {"format": FORMAT_VERSION, **asdict(self)}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def filename(self) -> str:
        """``<encoder>/<task>/<split>-L<layers>-<digest>.safetensors``."""
        layers = "-".join(str(i) for i in self.layers)
        return f"{self.encoder}/{self.task}/{self.split}-L{layers}-{self.digest()[:32]}.safetensors"

    def with_layers(self, layers: Sequence[int]) -> FeatureKey:
        """The same key for other layers (one layer: a stored file; none: the whole split)."""
        return replace(self, layers=tuple(int(i) for i in layers))


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
        if n_examples and (int(idx[:, 0].min()) < 0 or int((idx[:, 0] + idx[:, 1]).max()) > len(s)):
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
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path(self, key: FeatureKey) -> Path:
        """Where the entry of ``key`` lives."""
        return self.root / key.filename()

    def load(self, key: FeatureKey, n_examples: int) -> FlatStates | None:
        """Read a valid entry, or None if it is missing or damaged (a damaged one is removed)."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            tensors = load_file(path)
            flat = FlatStates(tensors["states"], tensors["index"])
            flat.check(n_examples, len(key.layers))
            from safetensors import safe_open

            with safe_open(path, framework="pt") as handle:
                meta = handle.metadata() or {}
            if meta.get("key_digest") != key.digest():
                raise ValueError("key digest in the file does not match")
        except (SafetensorError, OSError, KeyError, ValueError, RuntimeError) as err:
            log.warning("feature cache entry %s is damaged (%s); rebuilding it", path, err)
            path.unlink(missing_ok=True)
            return None
        return flat

    def save(self, key: FeatureKey, flat: FlatStates) -> Path:
        """Publish an entry atomically (temp file in the same directory, fsync, rename)."""
        meta = {"key_digest": key.digest(), "key": json.dumps(asdict(key))}
        tensors = {"states": flat.states.contiguous(), "index": flat.index.contiguous()}
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

        Each layer is its own entry. If any of ``layers`` is missing, one call of ``build``
        under the split's lock computes every missing layer of ``layers`` and ``extra``
        (the layers other cells of the sweep will read), and each is published.

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
            have = {i: self.load(key.with_layers((i,)), n_examples) for i in layers}
            missing: list[int] = []
            if any(flat is None for flat in have.values()):  # else built meanwhile elsewhere
                have.update({i: self.load(key.with_layers((i,)), n_examples)
                             for i in extra if i not in have})  # fmt: skip
                missing = sorted(i for i, flat in have.items() if flat is None)
            if missing:
                started = time.perf_counter()
                flat = build(missing)
                flat.check(n_examples, len(missing))
                for j, i in enumerate(missing):
                    have[i] = flat.layer(j)
                    self.save(key.with_layers((i,)), have[i])  # type: ignore[arg-type]
                append_json_line(self.root / BUILD_LOG, {
                    "entry": group.filename(), "split": key.split, "layers": missing,
                    "host": socket.gethostname(), "pid": os.getpid(),
                    "seconds": time.perf_counter() - started, "time": utc_now(),
                })  # fmt: skip
        return FlatStates.join([have[i] for i in layers]), missing  # type: ignore[misc]

    def _read(
        self, key: FeatureKey, layers: Sequence[int], n_examples: int
    ) -> list[FlatStates] | None:
        """The stored layers, or None if any is missing or they disagree (then removed)."""
        parts = []
        for i in layers:
            flat = self.load(key.with_layers((i,)), n_examples)
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
        batch = collate([{k: examples[i][k] for k in ENCODER_KEYS if k in examples[i]}
                         for i in rows])  # fmt: skip
        inputs = {k: batch[k].to(device) for k in ENCODER_KEYS if k in batch}
        out = encoder(**inputs, output_hidden_states=True, return_dict=True)
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


class CachedSplit(torch.utils.data.Dataset):
    """A split's examples with their cached states attached under ``states``.

    Args:
        examples: The encoded split (indexable, with ``input_ids`` per example).
        flat: The split's flat states, in the same order.
    """

    def __init__(self, examples: Any, flat: FlatStates) -> None:
        lengths = torch.tensor([len(examples[i]["input_ids"]) for i in range(len(examples))])
        if len(lengths) != len(flat) or not torch.equal(lengths, flat.index[:, 1]):
            raise ValueError("cached states do not match the split's token counts")
        self.examples = examples
        self.flat = flat

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**self.examples[i], "states": self.flat.example(i)}

    def __getattr__(self, name: str) -> Any:  # n_truncated, words_cut... of the wrapped split
        if name in ("examples", "flat"):
            raise AttributeError(name)
        return getattr(self.examples, name)


def _plan(module: Any) -> FeaturePlan | None:
    """The cache plan of a module's freezing strategy, or None if it cannot use one."""
    report = module.freeze_report
    head_layers = sorted(set(module.head.select.layers))
    num_layers = module.encoder_info.num_layers
    if report.strategy == "frozen":
        return FeaturePlan(head_layers, num_layers)
    if report.strategy == "top_k":
        family = getattr(module.encoder.config, "model_type", "")
        if family not in PARTIAL_FAMILIES:
            log.info("no partial feature cache for model type %r; running uncached", family)
            return None
        start = num_layers - int(report.k)
        return FeaturePlan(sorted({start, *(i for i in head_layers if i < start)}),
                           num_layers, start)  # fmt: skip
    return None


def extra_layers(
    cfg: dict[str, Any], num_layers: int, hidden_size: int, n_tokens: int, dtype: torch.dtype
) -> list[int]:
    """The layers an encoder pass stores besides the head's (``cache.store_layers``).

    Args:
        cfg: The ``cache`` config: ``store_layers`` (``auto`` | ``head`` | ``all`` | a list
            of hidden-state indices) and ``auto_max_gb``.
        num_layers: The encoder's depth L (hidden states 0..L).
        hidden_size: The encoder's width H.
        n_tokens: Tokens in all the cell's splits.
        dtype: Storage dtype.

    Returns:
        Hidden-state indices in ``0..L``.

    Raises:
        ConfigError: For an unknown choice, a bad index or a negative ``auto_max_gb``.
    """
    choice = cfg.get("store_layers", "auto")
    every = list(range(num_layers + 1))
    if isinstance(choice, str):
        if choice not in STORE_CHOICES:
            raise ConfigError(
                f"cache.store_layers={choice!r}; valid choices: {', '.join(STORE_CHOICES)} "
                "or a list of hidden-state indices"
            )
        if choice == "head":
            return []
        if choice == "all":
            return every
        limit = float(cfg.get("auto_max_gb", DEFAULT_AUTO_MAX_GB))
        if limit < 0:
            raise ConfigError(f"cache.auto_max_gb={limit}; give a size in GB >= 0")
        itemsize = torch.empty((), dtype=dtype).element_size()
        size_gb = n_tokens * len(every) * hidden_size * itemsize / 1e9
        return every if size_gb <= limit else []
    from bench.axes.layers import normalise_layers

    try:
        return sorted(set(normalise_layers(list(choice), num_layers)))
    except ConfigError as err:
        raise ConfigError(f"cache.store_layers: {err}") from err


def attach_cache(module: Any, datamodule: Any, cfg: dict[str, Any] | None) -> dict[str, Any]:
    """Serve a set-up data module's splits from the feature cache, if the cell allows it.

    ``frozen`` cells get the head's layers cached and no encoder forward at all; ``top_k``
    cells get the last frozen layer's output cached and run only the top k layers. Other
    strategies, and ``cache.enabled=false``, keep the uncached path. A split not cached
    yet is encoded once, storing the layers of :func:`extra_layers` too.

    Args:
        module: The :class:`~bench.model.module.HeadbenchModule` (its encoder untrained so far).
        datamodule: The data module after ``setup()``.
        cfg: The ``cache`` config (``enabled``, ``dir``, ``dtype``, ``store_layers``,
            ``auto_max_gb``); None = defaults.

    Returns:
        What happened, for the result file: ``enabled``, ``hits``, ``misses`` (splits
        encoded by this cell), ``stored`` (layers encoded by this cell), ``build_s``,
        ``layers``, ``top_from``, ``dtype``, ``dir``.

    Raises:
        ConfigError: For an unknown ``cache.dtype`` or ``cache.store_layers``.
    """
    cfg = dict(cfg or {})
    if not cfg.get("enabled", True):
        return {"enabled": False}
    plan = _plan(module)
    if plan is None:
        return {"enabled": False, "reason": f"not used by freeze={module.freeze_report.strategy}"}
    dtype_name = str(cfg.get("dtype") or DEFAULT_DTYPE)
    if dtype_name not in DTYPES:
        raise ConfigError(f"cache.dtype={dtype_name!r}; valid choices: {', '.join(DTYPES)}")
    splits = {"train": datamodule.train, **datamodule.dev}
    n_tokens = sum(len(ex["input_ids"]) for examples in splits.values() for ex in examples)
    extra = extra_layers(cfg, plan.num_layers, module.encoder_info.hidden_size, n_tokens,
                         DTYPES[dtype_name])  # fmt: skip
    store = FeatureStore(cache_dir(cfg, "features"))  # type: ignore[arg-type]
    started = time.perf_counter()
    weights = weights_digest(module.encoder)
    tokenizer = tokenizer_digest(datamodule.tokenizer)
    hits, misses, stored = [], [], set()
    for split, examples in splits.items():
        key = FeatureKey(
            encoder=module.encoder_info.name,
            weights=weights,
            tokenizer=tokenizer,
            task=datamodule.spec.name,
            split=split,
            train_size=datamodule.train_size if split == "train" else None,
            data_seed=int(datamodule.data_seed) if split == "train" else None,
            max_length=int(datamodule.max_length),
            inputs=inputs_digest(examples),
            layers=(),
            dtype=dtype_name,
        )
        flat, built = store.get_layers(
            key,
            plan.layers,
            len(examples),
            lambda layers, examples=examples: encode_split(
                module.encoder,
                lambda items: dict(
                    datamodule.tokenizer.pad(items, padding=True, return_tensors="pt")
                ),
                examples,
                layers,
                int(datamodule.eval_batch_size),
                DTYPES[dtype_name],
            ),
            extra,
        )
        (misses if built else hits).append(split)
        stored.update(built)
        cached = CachedSplit(examples, flat)
        if split == "train":
            datamodule.train = cached
        else:
            datamodule.dev[split] = cached
    module.feature_plan = plan
    return {
        "enabled": True,
        "hits": hits,
        "misses": misses,
        "stored": sorted(stored),
        "build_s": time.perf_counter() - started,
        "layers": plan.layers,
        "top_from": plan.start,
        "dtype": dtype_name,
        "dir": str(store.root),
    }
