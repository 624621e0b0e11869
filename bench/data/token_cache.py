"""On-disk cache of tokenized splits, reused by every cell of a sweep.

A split is tokenized once per (tokenizer, task, split, max_length, split content): the
key hashes the tokenizer (vocabulary and rules) and the split's columns, so a subset, a
data seed or an edited data file is a different entry. An entry is one ``.npz`` file:
each list-valued field of the examples as flat int64 values plus per-example lengths,
each scalar field as an array, and the split's counters (truncation...) as JSON. Files
are published atomically (temp file in the same directory, then ``os.replace``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from bench.atomic import atomic_write

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
E = TypeVar("E")


def columns_digest(columns: dict[str, list[Any]]) -> str:
    """Content hash of a split's columns (texts, labels, ids)."""
    text = json.dumps(columns, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def entry_path(root: Path, task: str, split: str, key: dict[str, Any]) -> Path:
    """``<root>/<task>/<split>-<hash of key>.npz``."""
    digest = hashlib.sha256(json.dumps({"format": FORMAT_VERSION, **key}, sort_keys=True).encode())
    return root / task / f"{split}-{digest.hexdigest()[:32]}.npz"


def save_encoded(path: Path, encoded: Any) -> None:
    """Write an encoded split (a dataclass holding ``examples``) as one ``.npz``, atomically."""
    examples = encoded.examples
    arrays: dict[str, np.ndarray] = {}
    lists, scalars = [], []
    for field, value in examples[0].items() if examples else []:
        if isinstance(value, list):
            lists.append(field)
            arrays[f"{field}.lengths"] = np.array([len(ex[field]) for ex in examples], np.int64)
            arrays[f"{field}.values"] = np.concatenate(
                [np.asarray(ex[field], dtype=np.int64) for ex in examples]
            )
        else:
            scalars.append(field)
            arrays[f"{field}.scalar"] = np.array([ex[field] for ex in examples])
    meta = {
        "lists": lists,
        "scalars": scalars,
        "n": len(examples),
        "fields": {
            f.name: getattr(encoded, f.name)
            for f in dataclasses.fields(encoded)
            if f.name != "examples"
        },
    }
    arrays["meta"] = np.array(json.dumps(meta))
    atomic_write(path, lambda handle: np.savez(handle, **arrays), binary=True)  # type: ignore[arg-type]


def load_encoded(path: Path, cls: type[E]) -> E | None:
    """Read an entry back as ``cls`` (or None if missing or damaged; a damaged one is removed)."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            n = meta["n"]
            columns: dict[str, list[Any]] = {}
            for field in meta["lists"]:
                lengths = data[f"{field}.lengths"]
                values = data[f"{field}.values"].tolist()
                ends = np.cumsum(lengths).tolist()
                starts = [0, *ends[:-1]]
                columns[field] = [values[s:e] for s, e in zip(starts, ends, strict=True)]
            for field in meta["scalars"]:
                columns[field] = data[f"{field}.scalar"].tolist()
        if any(len(col) != n for col in columns.values()):
            raise ValueError("columns of different lengths")
        fields = list(columns)
        examples = [
            dict(zip(fields, row, strict=True)) for row in zip(*columns.values(), strict=True)
        ]
        return cls(examples=examples, **meta["fields"])  # type: ignore[call-arg]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, json.JSONDecodeError) as err:
        log.warning("tokenization cache entry %s is damaged (%s); rebuilding it", path, err)
        path.unlink(missing_ok=True)
        return None


def cached_encode(
    root: Path | None,
    task: str,
    split: str,
    key: dict[str, Any],
    cls: type[E],
    encode: Callable[[], E],
) -> E:
    """Return the cached encoding of a split, encoding and saving it on a miss.

    Args:
        root: Cache directory, or None to always encode.
        task: Task name (a sub-directory).
        split: Split name.
        key: Everything that changes the encoding (tokenizer hash, max_length, columns hash).
        cls: The encoded split's dataclass.
        encode: Tokenizes the split.

    Returns:
        The encoded split.
    """
    if root is None:
        return encode()
    path = entry_path(root, task, split, key)
    encoded = load_encoded(path, cls)
    if encoded is None:
        encoded = encode()
        save_encoded(path, encoded)
    return encoded


def tokenizer_digest(tokenizer: Any) -> str:
    """Content hash of a tokenizer: its class, vocabulary/rules and special tokens."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # without the call-time truncation/padding state the last call left
        spec = {
            k: v
            for k, v in json.loads(backend.to_str()).items()
            if k not in ("truncation", "padding")
        }
        h.update(json.dumps(spec, sort_keys=True).encode())
    else:  # a slow tokenizer: the vocabulary is what defines it
        h.update(json.dumps(tokenizer.get_vocab(), sort_keys=True).encode())
    h.update(json.dumps(getattr(tokenizer, "special_tokens_map", {}), sort_keys=True).encode())
    h.update(str(getattr(tokenizer, "padding_side", "right")).encode())
    return h.hexdigest()
