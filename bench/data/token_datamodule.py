"""The token-classification ``LightningDataModule``: CoNLL-2003 from local files or the Hub.

Sentences keep their ``idx`` (position in the split). Each example carries the
encoder inputs plus ``word_pos`` (first sub-token of each word, -1 where truncation cut
the word off) and ``word_labels`` (one tag id per word), padded per batch. Words that
a tokenizer turns into no sub-token at all (e.g. a lone soft hyphen under BERT's
WordPiece) are replaced by the unknown token, so every word is scored; both this and
truncation are counted and reported, never silent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.atomic import atomic_write
from bench.data.alignment import IGNORE, align_labels, prepare_tokenizer
from bench.data.conll import conll_file, is_valid_iob2, read_conll
from bench.data.encoder_inputs import ENCODER_KEYS
from bench.data.location import load_from_hub
from bench.data.sequence_datamodule import Columns, Encoded, SplitLoaders
from bench.data.tasks import SplitSource, TokenTaskSpec
from bench.errors import DataError

log = logging.getLogger(__name__)


def load_token_split(
    spec: TokenTaskSpec, source: SplitSource, data_dir: str | Path | None
) -> Columns:
    """Load one split as columns ``idx``, ``tokens`` (words), ``label`` (tag ids per word).

    Args:
        spec: The task.
        source: Which split.
        data_dir: A local directory holding ``<spec.local_dir>/*.txt``, or None for the Hub.

    Returns:
        The split's columns, tags mapped by name to ``spec.label_names`` ids.
    """
    if data_dir is not None:
        return read_conll(conll_file(data_dir, spec, source.filename), spec)
    return _load_hub_split(spec, source)


def _load_hub_split(spec: TokenTaskSpec, source: SplitSource) -> Columns:
    from datasets import load_dataset  # the Hub path only; importing it costs ~1.6 s

    where = f"{spec.hub_id}@{spec.hub_revision} {source.hub_split}"
    dataset = load_from_hub(
        lambda: load_dataset(spec.hub_id, revision=spec.hub_revision, split=source.hub_split),
        where,
    )
    feature = dataset.features[spec.hub_tags_column]
    hub_names = list(getattr(getattr(feature, "feature", None), "names", None) or [])
    missing = set(hub_names) - set(spec.label_names)
    if not hub_names or missing:
        raise DataError(
            f"{where}: column {spec.hub_tags_column!r} has tag names {hub_names}; "
            f"expected names among {list(spec.label_names)}"
        )
    to_ours = [spec.label_names.index(name) for name in hub_names]  # map by name
    tokens = dataset["tokens"]
    labels = [[to_ours[t] for t in tags] for tags in dataset[spec.hub_tags_column]]
    for row, tags in enumerate(labels):
        if not is_valid_iob2([spec.label_names[t] for t in tags]):
            raise DataError(f"{where}: row {row} is not valid IOB2")
    keep = [i for i, words in enumerate(tokens) if words]  # the loader keeps no empty rows
    return {
        "idx": list(range(len(keep))),
        "tokens": [list(tokens[i]) for i in keep],
        "label": [labels[i] for i in keep],
    }


@dataclass
class TokenEncoded(Encoded):
    """A tokenized token-classification split and what alignment had to do.

    Attributes:
        words_cut: Words that truncation left without a sub-token (predicted ``O``).
        empty_words: Words the tokenizer mapped to nothing, replaced by the unknown token.
    """

    words_cut: int = 0
    empty_words: int = 0


def _encode(tokenizer: Any, words: list[list[str]], max_length: int | None) -> Any:
    truncation = max_length is not None
    return tokenizer(words, is_split_into_words=True, truncation=truncation, max_length=max_length)


def encode_words(tokenizer: Any, columns: Columns, max_length: int, where: str) -> TokenEncoded:
    """Tokenize pre-split sentences, align word labels, count truncation.

    Args:
        tokenizer: A fast tokenizer prepared by :func:`bench.data.alignment.prepare_tokenizer`.
        columns: ``idx``, ``tokens``, ``label`` of a split.
        max_length: Maximum sub-tokens per sentence (special tokens included).
        where: Description of the split for warnings.

    Returns:
        The encoded split.
    """
    words = [list(sentence) for sentence in columns["tokens"]]
    enc = _encode(tokenizer, words, None)
    empty = 0
    for i in range(len(words)):  # replace words that produce no sub-token
        present = {w for w in enc.word_ids(i) if w is not None}
        for w in range(len(words[i])):
            if w not in present:
                words[i][w] = tokenizer.unk_token
                empty += 1
    if empty:
        log.warning(
            "%s: %d words had no sub-token; replaced by %s", where, empty, tokenizer.unk_token
        )
        enc = _encode(tokenizer, words, None)
    long = [i for i, ids in enumerate(enc["input_ids"]) if len(ids) > max_length]
    cut = _encode(tokenizer, [words[i] for i in long], max_length) if long else None
    in_cut = {i: j for j, i in enumerate(long)}
    examples: list[dict[str, Any]] = []
    words_cut = 0
    for i, labels in enumerate(columns["label"]):
        source, j = (cut, in_cut[i]) if i in in_cut else (enc, i)
        assert source is not None  # `cut` exists whenever a sentence is in it
        _, word_pos = align_labels(source.word_ids(j), labels)
        words_cut += word_pos.count(-1)
        example = {k: source[k][j] for k in ENCODER_KEYS if k in source}
        example.update(word_pos=word_pos, word_labels=list(labels), idx=int(columns["idx"][i]))
        examples.append(example)
    if long:
        log.warning(
            "%s: %d sentences truncated to max_length=%d; %d words get no prediction (scored O)",
            where,
            len(long),
            max_length,
            words_cut,
        )
    return TokenEncoded(examples, len(long), words_cut=words_cut, empty_words=empty)


def collate_words(
    tokenizer: Any, batch: Sequence[dict[str, Any]], pad_to_multiple_of: int | None = None
) -> dict[str, torch.Tensor]:
    """Pad encoder inputs with the tokenizer, ``word_pos`` with -1, ``word_labels`` with -100.

    Args:
        tokenizer: The tokenizer (right padding).
        batch: Examples from :func:`encode_words`.
        pad_to_multiple_of: Pad the encoder inputs to a multiple of this many tokens
            (:mod:`bench.data.padding`); None: to the longest sentence of the batch.

    Returns:
        Tensors: encoder inputs (B, T), ``word_pos`` and ``word_labels`` (B, W), ``idx`` (B,).
    """
    inputs = [{k: ex[k] for k in ENCODER_KEYS if k in ex} for ex in batch]
    out = dict(
        tokenizer.pad(
            inputs, padding=True, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt"
        )
    )
    width = max(len(ex["word_pos"]) for ex in batch)
    out["word_pos"] = torch.tensor(
        [ex["word_pos"] + [-1] * (width - len(ex["word_pos"])) for ex in batch]
    )
    out["word_labels"] = torch.tensor(
        [ex["word_labels"] + [IGNORE] * (width - len(ex["word_labels"])) for ex in batch]
    )
    out["idx"] = torch.tensor([ex["idx"] for ex in batch])
    return out


class TokenDataModule(SplitLoaders):
    """Training and evaluation data of a token task, tokenized once, padded per batch.

    Same arguments as :class:`bench.data.sequence_datamodule.GlueDataModule`; evaluation
    splits are the task's ``dev`` mapping (``dev`` selects the best epoch, ``test`` is
    reported there).
    """

    encoded_type = TokenEncoded

    def __init__(self, spec: TokenTaskSpec, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(spec, prepare_tokenizer(tokenizer), *args, **kwargs)
        self.dev_tokens: dict[str, list[list[str]]] = {}

    def _load(self, source: SplitSource) -> Columns:
        return load_token_split(self.spec, source, self.data_dir)

    def _encode(self, columns: Columns, where: str) -> TokenEncoded:
        return encode_words(self.tokenizer, columns, self.max_length, where)

    def _keep_dev(self, name: str, columns: Columns) -> None:
        self.dev_tokens[name] = list(columns["tokens"])

    def describe(self) -> dict[str, Any]:
        """Sizes and alignment counts per split for the result file."""
        assert self.train is not None, "call setup() first"
        splits = {"train": self.train, **self.dev}
        return {
            "n_train": len(self.train),
            "n_dev": {n: len(d) for n, d in self.dev.items()},
            "truncated": {n: d.n_truncated for n, d in splits.items()},
            "words_cut": {n: d.words_cut for n, d in splits.items()},
            "empty_words": {n: d.empty_words for n, d in splits.items()},
        }

    def _collate(self, batch: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return collate_words(self.tokenizer, batch, self.pad_to_multiple_of)


def write_word_predictions(
    run_dir: Path,
    predictions: dict[str, dict[str, list[Any]]],
    tokens: dict[str, list[list[str]]],
    label_names: Sequence[str],
) -> None:
    """Write ``predictions_<split>.txt`` atomically: ``word gold pred`` lines (conlleval input).

    Args:
        run_dir: The cell's directory.
        predictions: Per split, ``idx`` and per-sentence ``label`` and ``pred`` tag ids.
        tokens: Per split, the words of every sentence, by ``idx``.
        label_names: Tag names.
    """
    for split, cols in predictions.items():

        def write(handle: Any, cols: dict[str, list[Any]] = cols, split: str = split) -> None:
            for idx, gold, pred in zip(cols["idx"], cols["label"], cols["pred"], strict=True):
                words = tokens[split][idx]
                for word, g, p in zip(words, gold, pred, strict=True):
                    handle.write(f"{word} {label_names[g]} {label_names[p]}\n")
                handle.write("\n")

        atomic_write(run_dir / f"predictions_{split}.txt", write)
