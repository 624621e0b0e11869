"""Does a re-run reproduce a committed experiment? Re-run cells beside the committed ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench.data.tasks import ALL_TASKS
from bench.results.stats import (
    GROUP_KEYS,
    RUN_KEYS,
    fill_axes,
    run_values,
    setting_name,
    t_interval,
)

IDENTICAL_ATOL = 1e-6  #: Below one example of any split, above float32 rounding (6e-8 near 1).
SCORE_ATOL = 1e-4  #: A regression score "changes" beyond this (float32 rounding moves it 1e-6).
CONFIDENCE = 0.95  #: The level of the committed interval of a head's mean (Student t).
CELL_COLUMNS = [*RUN_KEYS, "metric", "split", "status", "reason", "committed", "today", "diff"]
CELL_COLUMNS += ["identical", "changed", "n_predictions", "score_diff"]
SETTING_COLUMNS = [*GROUP_KEYS, "metric", "split", "n", "seeds", "committed_mean", "t_low"]
SETTING_COLUMNS += ["t_high", "slice_committed_mean", "slice_today_mean", "today_mean", "shift"]
SETTING_COLUMNS += ["in_t", "failed_seeds", "reproduces"]


def prediction_changes(
    committed: pd.DataFrame, today: pd.DataFrame, split: str = "dev"
) -> pd.DataFrame:
    """Per re-run cell: ``changed`` predictions (a score: beyond SCORE_ATOL), ``n_predictions``."""
    keys = [*RUN_KEYS, "split", "example", "token"]
    mine, theirs = (fill_axes(p[p["split"] == split])[[*keys, "pred"]] for p in (today, committed))
    merged = mine.merge(theirs, on=keys, how="left", suffixes=("", "_committed"))
    regression = merged["task"].map(lambda t: ALL_TASKS[t].is_regression).astype(bool)
    score = merged[["pred", "pred_committed"]].where(regression, axis=0)
    score = score.apply(pd.to_numeric, errors="coerce")
    merged["score_diff"] = diff = (score["pred"] - score["pred_committed"]).abs()
    same = merged["pred"] == merged["pred_committed"]
    merged["differs"] = np.where(regression, ~(diff <= SCORE_ATOL), ~same)
    named = {"changed": ("differs", "sum"), "n_predictions": ("pred", "size")}
    named |= {"known": ("pred_committed", "count"), "score_diff": ("score_diff", "max")}
    grouped = merged.groupby(RUN_KEYS, sort=True).agg(**named)
    grouped["changed"] = grouped["changed"].astype(float).where(grouped["known"] > 0)
    return grouped.drop(columns="known").reset_index()


def _plain(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as plain Python values, floats in full (missing values become None)."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


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
        head = {"split": self.split, "ok": self.ok, "identical_atol": IDENTICAL_ATOL}
        rows = {"cells": _plain(self.cells), "settings": _plain(self.settings)}
        return head | {"confidence": CONFIDENCE} | rows


def compare(
    committed: pd.DataFrame,
    today: pd.DataFrame,
    committed_predictions: pd.DataFrame | None = None,
    today_predictions: pd.DataFrame | None = None,
    split: str = "dev",
) -> Reproduction:
    """Compare re-run cells (a tidy table) with the committed table they come from."""
    today_runs = run_values(today, split=split)
    if today_runs.empty:
        raise ValueError("no re-run cells to compare")
    committed_runs = run_values(committed, split=split)
    known = committed_runs[[*RUN_KEYS, "value"]].rename(columns={"value": "committed"})
    cells = today_runs.rename(columns={"value": "today"}).merge(
        known, on=RUN_KEYS, how="left", indicator=True, validate="one_to_one"
    )
    unknown = cells[cells["_merge"] == "left_only"]
    if not unknown.empty:
        names = ", ".join(setting_name(row, seed=True) for _, row in unknown.iterrows())
        raise ValueError(f"not in the committed results table: {names}")
    cells["diff"] = cells["today"] - cells["committed"]
    cells["identical"] = cells["diff"].abs() <= IDENTICAL_ATOL
    if committed_predictions is not None and today_predictions is not None:
        changes = prediction_changes(committed_predictions, today_predictions, split)
        cells = cells.merge(changes, on=RUN_KEYS, how="left")
    else:
        cells = cells.assign(changed=np.nan, n_predictions=np.nan, score_diff=np.nan)
    cells = cells[CELL_COLUMNS].reset_index(drop=True)
    redo = cells[[*RUN_KEYS, "metric", "status", "today"]]
    runs = committed_runs[[*RUN_KEYS, "value"]].merge(redo, on=RUN_KEYS, how="left")
    # a run is a seed and its order seed: a crossed study has several runs per seed
    runs["mixed"] = runs["value"].where(runs["status"].isna(), runs["today"])
    rows = []
    for keys, group in runs.groupby(GROUP_KEYS, sort=True):
        values, redone = group["value"], group[group["status"].notna()]
        if redone.empty:
            continue
        low, high = t_interval(values.to_numpy(), CONFIDENCE)
        today_mean = group["mixed"].mean()
        failed = redone["status"].ne("ok") | redone["mixed"].isna()
        in_t = bool(low <= today_mean <= high)
        rows.append(
            dict(zip(GROUP_KEYS, keys, strict=True))
            | {"metric": redone["metric"].iloc[0], "split": split, "n": int(values.count())}
            | {"seeds": redone["seed"].astype(int).tolist(), "committed_mean": values.mean()}
            | {"t_low": low, "t_high": high, "slice_committed_mean": redone["value"].mean()}
            | {"slice_today_mean": redone["today"].mean(), "today_mean": today_mean}
            | {"shift": today_mean - values.mean(), "in_t": in_t}
            | {"failed_seeds": redone["seed"][failed].astype(int).tolist()}
            | {"reproduces": in_t and not failed.any()}
        )
    return Reproduction(cells, pd.DataFrame(rows, columns=SETTING_COLUMNS), split)
