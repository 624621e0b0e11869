"""Learning curves by training size: each head's score per size, and where the lead changes.

A *curve* is one task × encoder × freezing strategy (:data:`CURVE_KEYS`) whose cells ran
at two or more training sizes (``data.train_size``, the ``train_size`` column; a sweep
lists it in ``axes``). Everything here is computed from the tidy table by the statistics
of :mod:`bench.results.stats`, so a curve point is exactly the report's cell of that size:

- :func:`curve_points`: per curve, head and size, the mean over seeds with its Student-t
  interval and its BCa bootstrap interval where the seeds allow one
  (:func:`~bench.results.stats.cell_stats`);
- :func:`curve_leaders`: per curve and size, the leading head (best mean), its paired
  margin over the runner-up, and whether the lead changed hands since the previous size.
  A change is called significant only when the new leader is significantly ahead of the
  previous one *at that size*: the paired t-test over seeds
  (:func:`~bench.results.stats.compare_heads`), Holm-corrected over every comparison of
  the curve (at each size, the leader against each other head). Otherwise the table says
  "not significant" (or why there is no test) instead of claiming a crossover.

Settings that differ only by training size are labelled with their size wherever they
are shown (:func:`sized_settings`, :func:`freeze_text`); a sweep with one size per
setting looks exactly as without this module. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from bench.results import stats

#: One learning curve: a task × encoder × freezing strategy; the heads are its lines.
CURVE_KEYS = ["task", "encoder", "freeze_label"]
#: Columns of :func:`curve_points`.
POINT_COLUMNS = [
    *CURVE_KEYS,
    "head_label",
    "train_size",
    "metric",
    "n_runs",
    "n",
    "n_failed",
    "mean",
    "std",
    "t_low",
    "t_high",
    "ci_low",
    "ci_high",
    "ci_method",
    "baseline",
    "best_constant",
]
#: The columns of one tested comparison (:func:`_tested`), after its prefix.
_TESTED = (
    "",
    "_t_low",
    "_t_high",
    "_sim_low",
    "_sim_high",
    "_n_pairs",
    "_p",
    "_p_holm",
    "_tier",
    "_significant",
    "_note",
)
#: Columns of :func:`curve_leaders`: the leader per size, its margin, the change of lead.
LEADER_COLUMNS = [
    *CURVE_KEYS,
    "train_size",
    "metric",
    "n_heads",
    "leader",
    "leader_mean",
    "leader_t_low",
    "leader_t_high",
    "threshold",
    "leader_vs_constant",
    "runner_up",
    "runner_mean",
    *(f"margin{part}" for part in _TESTED),
    "previous",
    "changed",
    *(f"change{part}" for part in _TESTED),
    "n_comparisons",
]


def size_key(train_size: object) -> float:
    """Sort key of a training size: the number, the whole training split last."""
    size = whole_number(train_size)
    return float("inf") if size == stats.WHOLE_SPLIT else float(size)


def whole_number(train_size: object) -> int:
    """A training size as an integer; None/NA (the whole split) is ``stats.WHOLE_SPLIT``."""
    if train_size is None or pd.isna(train_size):
        return stats.WHOLE_SPLIT
    return int(train_size)  # type: ignore[call-overload]


def size_text(train_size: object) -> str:
    """A training size in words: ``400 examples``, ``2,000 examples``, ``whole training split``."""
    size = whole_number(train_size)
    if size == stats.WHOLE_SPLIT:
        return "whole training split"
    return f"{size:,} example{'s' if size != 1 else ''}"


def size_range(low: object, high: object) -> str:
    """Two training sizes in words: ``100 to 4,000 examples`` (or ``to the whole ...``)."""
    if whole_number(high) == stats.WHOLE_SPLIT:
        return f"{size_text(low)} to the {size_text(high)}"
    return f"{whole_number(low):,} to {size_text(high)}"


def sized_settings(frame: pd.DataFrame) -> frozenset[tuple[str, str, str]]:
    """The (task, encoder, freeze_label) settings that ran at two or more training sizes.

    Args:
        frame: Rows with ``task``, ``encoder``, ``freeze_label`` and ``train_size`` (a
            tidy table, :func:`~bench.results.stats.run_values` or
            :func:`~bench.results.stats.cell_stats` output, predictions; missing sizes are
            the whole split).

    Returns:
        The settings to label with their size (empty when every setting has one size).
    """
    if frame.empty or "train_size" not in frame:
        return frozenset()
    sizes = (
        frame[CURVE_KEYS]
        .astype(str)
        .assign(train_size=[whole_number(v) for v in frame["train_size"]])
    )
    counts = sizes.groupby(CURVE_KEYS, sort=True)["train_size"].nunique()
    return frozenset(
        (str(task), str(encoder), str(freeze))
        for (task, encoder, freeze), n in counts.items()
        if n > 1
    )


def split_by_size(
    frame: pd.DataFrame, keys: Sequence[str]
) -> list[tuple[tuple[Any, ...], int | None, pd.DataFrame]]:
    """Groups of ``keys``, each split by training size where one of its settings has several.

    A figure panel or table of one task and encoder would otherwise mix the sizes of a
    learning curve; groups without a sized setting (:func:`sized_settings`) stay whole.

    Args:
        frame: Rows with ``keys`` (and ``task``, ``encoder``, ``freeze_label``,
            ``train_size`` for the sizes; without ``freeze_label`` nothing is split).
        keys: The grouping columns, a prefix of :data:`CURVE_KEYS` (``["task", "encoder"]``).

    Returns:
        ``(group keys, size or None, rows)`` in key order, sizes ascending.
    """
    if list(keys) != CURVE_KEYS[: len(keys)]:
        raise ValueError(f"keys={list(keys)}: must be a prefix of {CURVE_KEYS}")
    sized = sized_settings(frame) if "freeze_label" in frame else frozenset()
    split = {setting[: len(keys)] for setting in sized}
    out: list[tuple[tuple[Any, ...], int | None, pd.DataFrame]] = []
    for values, group in frame.groupby(list(keys), sort=True):
        found = values if isinstance(values, tuple) else (values,)
        if tuple(str(v) for v in found) not in split:
            out.append((found, None, group))
            continue
        sizes = np.array([whole_number(v) for v in group["train_size"]])
        for size in sorted(set(sizes.tolist()), key=size_key):
            out.append((found, size, group[sizes == size]))
    return out


def freeze_text(
    task: object,
    encoder: object,
    freeze: object,
    train_size: object,
    sized: Iterable[tuple[str, str, str]],
) -> str:
    """A freezing label for display, with the training size where the setting has several.

    Args:
        task: The task.
        encoder: The encoder.
        freeze: The freezing label.
        train_size: The row's training size.
        sized: :func:`sized_settings` of what is shown.

    Returns:
        ``frozen``, or ``frozen, 400 examples`` when ``(task, encoder, freeze)`` is sized.
    """
    if (str(task), str(encoder), str(freeze)) in set(sized):
        return f"{freeze}, {size_text(train_size)}"
    return str(freeze)


def curve_points(table: pd.DataFrame, metric: str = "main", split: str = "dev") -> pd.DataFrame:
    """Every point of every learning curve: one row per curve, head and training size.

    Args:
        table: Tidy results table.
        metric: A metric name, or ``"main"`` for each task's main metric.
        split: The evaluation split.

    Returns:
        :data:`POINT_COLUMNS` of :func:`~bench.results.stats.cell_stats` for the settings
        of :func:`sized_settings`, ordered by curve, head and size (whole split last).
    """
    return points_of(stats.cell_stats(table, metric=metric, split=split))


def points_of(cells: pd.DataFrame) -> pd.DataFrame:
    """:func:`curve_points` from :func:`~bench.results.stats.cell_stats` rows."""
    sized = sized_settings(cells)
    if not sized:
        return pd.DataFrame(columns=POINT_COLUMNS)
    keep = [tuple(str(v) for v in k) in sized for k in cells[CURVE_KEYS].itertuples(index=False)]
    points = cells[keep].copy()
    points["_order"] = [size_key(v) for v in points["train_size"]]
    points = points.sort_values([*CURVE_KEYS, "head_label", "_order"], kind="stable")
    return points[POINT_COLUMNS].reset_index(drop=True)


def curve_leaders(
    table: pd.DataFrame, metric: str = "main", split: str = "dev", alpha: float = stats.ALPHA
) -> pd.DataFrame:
    """The leading head at every size of every learning curve, and where the lead changes.

    Args:
        table: Tidy results table.
        metric: A metric name, or ``"main"``.
        split: The evaluation split.
        alpha: Significance level after Holm's correction.

    Returns:
        :func:`leaders_of` of the table's statistics.
    """
    cells = stats.cell_stats(table, metric=metric, split=split)
    comparisons = stats.compare_heads(table, metric=metric, split=split)
    return leaders_of(cells, comparisons, alpha)


def leaders_of(
    cells: pd.DataFrame, comparisons: pd.DataFrame, alpha: float = stats.ALPHA
) -> pd.DataFrame:
    """:func:`curve_leaders` from precomputed statistics of one table.

    Args:
        cells: :func:`~bench.results.stats.cell_stats` rows.
        comparisons: :func:`~bench.results.stats.compare_heads` rows of the same table.
        alpha: Significance level after Holm's correction.

    Returns:
        One row per curve and size (:data:`LEADER_COLUMNS`), sizes ascending (the whole
        split last). ``leader_vs_constant``: how the leader's mean stands against
        ``threshold``, its runs' failure threshold (:func:`~bench.results.stats.against_threshold`).
        ``margin``: the leader − the runner-up, paired over seeds, with
        ``margin_t_low``/``_t_high`` (Student-t interval), ``_sim_low``/``_sim_high``
        (the simultaneous interval beside ``_p_holm``: Bonferroni over the same family,
        :func:`~bench.results.stats.holm_all`), ``_n_pairs``, ``_p`` (paired
        t-test), ``_p_holm`` (Holm over the curve's ``n_comparisons``: at every size, the
        leader against each other head), ``_tier``, ``_significant`` and ``_note`` (why
        there is no test). ``previous``: the leader at the previous size; ``changed``: the
        lead changed hands there; ``change`` and ``change_*``: the new leader − the
        previous leader at this size, the same way, from the same family.
    """
    rows: list[dict[str, Any]] = []
    sized = sized_settings(cells)
    for keys, curve in cells.groupby(CURVE_KEYS, sort=True):
        if tuple(str(k) for k in keys) not in sized:
            continue
        mask = np.ones(len(comparisons), dtype=bool)
        for column, value in zip(CURVE_KEYS, keys, strict=True):
            mask &= (comparisons[column] == value).to_numpy()
        family = stats.leader_comparisons(curve, comparisons[mask])
        if not family.empty:
            family = stats.holm_all(family)
        previous: str | None = None
        for size in sorted(curve["train_size"].unique(), key=size_key):
            ranked = stats.ranked_heads(curve[curve["train_size"] == size])
            if ranked.empty:
                continue
            row = _leader_row(keys, size, ranked, family, previous, alpha)
            rows.append(row)
            previous = row["leader"]
    return pd.DataFrame(rows, columns=LEADER_COLUMNS)


def _paired(family: pd.DataFrame, size: object, other: str) -> pd.Series | None:
    """The family's comparison of the size's leader with ``other`` (None when absent)."""
    if family.empty:
        return None
    found = family[(family["train_size"] == size) & (family["head_b"] == other)]
    if found.empty or int(found.iloc[0]["n_pairs"]) == 0:
        return None
    return found.iloc[0]


def _tested(prefix: str, pair: pd.Series | None, alpha: float) -> dict[str, Any]:
    """A leader's comparison as ``<prefix>`` (the difference) and ``<prefix>_*`` columns."""
    if pair is None:
        return {}
    p_holm = pair["p_holm_all"]
    return {
        prefix: pair["diff"],
        f"{prefix}_t_low": pair["t_low"],
        f"{prefix}_t_high": pair["t_high"],
        f"{prefix}_sim_low": pair.get("sim_low", np.nan),
        f"{prefix}_sim_high": pair.get("sim_high", np.nan),
        f"{prefix}_n_pairs": int(pair["n_pairs"]),
        f"{prefix}_p": pair["p"],
        f"{prefix}_p_holm": p_holm,
        f"{prefix}_tier": pair["significance"],
        f"{prefix}_significant": bool(pd.notna(p_holm) and p_holm < alpha and pair["diff"] > 0),
        f"{prefix}_note": pair["reason"] if isinstance(pair["reason"], str) else "",
    }


def _leader_row(
    keys: tuple[Any, ...],
    size: object,
    ranked: pd.DataFrame,
    family: pd.DataFrame,
    previous: str | None,
    alpha: float,
) -> dict[str, Any]:
    """One :data:`LEADER_COLUMNS` row: the leader at ``size`` and how sure its lead is."""
    best = ranked.iloc[0]
    leader = str(best["head_label"])
    row: dict[str, Any] = dict.fromkeys(LEADER_COLUMNS, np.nan)
    row.update(dict(zip(CURVE_KEYS, keys, strict=True)))
    row.update(
        train_size=int(size),  # type: ignore[call-overload]
        metric=best["metric"],
        n_heads=len(ranked),
        leader=leader,
        leader_mean=best["mean"],
        leader_t_low=best["t_low"],
        leader_t_high=best["t_high"],
        threshold=best["threshold"],
        leader_vs_constant=stats.against_threshold(best["mean"], best["t_low"], best["threshold"]),
        runner_up=None,
        margin_n_pairs=0,
        margin_tier="",
        margin_significant=False,
        margin_note="",
        previous=previous,
        changed=previous is not None and leader != previous,
        change_n_pairs=0,
        change_tier="",
        change_significant=False,
        change_note="",
        n_comparisons=int(family["n_comparisons_all"].iloc[0]) if not family.empty else 0,
    )
    if len(ranked) > 1:
        runner = str(ranked.iloc[1]["head_label"])
        row.update(runner_up=runner, runner_mean=ranked.iloc[1]["mean"])
        row.update(_tested("margin", _paired(family, size, runner), alpha))
    if row["changed"]:
        change = _paired(family, size, str(previous))
        row.update(_tested("change", change, alpha))
        if change is None:
            row["change_note"] = f"{previous} has no paired run at this size"
    return row


#: Columns :func:`with_headline` adds: the same comparisons in the headline's family.
HEADLINE_VERDICT_COLUMNS = [
    "headline_comparisons",
    "margin_p_holm_all",
    "margin_significant_all",
    "change_p_holm_all",
    "change_significant_all",
]


def with_headline(leaders: pd.DataFrame, shown: pd.DataFrame | None) -> pd.DataFrame:
    """Leaders with the verdict the headline gives the same comparisons, in its family.

    A curve's margins and changes are Holm-corrected over the curve's own comparisons
    (:func:`leaders_of`); the headline corrects the same comparisons (each setting's best
    head against each other head) over every setting it shows, so a lead significant in
    the curve can be a tie in the headline. This puts the two side by side.

    Args:
        leaders: :func:`leaders_of` rows.
        shown: The headline's comparisons (:func:`~bench.results.stats.leader_comparisons`
            of every setting, :func:`~bench.results.stats.holm_all`); None or empty: the
            columns are NaN.

    Returns:
        A copy with :data:`HEADLINE_VERDICT_COLUMNS`: the headline family's size, and for
        the margin (leader − runner-up) and the change (leader − previous leader) its
        ``p_holm_all`` and whether it puts the leader significantly ahead (``ahead``).
    """
    out = leaders.copy()
    found_all: dict[str, list[Any]] = {c: [np.nan] * len(out) for c in HEADLINE_VERDICT_COLUMNS}
    if shown is not None and not shown.empty:
        m = int(shown["n_comparisons_all"].iloc[0])
        keys = [*CURVE_KEYS, "train_size"]
        index = {
            (*(row[k] for k in keys), row["head_a"], row["head_b"]): row
            for _, row in shown.iterrows()
        }
        # A setting in a study (bench.results.studies) has its own family's m.
        family_m = {
            tuple(row[k] for k in keys): int(row["n_comparisons_all"]) for row in index.values()
        }
        for i, (_, r) in enumerate(out.iterrows()):
            setting = tuple(r[k] for k in keys)
            found_all["headline_comparisons"][i] = family_m.get(setting, m)
            for prefix, other in (("margin", r["runner_up"]), ("change", r["previous"])):
                if prefix == "change" and not r["changed"]:
                    continue
                found = index.get((*setting, r["leader"], other))
                if found is None or pd.isna(found["p_holm_all"]):
                    continue
                found_all[f"{prefix}_p_holm_all"][i] = float(found["p_holm_all"])
                found_all[f"{prefix}_significant_all"][i] = bool(found["ahead"])
    for column, values in found_all.items():
        out[column] = pd.Series(
            values, index=out.index, dtype=object if "significant" in column else float
        )
    return out


def changes_text(leaders: pd.DataFrame) -> str:
    """How often the lead changes hands, and how often significantly, in words.

    Args:
        leaders: :func:`curve_leaders` rows.

    Returns:
        What follows "the lead": ``never changes hands``, ``changes hands once, 1 of 1
        significantly``, ``changes hands 3 times, 0 of 3 significantly``.
    """
    n = int(leaders["changed"].astype(bool).sum()) if not leaders.empty else 0
    if n == 0:
        return "never changes hands"
    sure = int(leaders["change_significant"].astype(bool).sum())
    times = {1: "once", 2: "twice"}.get(n, f"{n} times")
    return f"changes hands {times}, {sure} of {n} significantly"


def change_verdict(row: pd.Series) -> str:
    """A change of lead in words: its tier, ``not significant``, or why there is no test."""
    if not row["changed"]:
        return ""
    if row["change_significant"]:
        return f"significant ({row['change_tier']})"
    if pd.isna(row["change_p"]):
        return f"no test: {row['change_note']}" if row["change_note"] else "no test"
    return "not significant"
