"""Published reference numbers (``bench/results/references.csv``), loaded and validated.

Each row is one number as printed in its source (in percent), with the source, a link,
the encoder name as headbench's config calls it, the setting (``finetune`` or a BERT
Table 7 layer choice), split and metric, and a note saying what was and was not verified.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

COLUMNS = [
    "source",
    "url",
    "model",
    "encoder",
    "task",
    "setting",
    "split",
    "metric",
    "value",
    "note",
]
KEY = ["encoder", "task", "setting", "split", "metric"]
METRICS = frozenset({"accuracy", "f1", "mcc", "pearson", "spearman", "precision", "recall"})


def load_references(path: str | Path | None = None) -> pd.DataFrame:
    """Read and validate the reference table.

    Args:
        path: A CSV file; default the ``references.csv`` shipped inside the package.

    Returns:
        The references, ``value`` as float (percent as published).

    Raises:
        ValueError: On missing columns, empty fields (``note`` may be empty), values that
            are not numbers in [0, 100], unknown metrics, or duplicate keys.
    """
    if path is None:
        with (
            resources.files("bench.results").joinpath("references.csv").open(encoding="utf-8") as fh
        ):
            refs = pd.read_csv(fh, dtype=str, keep_default_na=False)
    else:
        refs = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in refs]
    if missing:
        raise ValueError(f"references lack columns {missing}")
    refs = refs[COLUMNS].copy()
    for column in COLUMNS:
        if column == "note":
            continue
        empty = refs[column].str.strip() == ""
        if empty.any():
            raise ValueError(f"references: empty {column!r} in rows {list(refs.index[empty])}")
    values = pd.to_numeric(refs["value"], errors="coerce")
    bad = values.isna() | (values < 0) | (values > 100)
    if bad.any():
        raise ValueError(f"references: value not a percentage in rows {list(refs.index[bad])}")
    refs["value"] = values.astype(float)
    unknown = sorted(set(refs["metric"]) - METRICS)
    if unknown:
        raise ValueError(f"references: unknown metrics {unknown}")
    dup = refs.duplicated(subset=KEY, keep=False)
    if dup.any():
        raise ValueError(f"references: duplicate {KEY} in rows {list(refs.index[dup])}")
    return refs


def lookup(
    refs: pd.DataFrame, encoder: str, task: str, setting: str, split: str = "dev"
) -> pd.DataFrame:
    """The reference rows for one encoder/task/setting/split (any metric).

    Args:
        refs: Output of :func:`load_references`.
        encoder: Encoder config name (``roberta_base``).
        task: Task name.
        setting: ``finetune`` or a Table 7 layer choice.
        split: Split name.

    Returns:
        The matching rows (possibly empty).
    """
    mask = (
        (refs["encoder"] == encoder)
        & (refs["task"] == task)
        & (refs["setting"] == setting)
        & (refs["split"] == split)
    )
    return refs[mask]
