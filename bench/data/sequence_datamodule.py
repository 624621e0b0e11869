"""One ``LightningDataModule`` for GLUE: load (local files or the Hub), subset, tokenize, pad.

Examples keep their ``idx`` (row number in the split, as on the Hub) so predictions can
be written per example. Padding is dynamic (per batch) and on the right.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from transformers.trainer_pt_utils import LengthGroupedSampler

from bench.atomic import atomic_write
from bench.data.encoder_inputs import ENCODER_KEYS, SECOND_SENTENCE
from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.location import load_from_hub
from bench.data.padding import check_pad_multiple
from bench.data.pinning import pins_batches, trainer_device
from bench.data.samplers import BucketedLengthSampler
from bench.data.selection import (
    CARVES,
    DEFAULT_CARVE,
    MODES,
    SELECTION_SPLIT,
    carve_first,
    carve_selection,
)
from bench.data.tasks import GLUE_HUB_ID, SplitSource, TaskSpec
from bench.data.token_cache import cached_encode, columns_digest, tokenizer_digest
from bench.data.worker_start import worker_context
from bench.errors import ConfigError, DataError

log = logging.getLogger(__name__)

Columns = dict[str, list[Any]]
#: Pads a list of examples into a batch of tensors.
Collate = Callable[[Sequence[dict[str, Any]]], dict[str, Any]]


def load_split(spec: TaskSpec, source: SplitSource, data_dir: str | Path | None) -> Columns:
    """Load one labelled split as columns ``idx``, text fields, ``label``.

    Args:
        spec: The task.
        source: Which split.
        data_dir: A local directory in GLUE's download layout, or None for the Hub.

    Returns:
        The split's columns, labels as ids in ``spec.label_names`` order.
    """
    if data_dir is not None:
        return read_glue_tsv(glue_file(data_dir, spec, source.filename), spec)
    return _load_hub_split(spec, source)


def _load_hub_split(spec: TaskSpec, source: SplitSource) -> Columns:
    from datasets import load_dataset  # the Hub path only; importing it costs ~1.6 s

    dataset = load_from_hub(
        lambda: load_dataset(GLUE_HUB_ID, spec.hub_config, split=source.hub_split),
        f"{GLUE_HUB_ID} {spec.hub_config} {source.hub_split}",
    )
    columns: Columns = dataset.to_dict()
    if not spec.is_regression:
        hub_names = dataset.features["label"].names
        missing = set(hub_names) - set(spec.label_names)
        if missing:
            raise DataError(
                f"{GLUE_HUB_ID}/{spec.hub_config}: labels {sorted(missing)} are not among "
                f"{list(spec.label_names)}"
            )
        to_ours = [spec.label_names.index(name) for name in hub_names]  # map by name
        columns["label"] = [to_ours[label] for label in columns["label"]]
    return {key: columns[key] for key in ("idx", *spec.text_fields, "label")}


def subset(columns: Columns, size: int | None, seed: int, where: str) -> Columns:
    """Take a fixed-seed random subset of ``size`` rows (original order kept).

    Args:
        columns: The split's columns.
        size: Rows to keep; None keeps all.
        seed: The data seed (independent of the training seed).
        where: Description of the split for error messages.

    Returns:
        The subset's columns.

    Raises:
        ConfigError: If ``size`` is not positive or larger than the split.
    """
    keep = subset_indices(len(columns["idx"]), size, seed, where)
    return columns if keep is None else take(columns, keep)


def subset_indices(n: int, size: int | None, seed: int, where: str) -> np.ndarray | None:
    """The sorted row indices of :func:`subset`'s fixed-seed subset (None: all rows).

    Raises:
        ConfigError: If ``size`` is not positive or larger than the split.
    """
    if size is None:
        return None
    if not isinstance(size, int) or size < 1 or size > n:
        raise ConfigError(f"data.train_size={size!r} but {where} has {n} examples (valid: 1..{n})")
    return np.sort(np.random.default_rng(seed).permutation(n)[:size])


def take(columns: Columns, rows: np.ndarray) -> Columns:
    """The given rows of every column, in the order given."""
    return {key: [values[i] for i in rows] for key, values in columns.items()}


@dataclass
class Encoded:
    """A tokenized split: per-example features plus what truncation did."""

    examples: list[dict[str, Any]]
    n_truncated: int

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.examples[index]


def tokenize(
    tokenizer: Any,
    spec: TaskSpec,
    columns: Columns,
    max_length: int,
    where: str,
    pair_encoding: str = "cross",
) -> Encoded:
    """Tokenize a split without padding, counting truncated examples.

    Args:
        tokenizer: A fast tokenizer.
        spec: The task (which fields, regression or not).
        columns: The split's columns.
        max_length: Maximum tokens per example (special tokens included).
        where: Description of the split for the truncation warning.
        pair_encoding: ``cross``: a pair is one sequence (``tokenizer(a, b)``);
            ``siamese``: each sentence is tokenized alone, the second one's inputs under
            :data:`~bench.data.encoder_inputs.SECOND_SENTENCE` (an example counts as
            truncated when either sentence is).

    Returns:
        The encoded split.
    """
    texts = [columns[field] for field in spec.text_fields]
    if pair_encoding == "siamese":
        (first, cut_a), (second, cut_b) = (
            _tokenize_texts(tokenizer, [t], max_length, f"{where} ({field} alone)")
            for t, field in zip(texts, spec.text_fields, strict=True)
        )
        pairs = zip(_rows(first), _rows(second), strict=True)
        rows = [{**row, SECOND_SENTENCE: b} for row, b in pairs]
        n_truncated = len(cut_a | cut_b)
    else:
        enc, cut = _tokenize_texts(tokenizer, texts, max_length, where)
        rows, n_truncated = _rows(enc), len(cut)
    label_type = float if spec.is_regression else int
    examples = [
        {**row, "labels": label_type(columns["label"][i]), "idx": int(columns["idx"][i])}
        for i, row in enumerate(rows)
    ]
    return Encoded(examples, n_truncated)


def _tokenize_texts(
    tokenizer: Any, texts: list[list[str]], max_length: int, where: str
) -> tuple[dict[str, list[Any]], set[int]]:
    """Tokenize one or two text columns, truncating only the long examples; their rows too."""
    enc = dict(tokenizer(*texts, truncation=False, verbose=False))  # lengths may exceed limits
    long = [i for i, ids in enumerate(enc["input_ids"]) if len(ids) > max_length]
    if long:  # re-tokenize only the long examples, with the tokenizer's own truncation rules
        log.warning("%s: %d examples truncated to max_length=%d", where, len(long), max_length)
        cut = tokenizer(
            *[[t[i] for i in long] for t in texts], truncation=True, max_length=max_length
        )
        for key, values in enc.items():
            values = list(values)
            for j, i in enumerate(long):
                values[i] = cut[key][j]
            enc[key] = values
    return enc, set(long)


def _rows(enc: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Per example, its encoder inputs (:data:`~bench.data.encoder_inputs.ENCODER_KEYS`)."""
    keys = [k for k in ENCODER_KEYS if k in enc]
    return [{k: enc[k][i] for k in keys} for i in range(len(enc["input_ids"]))]


def order_generator(order_seed: int | None) -> torch.Generator | None:
    """The generator of the training batch order: seeded by ``order_seed``, or None (global)."""
    if order_seed is None:
        return None
    return torch.Generator().manual_seed(int(order_seed))


class SplitLoaders(L.LightningDataModule):
    """What the data modules share: arguments, load → subset → tokenize once, the loaders.

    Subclasses say how a split is read (:meth:`_load`), encoded (:meth:`_encode`) and
    batched (:meth:`_collate`).

    Args:
        spec: The task.
        tokenizer: A fast tokenizer padding on the right.
        data_dir: Local data root or None for the Hub.
        train_size: Size of the fixed-seed training subset, or None for all.
        data_seed: Seed of the subset (independent of the training seed).
        max_length: Maximum tokens per example.
        batch_size: Training batch size.
        eval_batch_size: Evaluation batch size.
        num_workers: DataLoader workers.
        group_by_length: Draw training batches of similar lengths (less padding): ``True``
            with ``transformers``' ``LengthGroupedSampler`` (random mega-batches of 50
            batches sorted by length, as the HF Trainer's ``group_by_length``), ``"bucket"``
            with :class:`~bench.data.samplers.BucketedLengthSampler` (the whole split sorted by
            a noisy length, batches shuffled: less padding still), ``False`` shuffled.
        token_cache_dir: Where tokenized splits are cached for later cells
            (:mod:`bench.data.token_cache`); None tokenizes every time.
        selection: How the epoch (and the trial) is chosen (:mod:`bench.data.selection`):
            ``{"name": "heldout", "size": n}`` carves the evaluation split ``select`` out of
            train, and the reporting splits are only served by :meth:`report_dataloaders`;
            ``{"name": "dev"}`` (or None: the old behaviour) selects on the reporting splits.
            ``"carve": "first"`` draws the slice before the training subset (nested subsets,
            one slice for every training size; :func:`~bench.data.selection.carve_first`).
        order_seed: Seed of the training batch order alone: the shuffle (or the
            length-grouped sampler) draws from a generator of its own, so the order is the
            same whatever the training seed and the model drew before. None: from torch's
            global generator, which the training seed seeds (the order then also depends on
            how many random numbers initialising the head took).
        slice_seed: The cell's seed for a selection slice of its own (``search.pairing:
            seed``; :mod:`bench.data.selection`); None: one slice per ``data_seed``.
        pad_to_multiple_of: Pad each batch the encoder reads to a multiple of this many
            tokens (``data.pad_to_multiple_of``, :mod:`bench.data.padding`): fewer distinct
            batch shapes, e.g. for CUDA graphs (``trainer.compile=reduce-overhead`` records
            one per shape). None: to the longest example of the batch. Cached splits
            (:meth:`use_splits`) are always padded to the longest example.
    """

    def __init__(
        self,
        spec: Any,
        tokenizer: Any,
        data_dir: str | Path | None,
        train_size: int | None,
        data_seed: int,
        max_length: int,
        batch_size: int,
        eval_batch_size: int,
        num_workers: int = 0,
        group_by_length: bool | str = False,
        token_cache_dir: str | Path | None = None,
        selection: Mapping[str, Any] | None = None,
        order_seed: int | None = None,
        pad_to_multiple_of: int | None = None,
        slice_seed: int | None = None,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.tokenizer = tokenizer
        self.data_dir = data_dir
        self.train_size = train_size
        self.data_seed = data_seed
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.group_by_length = group_by_length
        self.token_cache_dir = token_cache_dir
        self.selection = dict(selection or {"name": "dev"})
        self.order_seed = order_seed
        self.slice_seed = slice_seed
        self.pad_to_multiple_of = check_pad_multiple(pad_to_multiple_of)
        if self.selection.get("name") not in MODES:
            raise ConfigError(
                f"selection.name={self.selection.get('name')!r}; valid choices: {', '.join(MODES)}"
            )
        if self.carve not in CARVES:
            raise ConfigError(f"selection.carve={self.carve!r}; valid choices: {', '.join(CARVES)}")
        self.selection_ids: list[int] = []  # the slice's `idx` values (heldout)
        self.train: Any = None
        self._batch: Collate = self._collate  # see use_splits
        self.dev: dict[str, Any] = {}
        self.train_labels: list[Any] = []
        self.dev_labels: dict[str, list[Any]] = {}

    @property
    def carve(self) -> str:
        """Where the slice is carved: ``last`` (from what the subset leaves) or ``first``."""
        return str(self.selection.get("carve", DEFAULT_CARVE))

    @property
    def heldout(self) -> bool:
        """Whether a slice of train (``select``) chooses the epoch, not the reporting splits."""
        return self.selection["name"] == "heldout"

    @property
    def dev_names(self) -> list[str]:
        """The reporting splits (``dev``; MNLI ``dev_mismatched``; NER ``test``), in order."""
        return list(self.spec.dev)

    @property
    def eval_names(self) -> list[str]:
        """The splits evaluated every epoch, in dataloader order: the first selects."""
        return [SELECTION_SPLIT] if self.heldout else self.dev_names

    @property
    def report_names(self) -> list[str]:
        """The splits evaluated once, on the selected model (none when dev selects)."""
        return self.dev_names if self.heldout else []

    #: The dataclass :meth:`_encode` returns (for the tokenization cache).
    encoded_type: type = Encoded
    #: How a pair task's pairs are posed (:class:`GlueDataModule`); ``cross`` elsewhere.
    pair_encoding: str = "cross"

    def _load(self, source: SplitSource) -> Columns:
        raise NotImplementedError

    def _encode(self, columns: Columns, where: str) -> Any:
        raise NotImplementedError

    def _encode_once(self, columns: Columns, where: str, split: str) -> Any:
        """:meth:`_encode`, served from the tokenization cache when one is configured."""
        if self.token_cache_dir is None:
            return self._encode(columns, where)
        key = {
            "module": type(self).__name__,
            "tokenizer": tokenizer_digest(self.tokenizer),
            "max_length": self.max_length,
            "columns": columns_digest(columns),
        }
        if self.pair_encoding != "cross":  # keyed only when set: cross keeps its entries
            key["pair_encoding"] = self.pair_encoding
        return cached_encode(
            Path(self.token_cache_dir),
            self.spec.name,
            split,
            key,
            self.encoded_type,
            lambda: self._encode(columns, where),
        )

    def describe(self) -> dict[str, Any]:
        """Sizes and truncation counts per split for the result file."""
        raise NotImplementedError

    def _keep_dev(self, name: str, columns: Columns) -> None:
        """Hook: keep more of an evaluation split than its labels."""

    def _collate(self, batch: Sequence[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def use_splits(
        self,
        splits: Mapping[str, Dataset],
        wrap_collate: Callable[[Collate], Collate],
    ) -> None:
        """Serve other datasets for some splits, e.g. the feature cache's cached splits.

        Args:
            splits: Replacement datasets by split name (``train`` or an evaluation split),
                each holding the same examples in the same order as the split it replaces.
            wrap_collate: Turns this module's collate into the one for the new items
                (e.g. :func:`bench.cache.serve.StatesCollate`).

        Raises:
            ValueError: Before :meth:`setup`, or for a split this module does not have.
        """
        if self.train is None:
            raise ValueError("call setup() before use_splits()")
        unknown = set(splits) - {"train", *self.dev}
        if unknown:
            raise ValueError(
                f"unknown splits {sorted(unknown)}; valid: train, {', '.join(self.dev)}"
            )
        for name, dataset in splits.items():
            if name == "train":
                self.train = dataset
            else:
                self.dev[name] = dataset
        # Cached states come padded to each batch's longest example (their encoder forward
        # ran in the cache): the inputs and masks collated beside them must match that width.
        self.pad_to_multiple_of = None
        self._batch = wrap_collate(self._collate)

    def setup(self, stage: str | None = None) -> None:
        """Load, subset and tokenize every split (once)."""
        if self.train is not None:
            return
        where = f"{self.spec.name} train"
        full = self._load(self.spec.train)
        rows, select = self._carve(full["label"], where)
        if select is not None:
            columns = take(full, select)
            self.selection_ids = [int(i) for i in columns["idx"]]
            self.dev_labels[SELECTION_SPLIT] = list(columns["label"])
            self._keep_dev(SELECTION_SPLIT, columns)
            self.dev[SELECTION_SPLIT] = self._encode_once(
                columns, f"{self.spec.name} {SELECTION_SPLIT}", SELECTION_SPLIT
            )
        train = full if rows is None else take(full, rows)
        self.train_labels = list(train["label"])
        self.train = self._encode_once(train, where, "train")
        for name, source in self.spec.dev.items():
            columns = self._load(source)
            self.dev_labels[name] = list(columns["label"])
            self._keep_dev(name, columns)
            self.dev[name] = self._encode_once(columns, f"{self.spec.name} {name}", name)

    def _carve(self, labels: list[Any], where: str) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The training split's rows that train (None: all) and the selection slice's rows.

        The slice is None when dev selects; with ``carve: first`` it is drawn before the
        training subset (:func:`~bench.data.selection.carve_first`), else from what the
        subset leaves (:func:`~bench.data.selection.carve_selection`).
        """
        n, size = len(labels), self.selection.get("size")
        if self.heldout and self.carve == "first":
            return carve_first(
                labels,
                self.train_size,
                size,  # type: ignore[arg-type]  # checked there
                self.data_seed,
                self._stratify(),
                where,
                self.slice_seed,
            )
        rows = subset_indices(n, self.train_size, self.data_seed, where)
        if not self.heldout:
            return rows, None
        return carve_selection(
            labels,
            rows,
            size,  # type: ignore[arg-type]  # checked there
            self.data_seed,
            self._stratify(),
            where,
            self.slice_seed,
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled training batches, length-grouped if asked.

        The order comes from ``order_seed``'s own generator when it is set, else from the
        global one (seeded by the training seed).
        """
        assert self.train is not None, "call setup() first"
        generator = order_generator(self.order_seed)
        sampler: Any = None
        if self.group_by_length:
            lengths = _lengths(self.train)
            if self.group_by_length == "bucket":
                sampler = BucketedLengthSampler(lengths, self.batch_size, generator=generator)
            else:
                sampler = LengthGroupedSampler(
                    self.batch_size, lengths=lengths, generator=generator
                )
        return DataLoader(
            self.train,
            batch_size=self.batch_size,
            shuffle=sampler is None,
            sampler=sampler,
            generator=generator if sampler is None else None,
            **self._collation(self.train),
        )

    def _stratify(self) -> str | None:
        """How the selection slice is stratified: by class, by score bins, or not (tokens)."""
        if self.spec.kind != "sequence":
            return None
        return "bins" if self.spec.is_regression else "class"

    def _eval_loader(self, name: str) -> DataLoader:
        return DataLoader(
            self.dev[name],
            batch_size=self.eval_batch_size,
            shuffle=False,
            **self._collation(self.dev[name]),
        )

    def _collation(self, dataset: Any) -> dict[str, Any]:
        """How a split's items become batches: its own collate, or this module's.

        A resident split (:mod:`bench.cache.resident`) gathers its batches on its device,
        in this process (no worker processes). Worker processes start as
        :func:`~bench.data.worker_start.worker_context` says (inside a joblib worker too);
        batches bound for a GPU are pinned (:mod:`bench.data.pinning`).
        """
        own = getattr(dataset, "collate", None)
        if own is not None:
            return {"collate_fn": own, "num_workers": 0}
        return {
            "collate_fn": self._batch,
            "num_workers": self.num_workers,
            "multiprocessing_context": worker_context(self.num_workers),
            "pin_memory": pins_batches(trainer_device(self)),
        }

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per split evaluated every epoch (:attr:`eval_names`)."""
        return [self._eval_loader(name) for name in self.eval_names]

    def report_dataloaders(self) -> list[DataLoader]:
        """One loader per reporting split evaluated once (:attr:`report_names`)."""
        return [self._eval_loader(name) for name in self.report_names]


class GlueDataModule(SplitLoaders):
    """Training and dev data of one GLUE task, tokenized once, padded per batch.

    Arguments as :class:`SplitLoaders`; ``spec`` is a :class:`~bench.data.tasks.TaskSpec`;
    ``pair_encoding`` (a pair task's ``cross`` or ``siamese``, see :func:`tokenize`) says
    how a pair is tokenized: under ``siamese`` a batch holds the first sentences' inputs
    and, under :data:`~bench.data.encoder_inputs.SECOND_SENTENCE`, the second sentences'
    inputs, each padded on its own.
    """

    def __init__(self, *args: Any, pair_encoding: str = "cross", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pair_encoding = pair_encoding

    def _load(self, source: SplitSource) -> Columns:
        return load_split(self.spec, source, self.data_dir)

    def _encode(self, columns: Columns, where: str) -> Encoded:
        return tokenize(
            self.tokenizer, self.spec, columns, self.max_length, where, self.pair_encoding
        )

    def describe(self) -> dict[str, Any]:
        """Sizes and truncation counts per split for the result file."""
        assert self.train is not None, "call setup() first"
        return {
            "n_train": len(self.train),
            "n_dev": {n: len(d) for n, d in self.dev.items()},
            "truncated": {
                "train": self.train.n_truncated,
                **{n: d.n_truncated for n, d in self.dev.items()},
            },
        }

    def _collate(self, batch: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if SECOND_SENTENCE not in batch[0]:
            return self._pad(batch)
        out = dict(
            self._pad([{k: v for k, v in ex.items() if k != SECOND_SENTENCE} for ex in batch])
        )
        out[SECOND_SENTENCE] = dict(self._pad([ex[SECOND_SENTENCE] for ex in batch]))
        return out

    def _pad(self, batch: Sequence[dict[str, Any]]) -> Any:
        return self.tokenizer.pad(
            list(batch),
            padding=True,
            pad_to_multiple_of=self.pad_to_multiple_of,
            return_tensors="pt",
        )


def _lengths(dataset: Any) -> list[int]:
    """Each example's token count: from the split itself when it knows them (resident)."""
    if hasattr(dataset, "lengths"):
        return list(dataset.lengths())
    return [len(dataset[i]["input_ids"]) for i in range(len(dataset))]


def write_predictions(run_dir: Path, predictions: dict[str, dict[str, list[Any]]]) -> None:
    """Write ``predictions_<split>.csv`` atomically: ``idx,label,pred`` rows.

    Classification splits that kept class probabilities (a ``prob`` list per example, the
    softmax of the logits in class-id order) get one more column per class,
    ``prob_0 ... prob_<C-1>``, written as Python's shortest round-trip float text.

    Args:
        run_dir: The cell's directory.
        predictions: Per split, ``idx``, ``label`` and ``pred`` lists of equal length, and
            optionally ``prob``: one list of class probabilities per example.
    """
    for split, cols in predictions.items():

        def write(handle: Any, cols: dict[str, list[Any]] = cols) -> None:
            writer = csv.writer(handle)
            probs = cols.get("prob") or []
            classes = len(probs[0]) if probs else 0
            writer.writerow(["idx", "label", "pred", *(f"prob_{k}" for k in range(classes))])
            rows = zip(cols["idx"], cols["label"], cols["pred"], strict=True)
            if not classes:
                writer.writerows(rows)
                return
            for row, prob in zip(rows, probs, strict=True):
                writer.writerow([*row, *(repr(float(p)) for p in prob)])

        atomic_write(run_dir / f"predictions_{split}.csv", write)
