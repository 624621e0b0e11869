"""Published reference numbers (``references.csv``), loaded and validated.

One row per number as printed (percent): source, link, headbench encoder, setting
(``finetune`` or a BERT Table 7 layer choice), split, metric, a note on what was verified.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

KEY = ["encoder", "task", "setting", "split", "metric"]
COLUMNS = ["source", "url", "model", *KEY, "value", "note"]
METRICS = frozenset({"accuracy", "f1", "mcc", "pearson", "spearman", "precision", "recall"})


def load_references(path: str | Path | None = None) -> pd.DataFrame:
    """Read and validate a reference CSV (default: the package's), ``value`` as float percent.

    Raises:
        ValueError: On missing columns, empty fields (``note`` may be empty), values that
            are not numbers in [0, 100], unknown metrics, or duplicate keys.
    """
    source = resources.files("bench.results") / "references.csv" if path is None else Path(path)
    with source.open(encoding="utf-8") as fh:
        refs = pd.read_csv(fh, dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in refs]
    if missing:
        raise ValueError(f"references lack columns {missing}")
    refs, values = refs[COLUMNS], pd.to_numeric(refs["value"], errors="coerce")
    empty = (refs.drop(columns="note").apply(lambda c: c.str.strip()) == "").any(axis=1)
    problems = {
        "an empty field": empty,
        "a value not a percentage": ~values.between(0, 100),
        f"an unknown metric (known: {sorted(METRICS)})": ~refs["metric"].isin(METRICS),
        f"a duplicate {KEY}": refs.duplicated(subset=KEY, keep=False),
    }
    for problem, bad in problems.items():
        if bad.any():
            raise ValueError(f"references: {problem} in rows {list(refs.index[bad])}")
    return refs.assign(value=values.astype(float))


def lookup(
    refs: pd.DataFrame, encoder: str, task: str, setting: str, split: str = "dev"
) -> pd.DataFrame:
    """The rows of :func:`load_references` for one encoder, task, setting and split."""
    return refs[(refs[KEY[:4]] == [encoder, task, setting, split]).all(axis=1)]
