"""Statistics as data: one row per setting × head (``scores``), one per head pair (``comparisons``).

``docs/statistics.md`` explains the method: errors from seeds and (jackknife) dev examples,
Holm within a family, one verdict per pair.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps
from seqeval.scheme import IOB2, Entities
from statsmodels.stats.multitest import multipletests

from bench.axes.heads import ANCHOR, head_order
from bench.data.tasks import ALL_TASKS, TokenTaskSpec
from bench.results import adequacy, crossed, stats
from bench.results.studies import Margin, Study, family_of, margins_of, studies_of

#: A setting: every axis of a cell except head and seed; what pairs two heads' runs.
SETTING, PAIR = list(stats.SETTING_KEYS), list(stats.PAIR_KEYS)
ALPHA, CONFIDENCE = 0.05, 0.95
#: Run values and differences are rounded to this many decimals for their spread.
DECIMALS = 12
#: The range of each metric (an interval end beyond it is clipped and marked).
RANGES = {"mcc": (-1.0, 1.0), "pearson": (-1.0, 1.0), "spearman": (-1.0, 1.0)}
#: Which noise an interval counts (without dev predictions, with them); the frames' files.
METHODS, FRAME_NAMES = ("seeds", "seeds and dev examples"), ("scores", "comparisons")
_ERRORS = ["se_seed", "se_dev", "se", "df"]
SCORE_COLUMNS = [
    *SETTING,
    *["head_label", "family", "metric", "n", "n_failed", "mean", "sd", *_ERRORS, "low", "high"],
    *["clipped", "best_constant", "beats_constant", "best", "beats_all", "interval_method"],
    *adequacy.COLUMNS,
]
COMPARISON_COLUMNS = [
    *SETTING,
    *["family", "metric", "head_a", "head_b", "n_pairs", "mean_a", "mean_b", "estimate"],
    *[*_ERRORS, "p", "m", "p_holm", "low90", "high90", "sim_low", "sim_high", "margin"],
    *["min_margin", "verdict", "reason", "shown", "low", "high", "interval_method"],
]


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def _pearson(*sums: np.ndarray) -> np.ndarray:
    n, sx, sy, sxx, syy, sxy = sums
    return (n * sxy - sx * sy) / np.sqrt((n * sxx - sx**2) * (n * syy - sy**2))


#: The metric from its summed per-example counts (accuracy: correct, 1; f1 and mcc:
#: tp, tn, fp, fn; correlations: 1, y, p, y², p², yp), vectorised.
_FROM_COUNTS: dict[str, Callable[..., np.ndarray]] = {
    "accuracy": lambda correct, n: correct / n,
    "f1": lambda tp, tn, fp, fn: _ratio(2 * tp, 2 * tp + fp + fn),
    "mcc": lambda tp, tn, fp, fn: _ratio(
        tp * tn - fp * fn, np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    ),
    "pearson": _pearson,
    "spearman": _pearson,
}


def _counts(metric: str, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per example, the additive counts :data:`_FROM_COUNTS` reads (units × counts)."""
    if metric in ("pearson", "spearman"):
        if metric == "spearman":  # ranks of the whole split (the jackknife keeps them)
            y, p = sps.rankdata(y), sps.rankdata(p)
        y, p = y.astype(float), p.astype(float)
        return np.stack([np.ones_like(y), y, p, y * y, p * p, y * p], axis=1)
    if metric == "accuracy":
        return np.stack([y == p, np.ones_like(y, dtype=bool)], axis=1).astype(float)
    pos, hit = y == 1, p == 1
    return np.stack([pos & hit, ~pos & ~hit, ~pos & hit, pos & ~hit], axis=1).astype(float)


def _entity_counts(rows: pd.DataFrame) -> np.ndarray:
    """Per sentence of a CoNLL split: [correct, 0, spurious, missed] entities (strict IOB2)."""
    ordered = rows.sort_values(["example", "token"], kind="stable").groupby("example", sort=True)
    gold, pred = (Entities(ordered[c].apply(list).tolist(), IOB2) for c in ("label", "pred"))
    found = [
        ({e.to_tuple() for e in g}, {e.to_tuple() for e in p})
        for g, p in zip(gold.entities, pred.entities, strict=True)
    ]
    return np.asarray([[len(g & p), 0, len(p - g), len(g - p)] for g, p in found], dtype=float)


def jackknife(task: str, metric: str, rows: pd.DataFrame) -> np.ndarray:
    """One run's metric (of its predictions of one split) with each dev unit left out in turn."""
    spec = ALL_TASKS[task]
    if metric not in _FROM_COUNTS:
        raise ValueError(f"no jackknife for metric {metric!r}")
    if isinstance(spec, TokenTaskSpec):
        counts, metric = _entity_counts(rows), "f1"
    else:
        ordered = rows.sort_values("example", kind="stable")
        if spec.is_regression:
            y, p = (ordered[c].astype(float).to_numpy() for c in ("label", "pred"))
        else:
            ids = {name: i for i, name in enumerate(spec.label_names)}
            y, p = (
                np.asarray([ids[spec.tsv_label_map.get(v, v)] for v in ordered[c].astype(str)])
                for c in ("label", "pred")
            )
        counts = _counts(metric, y, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _FROM_COUNTS[metric](*(counts.sum(axis=0) - counts).T)


def jackknife_runs(predictions: pd.DataFrame, runs: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """:func:`jackknife` of every run of ``runs`` that has dev predictions, by run key."""
    if predictions.empty:
        return {}
    dev = stats.fill_axes(predictions[predictions["split"] == "dev"])
    wanted = {tuple(k) for k in runs[stats.RUN_KEYS].itertuples(index=False)}
    metric = dict(zip(runs["task"], runs["metric"], strict=False))
    return {
        key: jackknife(str(key[0]), metric[key[0]], rows)
        for key, rows in dev.groupby(stats.RUN_KEYS, sort=False)
        if key in wanted
    }


def dev_theta(
    loo: Sequence[np.ndarray | None], minus: Sequence[np.ndarray | None] = ()
) -> np.ndarray | None:
    """Per dev unit, the mean over runs without it, minus ``minus``'s (None: a run lacks it)."""
    arrays = [x for x in [*loo, *minus] if x is not None]
    if not loo or len(arrays) < len(loo) + len(minus) or len({x.shape for x in arrays}) > 1:
        return None
    theta = np.mean(np.stack(arrays[: len(loo)]), axis=0)
    return theta - np.mean(np.stack(arrays[len(loo) :]), axis=0) if minus else theta


def estimate(values: pd.Series, theta: np.ndarray | None = None) -> dict[str, float]:
    """``mean``, ``se_seed``, ``se_dev``, ``se`` and Welch–Satterthwaite ``df`` of run values.

    ``values`` (indexed by :data:`PAIR`): scores or paired differences; ``theta``: their
    :func:`dev_theta` (None: no dev term).
    """
    x = values.to_numpy(dtype=float)
    grid = crossed.grid_of(values)
    if grid is not None:
        c = crossed.crossed_mean(grid.round(DECIMALS))
        mean, se_s, df_s = float(c.mean), float(c.se), float(c.df)
    elif x.size > 1:
        spread = np.round(x, DECIMALS).std(ddof=1)  # float noise of equal differences is 0
        mean, se_s, df_s = float(x.mean()), float(spread / math.sqrt(x.size)), x.size - 1.0
    else:
        mean, se_s, df_s, theta = float(x.mean()) if x.size else math.nan, math.nan, math.nan, None
    se_d = math.nan  # the jackknife standard error over dev units
    if theta is not None and theta.size > 1 and np.all(np.isfinite(theta)):
        se_d = float(math.sqrt((theta.size - 1) / theta.size * np.sum((theta - theta.mean()) ** 2)))
    dev = 0.0 if math.isnan(se_d) else se_d
    se = math.sqrt(se_s**2 + dev**2)
    parts = se_s**4 / df_s + (dev**4 / (theta.size - 1) if dev and theta is not None else 0.0)
    df = float(se**4 / parts if parts > 0 else df_s)
    return dict(zip(["mean", *_ERRORS], [mean, se_s, se_d, se, df], strict=True))


def _interval(frame: pd.DataFrame, confidence: float | pd.Series) -> tuple[pd.Series, pd.Series]:
    """The two-sided t intervals ``mean ± t·se`` of a frame's rows (NaN without an error)."""
    half = (sps.t.ppf(0.5 + confidence / 2, frame["df"]) * frame["se"]).where(frame["se"] != 0, 0)
    return frame["mean"] - half, frame["mean"] + half


def scores(
    runs: pd.DataFrame,
    loo: Mapping[tuple, np.ndarray] | None = None,
    studies: Sequence[Study] = (),
    cells: Sequence[Mapping[str, Any]] = (),
) -> pd.DataFrame:
    """One row per setting × head (:data:`SCORE_COLUMNS`); ``loo``: :func:`jackknife_runs`.

    ``cells`` (``cells.json`` records) give the adequacy of each head's search
    (:mod:`bench.results.adequacy`); without them it is NA.
    """
    loo = loo or {}
    rows = []
    runs = stats.fill_axes(runs).sort_values(stats.RUN_KEYS, kind="stable")
    for keys, group in runs.groupby([*SETTING, "head_label"], sort=False):
        ok = group[group["value"].notna()]
        theta = dev_theta([loo.get(tuple(k)) for k in ok[stats.RUN_KEYS].itertuples(index=False)])
        rows.append(
            {
                **dict(zip([*SETTING, "head_label"], keys, strict=True)),
                **estimate(ok.set_index(PAIR)["value"], theta),
                "metric": group["metric"].iloc[0],
                "n": len(ok),
                "n_failed": int(group["failed"].sum()),
                "sd": float(ok["value"].std()),
                "constant": float(group["best_constant"].mean()),
                "threshold": float(group["threshold"].mean()),
            }
        )
    if not rows:
        return pd.DataFrame(columns=SCORE_COLUMNS)
    frame = pd.DataFrame(rows)
    low, high = _interval(frame, CONFIDENCE)
    bounds = [RANGES.get(m, (0.0, 1.0)) for m in frame["metric"]]
    lo, hi = (pd.Series(b, index=frame.index) for b in zip(*bounds, strict=True))
    frame = frame.assign(
        family=family_of(frame, studies),
        low=np.clip(low, lo, hi),
        high=np.clip(high, lo, hi),
        clipped=(low < lo) | (high > hi),
        best_constant=frame["constant"].where(np.isfinite(frame["constant"]), frame["threshold"]),
        beats_constant=low > frame["threshold"] + stats.BASELINE_ATOL,
        best=False,
        beats_all=False,
        interval_method=np.where(frame["se_dev"].isna(), *METHODS),
    )
    return adequacy.with_adequacy(frame, cells)[SCORE_COLUMNS]


def comparisons(
    runs: pd.DataFrame,
    score_frame: pd.DataFrame,
    loo: Mapping[tuple, np.ndarray] | None = None,
    studies: Sequence[Study] = (),
    margins: Sequence[Margin] = (),
    cells: Sequence[Mapping[str, Any]] = (),
    order: Sequence[str] = (),
) -> pd.DataFrame:
    """Every pair of heads within a setting, with one verdict (:data:`COMPARISON_COLUMNS`).

    Args as :func:`scores`, plus the ``cells``' provenance records (device, weights, commit)
    and the heads' ``order`` (``head_a`` comes first; heads not in it follow by name).
    """
    loo, where = loo or {}, {}
    for record in cells:  # per run key: (device, weights, commit)
        hardware = record.get("hardware") or {}
        path = str((record.get("encoder_info") or {}).get("path") or "")
        where[stats.run_key(dict(record.get("cell") or {}))] = (
            str(hardware.get("gpu") or "CPU") if hardware else "",
            "/".join(path.rstrip("/").split("/")[-2:]),
            str((record.get("git") or {}).get("commit") or ""),
        )
    beats = score_frame.set_index([*SETTING, "head_label"])["beats_constant"]
    margin_of = {(m.task, m.metric): m.margin / 100 for m in margins}
    rank = {h: i for i, h in enumerate(order)}
    rows = []
    runs = stats.fill_axes(runs).sort_values(stats.RUN_KEYS, kind="stable")
    for keys, group in runs[runs["value"].notna()].groupby(SETTING, sort=False):
        wide = group.pivot_table(index=PAIR, columns="head_label", values="value")
        heads = sorted(wide.columns, key=lambda h: (rank.get(h, len(rank)), h))
        metric = str(group["metric"].iloc[0])
        for a, b in itertools.combinations(heads, 2):
            pair = wide[[a, b]].dropna()
            ka, kb = ([(*keys[:2], h, *keys[2:], *r) for r in pair.index] for h in (a, b))
            theta = dev_theta([loo.get(k) for k in ka], [loo.get(k) for k in kb])
            found = [[where.get(k, ("", "", "")) for k in ks] for ks in (ka, kb)]
            both = np.array(found, dtype=str).reshape(2, -1, 3)  # (head, run, what)
            clash = ((both[0] != "") & (both[1] != "") & (both[0] != both[1])).any(axis=0)
            both_beat = bool(beats.get((*keys, a), False) and beats.get((*keys, b), False))
            rows.append(
                {
                    **dict(zip(SETTING, keys, strict=True)),
                    **estimate(pair[a] - pair[b], theta),
                    "metric": metric,
                    "head_a": a,
                    "head_b": b,
                    "n_pairs": len(pair),
                    "mean_a": float(pair[a].mean()),
                    "mean_b": float(pair[b].mean()),
                    "margin": margin_of.get((str(keys[0]), metric), math.nan),
                    "differs": ", ".join(np.array(["device", "weights", "commit"])[clash]),
                    "both_beat": both_beat,
                }
            )
    if not rows:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    frame = pd.DataFrame(rows)
    low90, high90 = _interval(frame, 0.90)
    spread, t_value = frame["se"] > 0, frame["mean"].abs() / frame["se"]
    frame = frame.assign(
        family=family_of(frame, studies),
        p=np.where(spread & (frame["differs"] == ""), 2 * sps.t.sf(t_value, frame["df"]), np.nan),
        low90=low90,
        high90=high90,
        min_margin=np.maximum(low90.abs(), high90.abs()),
        reason=np.select(
            [frame["differs"] != "", frame["se"].isna(), ~spread],
            [
                frame["differs"] + " differ",
                "fewer than two paired runs",
                "no spread: every paired difference the same",
            ],
            default="",
        ),
        interval_method=np.where(frame["se_dev"].isna(), *METHODS),
    )
    tested = frame["p"].notna()
    families = frame.loc[tested].groupby("family", sort=False)["p"]
    frame["m"] = families.transform("size").reindex(frame.index, fill_value=0)
    frame["p_holm"] = families.transform(lambda p: multipletests(p, method="holm")[1])
    sim_low, sim_high = _interval(frame, 1 - ALPHA / frame["m"].where(tested))
    frame = frame.assign(sim_low=sim_low.where(tested), sim_high=sim_high.where(tested))
    frame = frame.rename(columns={"mean": "estimate"})
    within = (frame["low90"] > -frame["margin"]) & (frame["high90"] < frame["margin"])
    equivalent, significant = frame["both_beat"] & within, frame["p_holm"] < ALPHA
    up, down = significant & (frame["estimate"] > 0), significant & (frame["estimate"] < 0)
    verdict = np.select(
        [frame["differs"] != "", equivalent, up, down],
        ["not comparable", "equivalent", "better", "worse"],
        default="inconclusive",
    )
    uses_90 = verdict == "equivalent"
    return frame.assign(
        verdict=verdict,
        shown=np.where(uses_90, "90%", "95% simultaneous"),
        low=np.where(uses_90, frame["low90"], frame["sim_low"]),
        high=np.where(uses_90, frame["high90"], frame["sim_high"]),
    )[COMPARISON_COLUMNS]


def mark_best(score_frame: pd.DataFrame, comparison_frame: pd.DataFrame) -> pd.DataFrame:
    """Fill ``best`` (highest mean of its setting) and ``beats_all`` ('better' than all)."""
    best = score_frame.dropna(subset=["mean"]).groupby(SETTING, sort=False)["mean"].idxmax()
    verdict = comparison_frame["verdict"]
    won = pd.concat(
        [
            comparison_frame.assign(head_label=comparison_frame[head], won=verdict == side)
            for head, side in (("head_a", "better"), ("head_b", "worse"))
        ]
    )
    beats = won.groupby([*SETTING, "head_label"])["won"].all().to_dict()
    keys = score_frame[[*SETTING, "head_label"]].itertuples(index=False, name=None)
    return score_frame.assign(
        best=score_frame.index.isin(best),
        beats_all=np.array([beats.get(k, False) for k in keys], dtype=bool),
    )


def setting_rows(frame: pd.DataFrame, setting: Mapping[str, Any] | pd.Series) -> pd.DataFrame:
    """The rows of one setting (``setting`` holds the :data:`SETTING` columns)."""
    return frame[(frame[SETTING] == pd.Series([setting[k] for k in SETTING], SETTING)).all(axis=1)]


#: The columns a comparison read the other way round swaps, and those it negates.
_PAIRS = [("head_a", "head_b"), ("mean_a", "mean_b"), ("low90", "high90"), ("sim_low", "sim_high")]
_SWAP = {**dict([*_PAIRS, ("low", "high")]), **{b: a for a, b in [*_PAIRS, ("low", "high")]}}
_NEGATE = ["estimate", "low90", "high90", "sim_low", "sim_high", "low", "high"]


def oriented(frame: pd.DataFrame, head_a: str, head_b: str | None = None) -> pd.DataFrame:
    """The comparisons of ``head_a`` (against ``head_b`` or every head), read as ``a − b``."""
    mine = frame[(frame["head_a"] == head_a) | (frame["head_b"] == head_a)]
    if head_b is not None:
        mine = mine[(mine["head_a"] == head_b) | (mine["head_b"] == head_b)]
    flipped = mine.rename(columns=_SWAP)[mine.columns]
    flipped[_NEGATE] = -flipped[_NEGATE]
    flipped["verdict"] = flipped["verdict"].replace({"better": "worse", "worse": "better"})
    return mine.where(mine["head_b"] != head_a, flipped, axis=0)


def build(
    runs: pd.DataFrame,
    predictions: pd.DataFrame,
    studies: Sequence[Study] = (),
    margins: Sequence[Margin] = (),
    cells: Sequence[Mapping[str, Any]] = (),
    order: Sequence[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(scores, comparisons)`` of run values and their predictions (empty: seeds only)."""
    loo = jackknife_runs(predictions, runs)
    score_frame = scores(runs, loo, studies, cells)
    # anchors (head=anchor: fitted by scikit-learn) are shown beside the heads, not ranked
    # among them: no verdicts, no share of a Holm family, never the setting's best
    anchor = runs["head"].eq(ANCHOR) if "head" in runs else pd.Series(False, runs.index)
    heads = runs[~anchor]
    comparison_frame = comparisons(heads, score_frame, loo, studies, margins, cells, order)
    ranked = score_frame[~score_frame["head_label"].isin(runs.loc[anchor, "head_label"])]
    marked, done = mark_best(ranked, comparison_frame), score_frame.copy()
    done.loc[marked.index, ["best", "beats_all"]] = marked[["best", "beats_all"]]
    return done, comparison_frame


def from_results(
    table: pd.DataFrame,
    predictions: pd.DataFrame,
    cells: Sequence[Mapping[str, Any]],
    command: str,
    conf_dir: Path | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(scores, comparisons)`` of a results table, with its launch ``command``'s preset."""
    studies, margins = studies_of(command, conf_dir), margins_of(command, conf_dir)
    return build(stats.run_values(table), predictions, studies, margins, cells, head_order())


def frame_files(score_frame: pd.DataFrame, comparison_frame: pd.DataFrame) -> dict[str, bytes]:
    """``scores`` and ``comparisons`` as the contents of their CSV and Parquet files."""
    files: dict[str, Any] = {}
    for name, frame in zip(FRAME_NAMES, (score_frame, comparison_frame), strict=True):
        files[f"{name}.csv"] = frame.to_csv(index=False).encode("utf-8")
        files[f"{name}.parquet"] = frame.to_parquet(index=False)
    return files


def read_frames(folder: str | Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The ``scores`` and ``comparisons`` a results directory holds (None: not written)."""
    paths = [Path(folder) / f"{name}.parquet" for name in FRAME_NAMES]
    found = all(p.is_file() for p in paths)
    return (pd.read_parquet(paths[0]), pd.read_parquet(paths[1])) if found else None
