"""Was each head's search adequate? One verdict per setting × head, from the cells' records.

A run of a searched option *picks an edge* when its selected value is the lowest or highest
of an ordered numeric option with at least :data:`MIN_VALUES` values in its grid (0 of an
option in :data:`HARD_BOUNDS` is never an edge: nothing lies below it). A run is *unstopped*
when it ended at ``max_epochs`` without early stopping: its record says so
(``selection.stopped_early`` false), or, where it does not say, its selected epoch is the
last one. A setting × head is flagged (``adequate`` false) when :data:`EDGE_SEEDS` or more of
its runs (all of them, where it has fewer) pick an edge of one option, or are unstopped; the
optimum may then lie outside what the search tried. Other options (categorical ones, grids
of two values) are counted, never flagged. ``docs/statistics.md`` ("Adequacy").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from numbers import Real
from typing import Any

import pandas as pd

from bench.results import stats

#: Where heads are compared (the scores frame's setting) and the head: one verdict each.
KEYS = [*stats.SETTING_KEYS, "head_label"]
#: Options whose lowest possible value is a hard bound, never an edge.
HARD_BOUNDS = {"weight_decay": 0.0, "warmup_ratio": 0.0, "dropout": 0.0}
#: Values an ordered numeric option needs in its grid for its ends to be edges.
MIN_VALUES = 3
#: Runs of a setting × head at an edge (or unstopped) that flag it (all runs, if fewer).
EDGE_SEEDS = 3
#: The pseudo-option of a run's selected epoch, ``<epoch>/<max_epochs>`` counted from 1; its
#: edge: the run ended at ``max_epochs`` without early stopping.
EPOCHS = "epoch"
#: The columns :func:`adequacy` adds to the scores frame.
COLUMNS = ["adequate", "edge"]


def setting_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """A cell record's setting (training size: the cell's, else its config's; all: 0)."""
    cell, data = record.get("cell") or {}, (record.get("config") or {}).get("data") or {}
    size = cell.get("train_size", data.get("train_size")) or stats.WHOLE_SPLIT
    return {k: str(cell.get(k)) for k in stats.SETTING_KEYS[:3]} | {"train_size": int(size)}


def _numeric(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def is_edge(option: str, value: Any, grid: Iterable[Any]) -> bool | None:
    """Whether ``value`` is an edge of ``option``'s grid; None: not ordered numeric, 3+ values.

    Args:
        option: The searched key (``frozen_head_lr``, ``weight_decay``, ...).
        value: The value a run selected.
        grid: The values the search declared for it.
    """
    values = list(grid)
    if len(set(values)) < MIN_VALUES or not all(map(_numeric, [*values, value])):
        return None
    bound = HARD_BOUNDS.get(option.rsplit(".", 1)[-1])
    return value in (min(values), max(values)) and value != bound


def unstopped(best_epoch: Any, max_epochs: Any, stopped_early: Any = None) -> bool | None:
    """Whether a run ended at ``max_epochs`` without early stopping; None: not recorded.

    Args:
        best_epoch: Its selected epoch, counted from 0.
        max_epochs: Its epoch limit.
        stopped_early: Whether early stopping ended it (None: not recorded; then the
            selected epoch being the last one says it).
    """
    if isinstance(stopped_early, bool):
        return not stopped_early
    if not _numeric(best_epoch) or not _numeric(max_epochs):
        return None
    return bool(best_epoch >= max_epochs - 1)


def choices(cells: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per ``ok`` run × searched option (and :data:`EPOCHS`): its value and edge.

    Args:
        cells: ``cells.json`` records (or ``result.json`` contents).

    Returns:
        :data:`KEYS`, ``seed``, ``order_seed``, ``option``, ``value`` and ``edge`` (True,
        False, or None where the option is not checked: counted only).
    """
    rows = []
    for record in cells:
        if record.get("status", "ok") != "ok":
            continue
        config, found = record.get("config") or {}, record.get("search") or {}
        cell, selection = record.get("cell") or {}, record.get("selection") or {}
        family = found.get("family") or (
            "frozen" if (config.get("freeze") or {}).get("name") == "frozen" else "finetune"
        )
        space = ((config.get("search") or {}).get("space") or {}).get(family) or {}
        run = setting_of(record) | {"head_label": str(cell.get("head_label"))}
        key = dict(zip(stats.RUN_KEYS, stats.run_key(dict(cell)), strict=True))
        run |= {k: key[k] for k in stats.PAIR_KEYS}
        picks = [
            (k, v, is_edge(k, v, space.get(k, [])))
            for k, v in (found.get("selected_config") or {}).items()
        ]
        epochs = (config.get("trainer") or {}).get("max_epochs")
        best: Any = selection.get("best_epoch", (record.get("best") or {}).get("epoch"))
        stop = selection.get("stopped_early", record.get("stopped_early"))
        if (late := unstopped(best, epochs, stop)) is not None:
            selected = f"{int(best) + 1}" if _numeric(best) else "?"
            picks.append((EPOCHS, f"{selected}/{epochs}", late))
        rows += [run | {"option": k, "value": v, "edge": e} for k, v, e in picks]
    columns = [*KEYS, *stats.PAIR_KEYS, "option", "value", "edge"]
    return pd.DataFrame(rows, columns=columns)


def _value(value: Any) -> str:
    return f"{value:g}" if _numeric(value) else str(value)


def _verdict(runs: pd.DataFrame) -> dict[str, Any]:
    """One setting × head's ``runs``, ``adequate``, ``edge`` and ``counts`` from its picks."""
    n = len(runs.drop_duplicates(stats.PAIR_KEYS))
    counts, edges = [], []
    for option, rows in runs.groupby("option", sort=False):
        seen = rows["shown"].value_counts()  # most picked first
        counts.append(f"{option}: " + ", ".join(f"{v} ×{k}" for v, k in seen.items()))
        at = rows.loc[rows["edge"].eq(True), "shown"]
        if len(at) >= min(EDGE_SEEDS, n):
            edges += [f"{option}={v} ×{k}" for v, k in at.value_counts().items()]
    return {"runs": n, "adequate": not edges, "edge": ", ".join(edges), "counts": "; ".join(counts)}


def adequacy(cells: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Per setting × head: ``runs``, ``adequate``, ``edge`` and ``counts`` of every choice.

    ``edge`` names each flagged option's edge values and how many runs picked them
    (``frozen_head_lr=0.03 ×10``; ``epoch=3/3 ×9``: runs unstopped at their last epoch), ""
    where adequate; ``counts`` every option's selected values (``weight_decay: 0 ×6, 0.01 ×4``).
    """
    picks = choices(cells)
    picks["shown"] = picks["value"].map(_value)
    rows = [dict(zip(KEYS, k, strict=True)) | _verdict(g) for k, g in picks.groupby(KEYS)]
    return pd.DataFrame(rows, columns=[*KEYS, "runs", *COLUMNS, "counts"])


def with_adequacy(scores: pd.DataFrame, cells: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """``scores`` with :data:`COLUMNS` (NA where no record tells: no search, no epochs)."""
    found = adequacy(cells)[[*KEYS, *COLUMNS]]
    found = found.astype({"train_size": "int64", "adequate": "boolean"})
    merged = scores.drop(columns=COLUMNS, errors="ignore").merge(found, on=KEYS, how="left")
    return merged.set_axis(scores.index).astype({"adequate": "boolean"})


def summary(frame: pd.DataFrame) -> str | None:
    """One line: how many setting × head were checked and flagged (None: none was checked)."""
    known = frame[frame["adequate"].notna()]
    if known.empty:
        return None
    flagged = int((~known["adequate"].astype(bool)).sum())
    return (
        f"adequacy: {flagged} of {len(known)} setting × head flagged ({EDGE_SEEDS} or more "
        f"runs, or all of fewer, at a grid edge or ending at max_epochs without early stopping)"
    )


def flagged_lines(frame: pd.DataFrame) -> list[str]:
    """One line per flagged setting × head: ``task/encoder/head/freeze (N examples): edge``."""
    bad = frame[frame["adequate"].eq(False)]
    return [
        f"{stats.setting_name(row)} ({row['train_size'] or 'all'} examples): {row['edge']}"
        for _, row in bad.iterrows()
    ]
