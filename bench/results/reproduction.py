"""Does a re-run reproduce a committed experiment? Compare re-run cells with the committed ones.

``python -m bench.run.selfcheck`` re-trains a fixed slice of a committed experiment's cells
with today's code; this module compares them with the committed results (pandas and SciPy
only, like the rest of :mod:`bench.results`). Two questions, on the reporting split's main
metric:

1. **Per cell**: today's value beside the committed one, their difference (``identical``
   within :data:`IDENTICAL_ATOL`), and how many per-example predictions changed.
2. **Per head and setting**: the committed mean over the setting's seeds, recomputed with the
   re-run seeds' values from today (*today's mean*), must lie within the committed 95%
   Student-t interval and, where it is defined, the BCa interval, both as
   :func:`bench.results.stats.cell_stats` publishes them.

Why today's mean substitutes the re-run seeds instead of averaging them alone: the mean of 3
of 10 seeds is a noisier estimate than the interval of the 10-seed mean describes, so it
leaves that interval even when nothing changed (the committed ``fair_heads`` SST-2 frozen
``last4_concat`` seeds 1-3 average 0.7060, outside the t-interval [0.7078, 0.7245] of all
ten). Today's mean equals the committed mean when every re-run cell reproduces, and leaves
the interval exactly when today's values would move the published mean out of its published
interval. The slice's own mean, committed and today, is shown for information.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench.data.tasks import ALL_TASKS
from bench.results.render import Table, to_text
from bench.results.stats import (
    CONFIDENCE,
    GROUP_KEYS,
    PAIR_KEYS,
    RUN_KEYS,
    cell_stats,
    fill_axes,
    normalize_table,
    run_values,
)

#: Values this close are "identical": far below one example of any split (1/872 on SST-2's
#: dev set is 1.1e-3) and above float32 rounding of a recorded metric (about 6e-8 near 1).
IDENTICAL_ATOL = 1e-6
#: A regression score (STS-B, 0 to 5) "changes" when it moves by more than this; float32
#: rounding in another order moves the scores by about 1e-6.
SCORE_ATOL = 1e-4
#: Columns of :attr:`Reproduction.cells`.
CELL_COLUMNS = [
    *RUN_KEYS,
    "metric",
    "split",
    "status",
    "reason",
    "committed",
    "today",
    "diff",
    "identical",
    "changed",
    "n_predictions",
    "score_diff",
]
#: Columns of :attr:`Reproduction.settings`.
SETTING_COLUMNS = [
    *GROUP_KEYS,
    "metric",
    "split",
    "n",
    "seeds",
    "committed_mean",
    "t_low",
    "t_high",
    "ci_low",
    "ci_high",
    "ci_method",
    "slice_committed_mean",
    "slice_today_mean",
    "today_mean",
    "shift",
    "in_t",
    "in_ci",
    "failed_seeds",
    "reproduces",
]
_PREDICTION_KEYS = ["split", "example", "token"]


def cell_name(row: pd.Series | dict[str, Any]) -> str:
    """A run's cell path, ``task/encoder/head_label/freeze_label/seed=N``."""
    return f"{setting_name(row)}/seed={int(row['seed'])}"


def setting_name(row: pd.Series | dict[str, Any]) -> str:
    """A setting's path, ``task/encoder/head_label/freeze_label`` (a slice has one size)."""
    return "/".join(str(row[k]) for k in ("task", "encoder", "head_label", "freeze_label"))


def seed_text(seeds: list[int]) -> str:
    """Seeds as text: ``1-3`` for a run of consecutive seeds, else ``1,4,7``."""
    ordered = sorted(seeds)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(map(str, ordered))


def prediction_changes(
    committed: pd.DataFrame, today: pd.DataFrame, split: str = "dev"
) -> pd.DataFrame:
    """Per re-run cell, how many of its per-example predictions differ from the committed ones.

    A class prediction changes when its label text differs; a regression score (STS-B) when
    it moves by more than :data:`SCORE_ATOL` (float32 rounding moves every score a little).

    Args:
        committed: Committed predictions (``predictions.parquet``'s rows,
            :data:`bench.results.predictions.PREDICTION_COLUMNS`).
        today: The re-run cells' predictions, the same columns.
        split: The reporting split compared.

    Returns:
        One row per re-run cell: the run keys, ``changed`` (an example the committed cell
        lacks counts as changed; NaN when the committed predictions hold none of the cell's
        rows), ``n_predictions`` (today's rows) and ``score_diff`` (regression: the largest
        absolute difference of a score; NaN otherwise).
    """
    columns = [*RUN_KEYS, *_PREDICTION_KEYS, "pred"]
    mine = fill_axes(today.loc[today["split"] == split]).loc[:, columns]
    theirs = fill_axes(committed.loc[committed["split"] == split]).loc[:, columns]
    merged = mine.merge(
        theirs, on=[*RUN_KEYS, *_PREDICTION_KEYS], how="left", suffixes=("", "_committed")
    )
    regression = merged["task"].map(lambda t: ALL_TASKS[t].is_regression).astype(bool)
    distance = (
        pd.to_numeric(merged["pred"].where(regression), errors="coerce")
        - pd.to_numeric(merged["pred_committed"].where(regression), errors="coerce")
    ).abs()
    merged["score_diff"] = distance
    merged["differs"] = np.where(
        regression,
        ~(distance <= SCORE_ATOL),
        merged["pred"] != merged["pred_committed"],
    )
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
    """The comparison of re-run cells with a committed experiment.

    Attributes:
        cells: One row per re-run cell (:data:`CELL_COLUMNS`).
        settings: One row per head and setting the cells belong to (:data:`SETTING_COLUMNS`).
        split: The reporting split compared.
    """

    cells: pd.DataFrame
    settings: pd.DataFrame
    split: str

    @property
    def ok(self) -> bool:
        """Whether every re-run cell finished and every setting stays within its intervals."""
        return bool((self.cells["status"] == "ok").all() and self.settings["reproduces"].all())

    @property
    def identical(self) -> pd.Series:
        """Per re-run cell: the same score and, where both have predictions, none changed."""
        changed = pd.to_numeric(self.cells["changed"], errors="coerce")
        return self.cells["identical"].astype(bool) & ~(changed > 0)

    @property
    def n_identical(self) -> int:
        """How many re-run cells are identical to the committed ones (:attr:`identical`)."""
        return int(self.identical.sum())

    def problems(self) -> list[str]:
        """One message per re-run cell that did not finish and per setting that moved."""
        out = [
            f"{cell_name(row)} {row['status']}: {row['reason']}"
            for _, row in self.cells.iterrows()
            if row["status"] != "ok"
        ]
        for _, row in self.settings.iterrows():
            if row["failed_seeds"]:
                continue  # named above
            if not row["in_t"]:
                out.append(
                    f"{setting_name(row)}: today's mean {row['today_mean']:.4f} is outside the "
                    f"committed t-interval {_interval(row['t_low'], row['t_high'])}"
                )
            if row["in_ci"] is not None and not row["in_ci"]:
                out.append(
                    f"{setting_name(row)}: today's mean {row['today_mean']:.4f} is outside the "
                    f"committed {row['ci_method']} interval "
                    f"{_interval(row['ci_low'], row['ci_high'])}"
                )
        return out

    def verdict(self) -> str:
        """One line: reproduced or not, how many cells are identical, and what moved."""
        n = len(self.cells)
        methods = sorted({interval_name(m) for m in self.settings["ci_method"]} - {""})
        within = " and ".join(["t", *methods])
        level = f"{CONFIDENCE:.0%}"
        if not self.ok:
            return "NOT REPRODUCED: " + "; ".join(self.problems())
        if self.n_identical == n:
            return (
                f"REPRODUCED: all {n} cells identical to the committed ones; every head's "
                f"mean stays within its committed {level} {within} intervals"
            )
        moves = self.cells["diff"].abs()
        big = self.cells.loc[moves.idxmax()] if moves.notna().any() else None
        largest = "" if big is None else f"largest |Δ| {abs(big['diff']):.6f}, {cell_name(big)}"
        return (
            f"REPRODUCED within the intervals: {self.n_identical} of {n} cells identical "
            f"(score and predictions{'; ' + largest if largest else ''}); every head's mean "
            f"stays within its committed {level} {within} intervals"
        )

    def tables(self) -> list[Table]:
        """The per-cell and per-setting tables (:func:`bench.results.render.to_text`)."""
        cells = Table(
            title="Cells",
            caption=(
                f"Each re-run cell's {self.split} main metric beside its committed value "
                f"('identical': within {IDENTICAL_ATOL:g} and no prediction changed; 'same "
                f"score': within it, but predictions changed), and how many of its predictions "
                f"changed (a regression score: by more than {SCORE_ATOL:g})."
            ),
            header=["cell", "metric", "committed", "today", "Δ", "predictions changed"],
            align=["l", "l", "r", "r", "r", "r"],
        )
        for _, row in self.cells.iterrows():
            ok = row["status"] == "ok"
            cells.rows.append(
                [
                    cell_name(row),
                    str(row["metric"]),
                    _number(row["committed"], 6),
                    _number(row["today"], 6) if ok else str(row["status"]),
                    _delta(row),
                    changed_text(row["changed"], row["n_predictions"], row["score_diff"]),
                ]
            )
        settings = Table(
            title="Heads",
            caption=(
                f"Each head's committed {CONFIDENCE:.0%} intervals of the mean over its seeds, "
                "and today's mean: the committed mean with the re-run seeds' values from today."
            ),
            header=[
                "setting",
                "metric",
                "n",
                "committed mean",
                "t-interval",
                "bootstrap interval",
                "re-run seeds",
                "their mean: committed → today",
                "today's mean",
                "within",
            ],
            align=["l", "l", "r", "r", "r", "r", "r", "r", "r", "l"],
            notes=[
                "The re-run seeds' own mean is shown for information: a few seeds' mean is "
                "noisier than the interval of all seeds' mean describes."
            ],
        )
        for _, row in self.settings.iterrows():
            settings.rows.append(
                [
                    setting_name(row),
                    str(row["metric"]),
                    str(int(row["n"])),
                    _number(row["committed_mean"], 4),
                    _interval(row["t_low"], row["t_high"]),
                    _bootstrap(row),
                    seed_text(list(row["seeds"])),
                    f"{_number(row['slice_committed_mean'], 4)} → "
                    f"{_number(row['slice_today_mean'], 4)}",
                    f"{_number(row['today_mean'], 4)} ({_signed(row['shift'], 4)})",
                    within_text(row),
                ]
            )
        return [cells, settings]

    def text(self) -> str:
        """The two tables and the verdict as plain text."""
        return "\n".join([*(to_text(t) for t in self.tables()), self.verdict()]) + "\n"

    def records(self) -> dict[str, Any]:
        """The comparison as JSON-ready values (NaN becomes null)."""
        return {
            "split": self.split,
            "ok": self.ok,
            "verdict": self.verdict(),
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
    """Compare re-run cells with the committed experiment they come from.

    Args:
        committed: The committed tidy results table (``results.parquet``).
        today: The re-run cells' tidy table (:func:`bench.results.collect.tidy`); a cell that
            failed has its status and reason and no value.
        committed_predictions: The committed ``predictions.parquet`` rows (optional).
        today_predictions: The re-run cells' predictions (optional; without both prediction
            tables ``changed`` stays NaN).
        split: The reporting split compared (its main metric).

    Returns:
        The comparison.

    Raises:
        ValueError: When there is no re-run cell, or a re-run cell is not in ``committed``.
    """
    today_runs = run_values(today, split=split)
    if today_runs.empty:
        raise ValueError("no re-run cells to compare")
    committed = normalize_table(committed)
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
        cells["changed"] = np.nan
        cells["n_predictions"] = np.nan
        cells["score_diff"] = np.nan
    cells = cells[CELL_COLUMNS].reset_index(drop=True)
    settings = _settings(committed, committed_runs, cells, split)
    return Reproduction(cells=cells, settings=settings, split=split)


def _settings(
    committed: pd.DataFrame, committed_runs: pd.DataFrame, cells: pd.DataFrame, split: str
) -> pd.DataFrame:
    """One row per setting of the re-run cells: committed intervals and today's mean."""
    keys = cells[GROUP_KEYS].drop_duplicates()
    stats = cell_stats(committed.merge(keys, on=GROUP_KEYS), split=split)
    rows = []
    for _, stat in stats.iterrows():
        mask = (committed_runs[GROUP_KEYS] == stat[GROUP_KEYS]).all(axis=1)
        # a run is a seed and its order seed: a crossed study has several runs per seed
        values = committed_runs[mask].set_index(PAIR_KEYS)["value"].astype(float)
        redo = cells[(cells[GROUP_KEYS] == stat[GROUP_KEYS]).all(axis=1)].set_index(PAIR_KEYS)
        seeds = [int(s) for s, _ in redo.index]
        mixed = values.copy()
        mixed[redo.index] = redo["today"].astype(float)
        today_mean = _mean(mixed)
        failed = [
            int(run[0])
            for run in redo.index
            if redo.loc[run, "status"] != "ok" or math.isnan(mixed[run])
        ]
        in_t = bool(stat["t_low"] <= today_mean <= stat["t_high"])
        in_ci = (
            None
            if stat["ci_method"] == "none"
            else bool(stat["ci_low"] <= today_mean <= stat["ci_high"])
        )
        rows.append(
            {
                **{k: stat[k] for k in GROUP_KEYS},
                "metric": stat["metric"],
                "split": split,
                "n": int(stat["n"]),
                "seeds": seeds,
                "committed_mean": float(stat["mean"]),
                "t_low": float(stat["t_low"]),
                "t_high": float(stat["t_high"]),
                "ci_low": float(stat["ci_low"]),
                "ci_high": float(stat["ci_high"]),
                "ci_method": stat["ci_method"],
                "slice_committed_mean": _mean(values[redo.index]),
                "slice_today_mean": _mean(redo["today"].astype(float)),
                "today_mean": today_mean,
                "shift": today_mean - float(stat["mean"]),
                "in_t": in_t,
                "in_ci": in_ci,
                "failed_seeds": failed,
                "reproduces": not failed and in_t and in_ci is not False,
            }
        )
    return pd.DataFrame(rows, columns=SETTING_COLUMNS)


def _json_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as plain Python values, floats in full (missing values become None)."""
    return [{str(k): _json_value(v) for k, v in row.items()} for row in frame.to_dict("records")]


def _json_value(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _mean(values: pd.Series) -> float:
    """The mean of the finite values (NaN when there are none)."""
    x = values.to_numpy(dtype=float)
    x = x[np.isfinite(x)]
    return float(np.mean(x)) if x.size else math.nan


def _number(value: float, digits: int) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _signed(value: float, digits: int) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:+.{digits}f}"


def _interval(low: float, high: float) -> str:
    return f"[{_number(low, 4)}, {_number(high, 4)}]"


def changed_text(changed: float | None, n: float | None, score_diff: float | None) -> str:
    """A cell's changed predictions as text: ``57 of 872``, with a score's largest move.

    Args:
        changed: How many predictions changed (NaN or None: unknown).
        n: How many predictions the re-run cell made (NaN or None: none read).
        score_diff: A regression task's largest score difference (NaN or None otherwise).

    Returns:
        ``—`` without predictions, ``n/a of N`` when the committed ones are unknown.
    """
    if n is None or math.isnan(n):
        return "—"
    if changed is None or math.isnan(changed):
        return f"n/a of {int(n)}"
    moved = score_diff is not None and not math.isnan(score_diff)
    scores = f" (scores: max |Δ| {score_diff:.1e})" if moved else ""
    return f"{int(changed)} of {int(n)}{scores}"


def _delta(row: pd.Series) -> str:
    """A cell's Δ: ``identical``, ``same score`` (predictions changed), or the signed move."""
    if not row["identical"]:
        return _signed(row["diff"], 6)
    changed = pd.to_numeric(pd.Series([row["changed"]]), errors="coerce").iloc[0]
    return "same score" if changed > 0 else "identical"


def interval_name(method: str) -> str:
    """How a bootstrap interval is named in the verdict ("" when there is none)."""
    return {"none": "", "constant": "bootstrap"}.get(method, method)


def _bootstrap(row: pd.Series) -> str:
    if row["ci_method"] == "none":
        return "—"
    return f"{_interval(row['ci_low'], row['ci_high'])} {row['ci_method']}"


def within_text(row: pd.Series | dict[str, Any]) -> str:
    """Whether a setting's mean today is within its intervals: ``t yes, BCa yes``.

    Args:
        row: A :attr:`Reproduction.settings` row (or its record, :meth:`Reproduction.records`).

    Returns:
        The text; ``seed 3 failed`` when a re-run seed failed.
    """
    if row["failed_seeds"]:
        return f"seed {seed_text(list(row['failed_seeds']))} failed"
    parts = [f"t {'yes' if row['in_t'] else 'NO'}"]
    if row["in_ci"] is not None:
        parts.append(f"{interval_name(row['ci_method'])} {'yes' if row['in_ci'] else 'NO'}")
    return ", ".join(parts)
