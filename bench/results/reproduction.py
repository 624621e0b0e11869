"""Does a re-run reproduce a committed experiment? Re-run cells beside the committed ones.

:func:`compare` sets the cells ``python -m bench.run.selfcheck`` re-trained beside the committed
results (the reporting split's main metric), as two frames: per cell, the committed value,
today's, their difference and the predictions that changed; per head and setting, the
committed mean over all its seeds with its 95% t interval, and *today's mean*: the committed
mean with the re-run seeds' values from today (a few seeds' own mean is noisier than the
interval of all seeds' mean describes: it would leave that interval when nothing changed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench.data.tasks import ALL_TASKS
from bench.results.stats import GROUP_KEYS, PAIR_KEYS, RUN_KEYS, fill_axes, run_values, t_interval

#: Values this close are "identical": far below one example of any split (1/872 on SST-2's dev
#: set), above float32 rounding of a recorded metric (about 6e-8 near 1).
IDENTICAL_ATOL = 1e-6
#: A regression score (STS-B) "changes" when it moves by more than this (float32 rounding in
#: another order moves the scores by about 1e-6).
SCORE_ATOL = 1e-4
#: The level of the committed interval of a head's mean (Student t).
CONFIDENCE = 0.95
#: Columns of :attr:`Reproduction.cells` (``identical``: the score alone).
CELL_COLUMNS = [
    *RUN_KEYS,
    *["metric", "split", "status", "reason", "committed", "today", "diff", "identical"],
    *["changed", "n_predictions", "score_diff"],
]
#: Columns of :attr:`Reproduction.settings` (older records add BCa's ``ci_*``, ``in_ci``).
SETTING_COLUMNS = [
    *GROUP_KEYS,
    *["metric", "split", "n", "seeds", "committed_mean", "t_low", "t_high"],
    *["slice_committed_mean", "slice_today_mean", "today_mean", "shift", "in_t"],
    *["failed_seeds", "reproduces"],
]
_PREDICTION_KEYS = ["split", "example", "token"]


def cell_name(row: pd.Series | dict[str, Any]) -> str:
    """A run's cell path, ``task/encoder/head_label/freeze_label/seed=N``."""
    return f"{setting_name(row)}/seed={int(row['seed'])}"


def setting_name(row: pd.Series | dict[str, Any]) -> str:
    """A setting's path, ``task/encoder/head_label/freeze_label`` (a slice has one size)."""
    return "/".join(str(row[k]) for k in ("task", "encoder", "head_label", "freeze_label"))


def prediction_changes(
    committed: pd.DataFrame, today: pd.DataFrame, split: str = "dev"
) -> pd.DataFrame:
    """Per re-run cell: ``changed`` predictions, ``n_predictions`` and ``score_diff``.

    A class prediction changes when its label differs, a regression score (STS-B) when it
    moves by more than :data:`SCORE_ATOL` (``score_diff``: its largest move; NaN for
    classes); an example the committed cell lacks counts as changed; ``changed`` is NaN
    when the committed predictions hold none of the cell's rows.
    """
    columns = [*RUN_KEYS, *_PREDICTION_KEYS, "pred"]
    mine = fill_axes(today.loc[today["split"] == split]).loc[:, columns]
    theirs = fill_axes(committed.loc[committed["split"] == split]).loc[:, columns]
    merged = mine.merge(
        theirs, on=[*RUN_KEYS, *_PREDICTION_KEYS], how="left", suffixes=("", "_committed")
    )
    regression = merged["task"].map(lambda t: ALL_TASKS[t].is_regression).astype(bool)
    score = merged[["pred", "pred_committed"]].where(regression, axis=0)
    score = score.apply(pd.to_numeric, errors="coerce")
    merged["score_diff"] = diff = (score["pred"] - score["pred_committed"]).abs()
    same = merged["pred"] == merged["pred_committed"]
    merged["differs"] = np.where(regression, ~(diff <= SCORE_ATOL), ~same)
    merged["known"] = merged["pred_committed"].notna()
    grouped = merged.groupby(RUN_KEYS, sort=True).agg(
        changed=("differs", "sum"),
        n_predictions=("pred", "size"),
        known=("known", "sum"),
        score_diff=("score_diff", "max"),
    )
    grouped["changed"] = grouped["changed"].astype(float).where(grouped["known"] > 0)
    return grouped.drop(columns="known").reset_index()


@dataclass(frozen=True)
class Reproduction:
    """Re-run cells (:data:`CELL_COLUMNS`) and their settings (:data:`SETTING_COLUMNS`)."""

    cells: pd.DataFrame
    settings: pd.DataFrame
    split: str

    @property
    def ok(self) -> bool:
        """Whether every re-run cell finished and every head's mean today is in its interval."""
        return bool((self.cells["status"] == "ok").all() and self.settings["reproduces"].all())

    def records(self) -> dict[str, Any]:
        """The comparison as JSON-ready values (floats in full; NaN becomes null)."""
        return {
            "split": self.split,
            "ok": self.ok,
            "identical_atol": IDENTICAL_ATOL,
            "confidence": CONFIDENCE,
            "cells": _json_records(self.cells),
            "settings": _json_records(self.settings),
        }


def compare(
    committed: pd.DataFrame,
    today: pd.DataFrame,
    committed_predictions: pd.DataFrame | None = None,
    today_predictions: pd.DataFrame | None = None,
    split: str = "dev",
) -> Reproduction:
    """Compare re-run cells (a tidy table) with the committed table they come from.

    Without both prediction tables ``changed`` stays NaN. Raises ``ValueError`` when there
    is no re-run cell, or one is not in ``committed``.
    """
    today_runs = run_values(today, split=split)
    if today_runs.empty:
        raise ValueError("no re-run cells to compare")
    committed_runs = run_values(committed, split=split)
    known = committed_runs[[*RUN_KEYS, "value"]].rename(columns={"value": "committed"})
    cells = today_runs[[*RUN_KEYS, "metric", "split", "status", "reason", "value"]].rename(
        columns={"value": "today"}
    )
    cells = cells.merge(known, on=RUN_KEYS, how="left", indicator=True, validate="one_to_one")
    unknown = cells[cells["_merge"] == "left_only"]
    if not unknown.empty:
        names = ", ".join(cell_name(row) for _, row in unknown.iterrows())
        raise ValueError(f"not in the committed results table: {names}")
    cells["diff"] = cells["today"] - cells["committed"]
    cells["identical"] = cells["diff"].abs() <= IDENTICAL_ATOL
    if committed_predictions is not None and today_predictions is not None:
        changes = prediction_changes(committed_predictions, today_predictions, split)
        cells = cells.merge(changes, on=RUN_KEYS, how="left")
    else:
        cells = cells.assign(changed=np.nan, n_predictions=np.nan, score_diff=np.nan)
    cells = cells[CELL_COLUMNS].reset_index(drop=True)
    return Reproduction(cells, _settings(committed_runs, cells, split), split)


def _settings(committed_runs: pd.DataFrame, cells: pd.DataFrame, split: str) -> pd.DataFrame:
    """One row per setting of the re-run cells: the committed interval and today's mean."""
    rows = []
    for keys, redo in cells.groupby(GROUP_KEYS, sort=True):
        mine = (committed_runs[GROUP_KEYS] == pd.Series(keys, index=GROUP_KEYS)).all(axis=1)
        # a run is a seed and its order seed: a crossed study has several runs per seed
        values = committed_runs[mine].set_index(PAIR_KEYS)["value"].astype(float)
        redo = redo.set_index(PAIR_KEYS)
        mixed = values.copy()
        mixed[redo.index] = redo["today"].astype(float)
        low, high = t_interval(values.to_numpy(), CONFIDENCE)
        today_mean = float(mixed.mean())
        failed = redo.index[
            (redo["status"] != "ok").to_numpy() | mixed[redo.index].isna().to_numpy()
        ]
        in_t = bool(low <= today_mean <= high)
        rows.append(
            {
                **dict(zip(GROUP_KEYS, keys, strict=True)),
                "metric": redo["metric"].iloc[0],
                "split": split,
                "n": int(values.notna().sum()),
                "seeds": [int(s) for s, _ in redo.index],
                "committed_mean": float(values.mean()),
                "t_low": low,
                "t_high": high,
                "slice_committed_mean": float(values[redo.index].mean()),
                "slice_today_mean": float(redo["today"].astype(float).mean()),
                "today_mean": today_mean,
                "shift": today_mean - float(values.mean()),
                "in_t": in_t,
                "failed_seeds": [int(s) for s, _ in failed],
                "reproduces": in_t and failed.empty,
            }
        )
    return pd.DataFrame(rows, columns=SETTING_COLUMNS)


def _json_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as plain Python values, floats in full (missing values become None)."""
    plain = frame.astype(object).where(frame.notna(), None)
    return [
        {k: v.item() if isinstance(v, np.generic) else v for k, v in row.items()}
        for row in plain.to_dict("records")
    ]
