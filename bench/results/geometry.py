"""How much of a layer's word states is shared by the whole sentence (torch-free).

The evidence behind ``fair_table7``'s difference from BERT's Table 7 ordering: MiniLM
(all-MiniLM-L6-v2) was trained further so that the *mean* of its last layer's token states
embeds the sentence. If that objective pulled the last layer's word states towards their
sentence's mean, the word-specific part a tagger needs shrank there. Three figures per
layer, over the words of a fixed set of sentences (each word read at its first sub-token,
the state the token heads classify):

- ``sentence_share``: the share of the word states' total variance that lies between
  sentences, ``sum_words ||m_s - m||^2 / sum_words ||x - m||^2`` (m_s: the word's sentence
  mean, m: the mean of all words). 0: no sentence component; 1: every word of a sentence
  has the same state.
- ``word_to_sentence_cos``: the mean cosine between a word's state and its sentence's mean
  state.
- ``anisotropy``: the mean cosine between the states of random word pairs from different
  sentences (Ethayarajh, 2019): the baseline a cosine is read against.

``python -m bench.run.geometry`` computes them from the encoder and writes
``results/<experiment>/geometry.json``; this module holds the arithmetic and reads the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: The file beside an experiment's results.
GEOMETRY_FILE = "geometry.json"
#: Random cross-sentence word pairs drawn for ``anisotropy``.
N_PAIRS = 20_000
#: Columns of :func:`geometry_rows`.
GEOMETRY_COLUMNS = ["layer", "sentence_share", "word_to_sentence_cos", "anisotropy"]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def layer_geometry(
    states: np.ndarray, sentence: np.ndarray, seed: int = 0, n_pairs: int = N_PAIRS
) -> dict[str, float]:
    """The three figures of one layer.

    Args:
        states: ``(n_words, hidden)`` word states of one layer.
        sentence: ``(n_words,)`` the sentence each word belongs to (any integer ids).
        seed: Seeds the draw of the cross-sentence pairs.
        n_pairs: How many pairs to draw.

    Returns:
        ``sentence_share``, ``word_to_sentence_cos``, ``anisotropy`` (floats).

    Raises:
        ValueError: For mismatched shapes or fewer than two sentences.
    """
    x = np.asarray(states, dtype=np.float64)
    ids = np.asarray(sentence)
    if x.ndim != 2 or ids.shape != (x.shape[0],):
        raise ValueError(f"states {x.shape} and sentence ids {ids.shape} do not match")
    _, group = np.unique(ids, return_inverse=True)
    n_groups = int(group.max()) + 1 if len(group) else 0
    if n_groups < 2:
        raise ValueError(f"need words of at least two sentences, got {n_groups}")
    counts = np.bincount(group, minlength=n_groups).astype(np.float64)
    sums = np.zeros((n_groups, x.shape[1]))
    np.add.at(sums, group, x)
    means = sums / counts[:, None]
    centre = x.mean(axis=0)
    total = float(((x - centre) ** 2).sum())
    between = float((counts * ((means - centre) ** 2).sum(axis=1)).sum())
    to_mean = float((_unit(x) * _unit(means[group])).sum(axis=1).mean())
    rng = np.random.default_rng(seed)
    a = rng.integers(0, len(x), size=n_pairs)
    b = rng.integers(0, len(x), size=n_pairs)
    keep = group[a] != group[b]  # pairs from different sentences only
    pair_cos = (_unit(x[a[keep]]) * _unit(x[b[keep]])).sum(axis=1)
    return {
        "sentence_share": between / total if total > 0 else float("nan"),
        "word_to_sentence_cos": to_mean,
        "anisotropy": float(pair_cos.mean()),
    }


def read_geometry(source: str | Path) -> dict[str, Any] | None:
    """The committed ``geometry.json`` of a results directory, or None when absent.

    Args:
        source: ``results/<experiment>``.

    Returns:
        The file's contents.
    """
    path = Path(source) / GEOMETRY_FILE
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def geometry_rows(data: dict[str, Any]) -> pd.DataFrame:
    """One row per layer (:data:`GEOMETRY_COLUMNS`), ordered by layer.

    Args:
        data: A ``geometry.json`` payload.

    Returns:
        The per-layer figures.
    """
    rows = [{"layer": int(k), **v} for k, v in data["layers"].items()]
    return pd.DataFrame(rows, columns=GEOMETRY_COLUMNS).sort_values("layer", ignore_index=True)
