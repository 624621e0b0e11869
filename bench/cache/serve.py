"""Serve a cell's splits from the feature cache: the one entry point the run uses.

For a ``frozen`` cell the encoder runs once per split (train and every evaluation split)
and the head trains on the cached states with no encoder forward at all. For ``top_k``
the cache holds the output of the last frozen layer and only the top k layers run.

:func:`serve_features` reads (or builds) the states and returns them as
:class:`ServedFeatures`: the cached splits, the
:class:`~bench.model.cached_forward.FeaturePlan` and a record for the result file. It
changes nothing it is given; the run hands the splits to the data module
(:meth:`~bench.data.sequence_datamodule.SplitLoaders.use_splits`, with
:class:`StatesCollate` padding their states) and the plan to the module
(:meth:`~bench.model.module.HeadbenchModule.use_cached_states`).

One file per layer lets one encoder pass serve every head of a sweep: when a split must
be encoded anyway, the pass also stores the layers other cells will read
(``cache.store_layers``: ``auto`` = every hidden state while the split's states fit in
``cache.auto_max_gb``, else only the head's), so a linear cell's pass also serves the
last4_concat and top_k cells after it, and each cell reads only its own layers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from bench.axes.layers import normalise_layers
from bench.cache.keys import DEFAULT_DTYPE, DTYPES, FeatureKey, inputs_digest, weights_digest
from bench.cache.resident import DEFAULT_RESIDENT_MAX_GB, ResidentSplit, resident_device
from bench.cache.store import FeatureStore, FlatStates, encode_split
from bench.data.encoder_inputs import SECOND_SENTENCE
from bench.data.token_cache import tokenizer_digest
from bench.errors import ConfigError
from bench.model.cached_forward import PARTIAL_FAMILIES, FeaturePlan
from bench.paths import cache_dir

log = logging.getLogger(__name__)

#: ``cache.store_layers``: which layers an encoder pass stores besides the head's own.
STORE_CHOICES = ("auto", "head", "all")
#: ``cache.auto_max_gb`` default: ``auto`` stores every layer while a cell's splits need at
#: most this much (minilm on a 2,000-example SST-2 subset: 0.5 GB in float32; bert-base on
#: all of CoNLL-2003: about 16 GB, so there only the head's layers are stored).
DEFAULT_AUTO_MAX_GB = 2.0

Collate = Callable[[Sequence[dict[str, Any]]], dict[str, Any]]


def _check_lengths(examples: Sequence[dict[str, Any]], flat: FlatStates) -> None:
    lengths = torch.tensor([len(ex["input_ids"]) for ex in examples])
    if len(lengths) != len(flat) or not torch.equal(lengths, flat.index[:, 1]):
        raise ValueError("cached states do not match the split's token counts")


class CachedSplit(torch.utils.data.Dataset):
    """A split's examples with their cached states attached under ``states``.

    Args:
        examples: The encoded split (indexable, with ``input_ids`` per example).
        flat: The split's flat states, in the same order.
        second: Under ``pair_encoding=siamese``, the second sentences' flat states: attached
            to each example's :data:`~bench.data.encoder_inputs.SECOND_SENTENCE` inputs.
    """

    def __init__(self, examples: Any, flat: FlatStates, second: FlatStates | None = None) -> None:
        rows = [examples[i] for i in range(len(examples))]
        _check_lengths(rows, flat)
        if second is not None:
            _check_lengths([ex[SECOND_SENTENCE] for ex in rows], second)
        self.examples = examples
        self.flat = flat
        self.second = second

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = {**self.examples[i], "states": self.flat.example(i)}
        if self.second is not None:
            item[SECOND_SENTENCE] = {**item[SECOND_SENTENCE], "states": self.second.example(i)}
        return item

    def __getattr__(self, name: str) -> Any:  # n_truncated, words_cut... of the wrapped split
        if name in ("examples", "flat", "second"):
            raise AttributeError(name)
        return getattr(self.examples, name)


def feature_plan(module: Any) -> FeaturePlan | None:
    """The cache plan of a module's freezing strategy, or None if it cannot use one.

    Args:
        module: The :class:`~bench.model.module.HeadbenchModule` (read, not changed).

    Returns:
        The plan, or None for strategies that train the layers the cache would hold.
    """
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
        return FeaturePlan(
            sorted({start, *(i for i in head_layers if i < start)}), num_layers, start
        )
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
    try:
        return sorted(set(normalise_layers(list(choice), num_layers)))
    except ConfigError as err:
        raise ConfigError(f"cache.store_layers: {err}") from err


def pad_states(states: Sequence[Tensor]) -> Tensor:
    """Pad per-example states (T_i, n, H) on the right into (B, T, n, H) float32."""
    return pad_sequence(list(states), batch_first=True).float()


class StatesCollate:
    """Wraps a data module's collate so cached ``states`` are padded into ``cached_states``.

    A class, not a closure, so data modules holding it still pickle (``ddp_spawn``,
    worker processes).

    Args:
        collate: The data module's own collate (encoder inputs, labels...).

    Calling it on :class:`CachedSplit` items returns the wrapped collate's batch plus
    ``cached_states`` (B, T, n_layers, H); a siamese pair's second sentences get theirs
    under :data:`~bench.data.encoder_inputs.SECOND_SENTENCE`.
    """

    def __init__(self, collate: Collate) -> None:
        self.collate = collate

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Collate ``items`` without their states, then add the padded states."""
        second = SECOND_SENTENCE in items[0]
        out = self.collate([_without_states(it, second) for it in items])
        out["cached_states"] = pad_states([it["states"] for it in items])  # (B, T, n, H)
        if second:
            states = [it[SECOND_SENTENCE]["states"] for it in items]
            out[SECOND_SENTENCE]["cached_states"] = pad_states(states)
        return out


def _without_states(item: dict[str, Any], second: bool) -> dict[str, Any]:
    """An item without its cached states (nor its second sentence's)."""
    out = {k: v for k, v in item.items() if k != "states"}
    if second:
        out[SECOND_SENTENCE] = {k: v for k, v in out[SECOND_SENTENCE].items() if k != "states"}
    return out


@dataclass
class ServedFeatures:
    """What the cache serves a cell.

    Attributes:
        record: What happened, for the result file (see :func:`serve_features`).
        plan: How the module reads the cached states; None when the cell runs uncached.
        splits: The cached splits by name (``train`` and every evaluation split).
    """

    record: dict[str, Any]
    plan: FeaturePlan | None = None
    splits: dict[str, Any] = field(default_factory=dict)  # CachedSplit or ResidentSplit


def serve_features(module: Any, datamodule: Any, cfg: dict[str, Any] | None) -> ServedFeatures:
    """Read (or build) a set-up data module's splits from the feature cache, if the cell allows it.

    ``frozen`` cells get the head's layers cached and no encoder forward at all; ``top_k``
    cells get the last frozen layer's output cached and run only the top k layers. Other
    strategies, and ``cache.enabled=false``, keep the uncached path (no ``plan``). A split
    not cached yet is encoded once, storing the layers of :func:`extra_layers` too. Neither
    ``module`` nor ``datamodule`` is changed: the caller hands the result to them.

    Args:
        module: The :class:`~bench.model.module.HeadbenchModule` (its encoder untrained so far).
        datamodule: The data module after ``setup()``.
        cfg: The ``cache`` config (``enabled``, ``dir``, ``dtype``, ``store_layers``,
            ``auto_max_gb``); None = defaults.

    Returns:
        The served features; ``record`` holds ``enabled``, ``hits``, ``misses`` (splits
        encoded by this cell), ``stored`` (layers encoded by this cell), ``build_s``,
        ``layers``, ``top_from``, ``dtype``, ``dir`` and ``rebuilt`` (the damaged cache
        files this cell found, removed and encoded again: ``{"file", "reason"}`` each;
        a warning names each one as it is found).

    Raises:
        ConfigError: For an unknown ``cache.dtype`` or ``cache.store_layers``.
    """
    cfg = dict(cfg or {})
    if not cfg.get("enabled", True):
        return ServedFeatures({"enabled": False})
    plan = feature_plan(module)
    if plan is None:
        strategy = module.freeze_report.strategy
        return ServedFeatures({"enabled": False, "reason": f"not used by freeze={strategy}"})
    dtype_name = str(cfg.get("dtype") or DEFAULT_DTYPE)
    if dtype_name not in DTYPES:
        raise ConfigError(f"cache.dtype={dtype_name!r}; valid choices: {', '.join(DTYPES)}")
    splits = {"train": datamodule.train, **datamodule.dev}
    n_tokens = sum(_tokens(ex) for examples in splits.values() for ex in examples)
    hidden_size = module.encoder_info.hidden_size
    extra = extra_layers(cfg, plan.num_layers, hidden_size, n_tokens, DTYPES[dtype_name])
    store = FeatureStore(cache_dir(cfg, "features"))  # type: ignore[arg-type]
    started = time.perf_counter()
    weights = weights_digest(module.encoder)
    tokenizer = tokenizer_digest(datamodule.tokenizer)
    hits: list[str] = []
    misses: list[str] = []
    stored: set[int] = set()
    served: dict[str, CachedSplit] = {}
    for split, examples in splits.items():
        # a siamese pair's sentences are encoded alone: one entry per sentence
        siamese = len(examples) > 0 and SECOND_SENTENCE in examples[0]
        parts: dict[int | None, Any] = {None: examples}
        if siamese:
            parts = {1: examples, 2: [ex[SECOND_SENTENCE] for ex in examples]}
        flats: list[FlatStates] = []
        for sentence, inputs in parts.items():
            key = FeatureKey(
                encoder=module.encoder_info.name,
                weights=weights,
                tokenizer=tokenizer,
                task=datamodule.spec.name,
                split=split,
                train_size=datamodule.train_size if split == "train" else None,
                data_seed=int(datamodule.data_seed) if split == "train" else None,
                max_length=int(datamodule.max_length),
                inputs=inputs_digest(inputs),
                layers=(),
                dtype=dtype_name,
                sentence=sentence,
            )
            flat, built = store.get_layers(
                key,
                plan.layers,
                len(inputs),
                lambda layers, inputs=inputs: encode_split(  # type: ignore[misc]
                    module.encoder,
                    lambda items: dict(
                        datamodule.tokenizer.pad(items, padding=True, return_tensors="pt")
                    ),
                    inputs,
                    layers,
                    int(datamodule.eval_batch_size),
                    DTYPES[dtype_name],
                    module.encoder_info.causal,
                ),
                extra,
            )
            stored.update(built)
            flats.append(flat)
            name = split if sentence is None else f"{split}-s{sentence}"
            (misses if built else hits).append(name)
        served[split] = CachedSplit(examples, *flats)
    resident = _make_resident(served, cfg)
    record = {
        "enabled": True,
        "hits": hits,
        "misses": misses,
        "stored": sorted(stored),
        "build_s": time.perf_counter() - started,
        "layers": plan.layers,
        "top_from": plan.start,
        "dtype": dtype_name,
        "dir": str(store.root),
        "rebuilt": store.damaged,
        "resident": resident,
    }
    return ServedFeatures(record, plan, served)


def _tokens(example: dict[str, Any]) -> int:
    """An example's tokens: its input's, and its second sentence's when encoded alone."""
    second = example.get(SECOND_SENTENCE)
    return len(example["input_ids"]) + (len(second["input_ids"]) if second else 0)


def _make_resident(served: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Swap the cached splits for resident ones where ``cache.resident`` says so (in place).

    Returns:
        ``{"device", "gb"}`` for the record, or None when the splits stay examples.
    """
    max_gb = float(cfg.get("resident_max_gb") or DEFAULT_RESIDENT_MAX_GB)
    device = resident_device(served, cfg.get("resident", "auto"), max_gb)
    if device is None:
        return None
    for name, split in list(served.items()):
        served[name] = ResidentSplit(split, device)
    size = sum(split.nbytes() for split in served.values())
    return {"device": str(device), "gb": round(size / 2**30, 3)}
