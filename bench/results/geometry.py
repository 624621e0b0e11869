"""How much of a layer's word states the sentence shares (``python -m bench.run.geometry``)."""

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


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def layer_geometry(
    states: np.ndarray, sentence: np.ndarray, seed: int = 0, n_pairs: int = N_PAIRS
) -> dict[str, float]:
    """The three figures of one layer over its words (each read at its first sub-token).

    ``sentence_share``: the between-sentence share of the variance (1: every word is its
    sentence mean); ``word_to_sentence_cos``: the mean cosine of a word and its sentence mean;
    ``anisotropy``: that of random word pairs from different sentences (Ethayarajh, 2019).

    Args:
        states: ``(n_words, hidden)`` word states of one layer.
        sentence: ``(n_words,)`` the sentence each word belongs to (any integer ids).
        seed: Seeds the draw of the cross-sentence pairs.
        n_pairs: How many pairs to draw.

    Raises:
        ValueError: For mismatched shapes or fewer than two sentences.
    """
    x, ids = np.asarray(states, dtype=np.float64), np.asarray(sentence)
    if x.ndim != 2 or ids.shape != (x.shape[0],):
        raise ValueError(f"states {x.shape} and sentence ids {ids.shape} do not match")
    if (n_sentences := len(np.unique(ids))) < 2:
        raise ValueError(f"need words of at least two sentences, got {n_sentences}")
    means = pd.DataFrame(x).groupby(ids).transform("mean").to_numpy()  # each word's sentence
    centre = x.mean(axis=0)
    total = float(((x - centre) ** 2).sum())
    between = float(((means - centre) ** 2).sum())
    to_mean = float((_unit(x) * _unit(means)).sum(axis=1).mean())
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, len(x), size=(2, n_pairs))
    keep = ids[a] != ids[b]  # pairs from different sentences only
    pair_cos = (_unit(x[a[keep]]) * _unit(x[b[keep]])).sum(axis=1)
    return {
        "sentence_share": between / total if total > 0 else float("nan"),
        "word_to_sentence_cos": to_mean,
        "anisotropy": float(pair_cos.mean()),
    }


def read_geometry(source: str | Path) -> dict[str, Any] | None:
    """The committed ``geometry.json`` of ``source`` (``results/<experiment>``), or None."""
    path = Path(source) / GEOMETRY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def geometry_rows(data: dict[str, Any]) -> pd.DataFrame:
    """One row per layer of a ``geometry.json`` payload: ``layer`` and its three figures."""
    columns = ["layer", "sentence_share", "word_to_sentence_cos", "anisotropy"]
    rows = [{"layer": int(k), **v} for k, v in data["layers"].items()]
    return pd.DataFrame(rows, columns=columns).sort_values("layer", ignore_index=True)
