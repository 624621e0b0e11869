"""Learning curves: settings run at several training sizes (``WHOLE_SPLIT``: all of it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from bench.results.stats import WHOLE_SPLIT

CURVE_KEYS = ["task", "encoder", "freeze_label"]


def whole_number(train_size: object) -> int:
    """A training size as an integer; None/NA (the whole split) is ``WHOLE_SPLIT``."""
    return WHOLE_SPLIT if pd.isna(train_size) else int(train_size)  # type: ignore[call-overload]


def size_key(train_size: object) -> float:
    """Sort key of a training size: the number, the whole training split last."""
    return float("inf") if (size := whole_number(train_size)) == WHOLE_SPLIT else float(size)


def size_text(train_size: object) -> str:
    """``400 examples``, ``1 example`` or ``whole training split``."""
    size = whole_number(train_size)
    return "whole training split" if size == WHOLE_SPLIT else f"{size:,} example{'s' * (size != 1)}"


def sized_settings(frame: pd.DataFrame) -> frozenset[tuple[str, str, str]]:
    """The (task, encoder, freeze_label) of ``frame`` with two or more training sizes."""
    if frame.empty or "train_size" not in frame:
        return frozenset()
    sizes = frame[CURVE_KEYS].astype(str).assign(size=frame["train_size"].map(whole_number))
    counts = sizes.groupby(CURVE_KEYS)["size"].nunique()
    return frozenset(keys for keys, n in counts.items() if n > 1)


def split_by_size(
    frame: pd.DataFrame, keys: Sequence[str]
) -> list[tuple[tuple[Any, ...], int | None, pd.DataFrame]]:
    """``(group keys, size or None, rows)`` per group of ``keys``, split by size where sized."""
    if list(keys) != CURVE_KEYS[: len(keys)]:
        raise ValueError(f"keys={list(keys)}: must be a prefix of {CURVE_KEYS}")
    split = {setting[: len(keys)] for setting in sized_settings(frame)}
    out: list[tuple[tuple[Any, ...], int | None, pd.DataFrame]] = []
    for values, group in frame.groupby(list(keys), sort=True):
        if tuple(map(str, values)) in split:
            sizes = group["train_size"].map(whole_number)
            out += [(values, s, group[sizes == s]) for s in sorted(set(sizes), key=size_key)]
        else:
            out.append((values, None, group))
    return out
