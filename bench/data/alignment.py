"""Word ↔ sub-token alignment for token classification (the BERT paper's setup).

A word's label sits on its first sub-token; the other sub-tokens (and the special
tokens) get :data:`IGNORE` and never reach the loss or the scores. Predictions are read
back at the same first sub-tokens, so every word gets exactly one prediction. Works for
WordPiece and for byte-level BPE, whose tokenizers must add a prefix space to each word
(:func:`prepare_tokenizer`), as RoBERTa's tokenizer does inside a sentence.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer

IGNORE = -100  # the label of sub-tokens that are not scored (PyTorch's ignore_index)


def _set_prefix_space(node: Any) -> bool:
    """Switch on ``add_prefix_space`` in every ByteLevel pre-tokenizer of a JSON tree."""
    changed = False
    if isinstance(node, dict):
        if node.get("type") == "ByteLevel" and node.get("add_prefix_space") is False:
            node["add_prefix_space"] = True
            changed = True
        for value in node.values():
            changed |= _set_prefix_space(value)
    elif isinstance(node, list):
        for value in node:
            changed |= _set_prefix_space(value)
    return changed


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Make a fast tokenizer encode pre-split words as it encodes them inside a sentence.

    Byte-level BPE (RoBERTa, GPT-2) marks a word that follows a space with ``Ġ``; words
    passed one by one (``is_split_into_words=True``) only get that mark with
    ``add_prefix_space=True``. Some tokenizers ignore that keyword when loaded from a
    ``tokenizer.json`` alone, so the backend's pre-tokenizer is switched directly.
    WordPiece tokenizers are returned unchanged.

    Args:
        tokenizer: A ``transformers`` fast tokenizer.

    Returns:
        The same tokenizer object, changed in place where needed.
    """
    backend = tokenizer.backend_tokenizer
    state = json.loads(backend.to_str())
    if _set_prefix_space(state.get("pre_tokenizer")):
        backend.pre_tokenizer = Tokenizer.from_str(json.dumps(state)).pre_tokenizer
    if hasattr(tokenizer, "add_prefix_space"):
        tokenizer.add_prefix_space = True
    return tokenizer


def align_labels(
    word_ids: Sequence[int | None], word_labels: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Put each word's label on its first sub-token.

    Args:
        word_ids: For every sub-token, the index of its word (None for special tokens),
            as returned by a fast tokenizer's ``word_ids()``.
        word_labels: One label id per word.

    Returns:
        ``(token_labels, word_pos)``: a label per sub-token (:data:`IGNORE` except on
        first sub-tokens) and, per word, the position of its first sub-token (-1 for a
        word with no sub-token, e.g. cut off by truncation).
    """
    token_labels = [IGNORE] * len(word_ids)
    word_pos = [-1] * len(word_labels)
    previous: int | None = None
    for position, word in enumerate(word_ids):
        if word is not None and word != previous:
            token_labels[position] = word_labels[word]
            word_pos[word] = position
        previous = word
    return token_labels, word_pos


def word_predictions(
    token_predictions: Sequence[int], word_pos: Sequence[int], missing: int
) -> list[int]:
    """Read one prediction per word at its first sub-token.

    Args:
        token_predictions: A prediction per sub-token.
        word_pos: Per word, the position of its first sub-token, or -1.
        missing: The prediction of a word without sub-tokens (the ``O`` tag).

    Returns:
        One prediction per word.
    """
    return [token_predictions[p] if p >= 0 else missing for p in word_pos]
