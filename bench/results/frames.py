"""Statistics as data: one row per setting × head (``scores``), one per head pair (``comparisons``).

Everything a table, figure, README or command shows about "which head?" reads these two
frames; no other module tests heads against each other. ``docs/statistics.md`` explains
the method for users. In short:

* A **setting** is every axis of a cell except head and seed (:data:`SETTING`); a head's
  runs in a setting are its seeds (and, in a crossed study, batch orders).
* **Two sources of noise.** A head's mean over seeds varies with the seeds and with the
  finite dev set that every seed is scored on. Its standard error is
  ``se² = se_seed² + se_dev²``: ``se_seed`` from the seed-to-seed spread (``sd/√n``, or the
  two-way random-effects error of :mod:`bench.results.crossed` for seeds crossed with
  batch orders) and ``se_dev`` the jackknife over dev examples (CoNLL: sentences) of the
  mean over seeds, recomputed from the committed predictions. A comparison does the same
  with the paired difference ``a − b`` (the same seeds, the same examples). The t
  reference takes Welch–Satterthwaite degrees of freedom. Without predictions,
  ``se_dev`` is NaN and only the seeds count (``interval_method`` says so).
* **Verdicts** (:func:`comparisons`): ``not comparable`` where the two heads' paired runs
  differ in device, weights or commit (no p-value); ``equivalent`` where the 90% interval
  lies inside ±margin (declared per task and metric in the experiment file) and both heads
  beat the best constant; ``better``/``worse`` where Holm's p (within the comparison's
  family, :mod:`statsmodels`) is below 0.05; ``inconclusive`` otherwise.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps
from seqeval.scheme import IOB2, Entities
from statsmodels.stats.multitest import multipletests

from bench.axes.heads import head_order
from bench.data.tasks import ALL_TASKS, TaskSpec, TokenTaskSpec
from bench.results import crossed, stats
from bench.results.studies import Margin, Study, family_of, margins_of, studies_of

#: What a setting is: every axis of a cell except head and seed.
SETTING = list(stats.SETTING_KEYS)
#: What pairs two heads' runs.
PAIR = list(stats.PAIR_KEYS)
ALPHA = 0.05
CONFIDENCE = 0.95
#: Run values and differences are rounded to this many decimals for their spread.
DECIMALS = 12
#: The range of each metric (an interval end beyond it is clipped and marked).
RANGES = {"mcc": (-1.0, 1.0), "pearson": (-1.0, 1.0), "spearman": (-1.0, 1.0)}
VERDICTS = ("better", "worse", "equivalent", "inconclusive", "not comparable")
#: The frames' files beside ``results.csv``.
FRAME_NAMES = ("scores", "comparisons")
SCORE_COLUMNS = [
    *SETTING,
    "head_label",
    "family",
    "metric",
    "n",
    "n_failed",
    "mean",
    "sd",
    "se_seed",
    "se_dev",
    "se",
    "df",
    "low",
    "high",
    "clipped",
    "best_constant",
    "beats_constant",
    "best",
    "beats_all",
    "interval_method",
]
COMPARISON_COLUMNS = [
    *SETTING,
    "family",
    "metric",
    "head_a",
    "head_b",
    "n_pairs",
    "mean_a",
    "mean_b",
    "estimate",
    "se_seed",
    "se_dev",
    "se",
    "df",
    "p",
    "m",
    "p_holm",
    "low90",
    "high90",
    "sim_low",
    "sim_high",
    "margin",
    "min_margin",
    "verdict",
    "reason",
    "shown",
    "low",
    "high",
    "interval_method",
]


# --------------------------------------------------------------------------- dev examples


def _class_ids(spec: TaskSpec, values: pd.Series) -> np.ndarray:
    names = {name: i for i, name in enumerate(spec.label_names)}
    return np.asarray([names[spec.tsv_label_map.get(v, v)] for v in values], dtype=np.int64)


def _counts(metric: str, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per example, the additive counts the metric is a function of (units × counts)."""
    one = np.ones_like(y, dtype=float)
    if metric == "accuracy":
        return np.stack([(y == p).astype(float), one], axis=1)
    if metric in ("pearson", "spearman"):
        if metric == "spearman":  # ranks of the whole split (the jackknife keeps them)
            y, p = sps.rankdata(y), sps.rankdata(p)
        y, p = y.astype(float), p.astype(float)
        return np.stack([one, y, p, y * y, p * p, y * p], axis=1)
    tp = ((y == 1) & (p == 1)).astype(float)
    fp = ((y != 1) & (p == 1)).astype(float)
    fn = ((y == 1) & (p != 1)).astype(float)
    if metric == "f1":
        return np.stack([tp, fp, fn], axis=1)
    if metric == "mcc":
        tn = ((y != 1) & (p != 1)).astype(float)
        return np.stack([tp, tn, fp, fn], axis=1)
    raise ValueError(f"no jackknife for metric {metric!r}")


def _metric(metric: str, c: np.ndarray) -> np.ndarray:
    """The metric from summed counts (``c``: ... × counts), vectorised."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "accuracy":
            return c[..., 0] / c[..., 1]
        if metric == "f1":
            den = 2 * c[..., 0] + c[..., 1] + c[..., 2]
            return np.where(den > 0, 2 * c[..., 0] / np.where(den > 0, den, 1), 0.0)
        if metric == "mcc":
            tp, tn, fp, fn = (c[..., k] for k in range(4))
            den = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
            return np.where(den > 0, (tp * tn - fp * fn) / np.where(den > 0, den, 1), 0.0)
        n, sx, sy, sxx, syy, sxy = (c[..., k] for k in range(6))
        return (n * sxy - sx * sy) / np.sqrt((n * sxx - sx**2) * (n * syy - sy**2))


def _entity_counts(rows: pd.DataFrame) -> np.ndarray:
    """Per sentence of a CoNLL split: [correct, spurious, missed] entities (strict IOB2)."""
    ordered = rows.sort_values(["example", "token"], kind="stable")
    gold = ordered.groupby("example", sort=True)["label"].apply(list).tolist()
    pred = ordered.groupby("example", sort=True)["pred"].apply(list).tolist()
    g = [{e.to_tuple() for e in s} for s in Entities(gold, IOB2).entities]
    p = [{e.to_tuple() for e in s} for s in Entities(pred, IOB2).entities]
    counts = [[len(a & b), len(b - a), len(a - b)] for a, b in zip(g, p, strict=True)]
    return np.asarray(counts, dtype=float)


def jackknife(task: str, metric: str, rows: pd.DataFrame) -> np.ndarray:
    """One run's metric with each dev unit left out in turn (unit: example, CoNLL sentence).

    Args:
        task: The task (its spec says how labels are written).
        metric: The metric (the task's main metric).
        rows: The run's prediction rows of one split (``predictions.parquet`` columns).

    Returns:
        The leave-one-out values in unit order (example, then sentence, ascending).
    """
    spec = ALL_TASKS[task]
    if isinstance(spec, TokenTaskSpec):
        counts, kind = _entity_counts(rows), "f1"
    else:
        ordered = rows.sort_values("example", kind="stable")
        if spec.is_regression:
            y, p = (ordered[c].astype(float).to_numpy() for c in ("label", "pred"))
        else:
            y, p = (_class_ids(spec, ordered[c].astype(str)) for c in ("label", "pred"))
        counts, kind = _counts(metric, y, p), metric
    return _metric(kind, counts.sum(axis=0) - counts)


def jackknife_runs(predictions: pd.DataFrame, runs: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """:func:`jackknife` of every run of ``runs`` that has dev predictions, by run key."""
    if predictions.empty:
        return {}
    dev = stats.fill_axes(predictions[predictions["split"] == "dev"])
    wanted = {tuple(k) for k in runs[stats.RUN_KEYS].itertuples(index=False)}
    metric = dict(zip(runs["task"], runs["metric"], strict=False))
    out: dict[tuple, np.ndarray] = {}
    for key, rows in dev.groupby(stats.RUN_KEYS, sort=False):
        if key in wanted:
            out[key] = jackknife(str(key[0]), metric[key[0]], rows)
    return out


def dev_theta(
    loo: Sequence[np.ndarray | None], minus: Sequence[np.ndarray | None] = ()
) -> np.ndarray | None:
    """The leave-one-out mean over runs (minus the other head's, for a paired difference).

    Returns:
        Per dev unit, the statistic without it; None where a run has no predictions
        (``loo`` empty) or the runs' splits differ in size.
    """
    arrays = [x for x in [*loo, *minus] if x is not None]
    if not loo or len(arrays) < len(loo) + len(minus):
        return None
    if any(x.shape != arrays[0].shape for x in arrays):
        return None
    theta = np.mean(np.stack(arrays[: len(loo)]), axis=0)
    return theta - np.mean(np.stack(arrays[len(loo) :]), axis=0) if minus else theta


def _se_dev(theta: np.ndarray | None) -> float:
    """The jackknife standard error of a statistic from its leave-one-out values."""
    if theta is None or theta.size < 2 or not np.all(np.isfinite(theta)):
        return math.nan
    n = theta.size
    return float(math.sqrt((n - 1) / n * np.sum((theta - theta.mean()) ** 2)))


# --------------------------------------------------------------------------- standard errors


@dataclass(frozen=True)
class Estimate:
    """A mean over runs with its standard errors and Welch–Satterthwaite df."""

    mean: float
    se_seed: float
    se_dev: float
    se: float
    df: float

    @property
    def method(self) -> str:
        """Which noise the interval counts."""
        return "seeds" if math.isnan(self.se_dev) else "seeds and dev examples"


def estimate(values: pd.Series, theta: np.ndarray | None = None) -> Estimate:
    """The mean of run values (indexed by :data:`PAIR`) with both sources of noise.

    Args:
        values: One value per run (a head's score, or a paired difference).
        theta: :func:`dev_theta` of the same runs (None: no predictions, the dev term is NaN).

    Returns:
        The :class:`Estimate` (NaN errors with fewer than two runs).
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
        return Estimate(float(x.mean()) if x.size else math.nan, *(4 * [math.nan]))
    se_d = _se_dev(theta)
    n_dev = theta.size if theta is not None else 0
    se = math.sqrt(se_s**2 + (0.0 if math.isnan(se_d) else se_d**2))
    parts = se_s**4 / df_s + (0.0 if math.isnan(se_d) else se_d**4 / max(n_dev - 1, 1))
    df = se**4 / parts if parts > 0 else df_s
    return Estimate(mean, se_s, se_d, se, float(df))


def interval(est: Estimate, confidence: float) -> tuple[float, float]:
    """The two-sided t interval ``mean ± t·se`` (NaNs without an error)."""
    if not math.isfinite(est.se):
        return math.nan, math.nan
    half = float(sps.t.ppf(0.5 + confidence / 2, est.df)) * est.se if est.se > 0 else 0.0
    return est.mean - half, est.mean + half


# --------------------------------------------------------------------------- frames


def _setting_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return stats.fill_axes(runs).sort_values(stats.RUN_KEYS, kind="stable")


_FILLED = ("family", "best", "beats_all")


def scores(
    runs: pd.DataFrame,
    loo: Mapping[tuple, np.ndarray] | None = None,
    studies: Sequence[Study] = (),
) -> pd.DataFrame:
    """One row per setting × head (:data:`SCORE_COLUMNS`).

    Args:
        runs: :func:`bench.results.stats.run_values` (one row per run).
        loo: :func:`jackknife_runs` of those runs (None or empty: seeds only).
        studies: The experiment's studies (each its own family).

    Returns:
        The frame; ``best``/``beats_all`` are False until :func:`mark_best` fills them.
    """
    loo = loo or {}
    rows = []
    for keys, group in _setting_runs(runs).groupby([*SETTING, "head_label"], sort=False):
        ok = group[group["value"].notna()]
        keys_ok = [tuple(k) for k in ok[stats.RUN_KEYS].itertuples(index=False)]
        est = estimate(ok.set_index(PAIR)["value"], dev_theta([loo.get(k) for k in keys_ok]))
        low, high = interval(est, CONFIDENCE)
        lo, hi = RANGES.get(str(group["metric"].iloc[0]), (0.0, 1.0))
        constant = float(group["best_constant"].mean())
        threshold = float(group["threshold"].mean())
        rows.append(
            {
                **dict(zip([*SETTING, "head_label"], keys, strict=True)),
                "metric": group["metric"].iloc[0],
                "n": len(ok),
                "n_failed": int(group["failed"].sum()),
                "mean": est.mean,
                "sd": float(ok["value"].std(ddof=1)) if len(ok) > 1 else math.nan,
                "se_seed": est.se_seed,
                "se_dev": est.se_dev,
                "se": est.se,
                "df": est.df,
                "low": max(low, lo) if math.isfinite(low) else low,
                "high": min(high, hi) if math.isfinite(high) else high,
                "clipped": bool(low < lo or high > hi),
                "best_constant": constant if math.isfinite(constant) else threshold,
                "beats_constant": bool(
                    math.isfinite(threshold)
                    and math.isfinite(low)
                    and low > threshold + stats.BASELINE_ATOL
                ),
                "interval_method": est.method,
            }
        )
    frame = pd.DataFrame(rows, columns=[c for c in SCORE_COLUMNS if c not in _FILLED])
    frame = frame.assign(family=family_of(frame, studies), best=False, beats_all=False)
    return frame[SCORE_COLUMNS]


def _provenance(cells: Sequence[Mapping[str, Any]]) -> dict[tuple, tuple[str, str, str]]:
    """Per run key: (device, weights, commit) from the cells' provenance records."""
    out = {}
    for record in cells:
        cell = dict(record.get("cell") or {})
        hardware = record.get("hardware") or {}
        device = str(hardware.get("gpu") or "CPU") if hardware else ""
        info = record.get("encoder_info") or {}
        path = str(info.get("path") or "")
        weights = "/".join(path.rstrip("/").split("/")[-2:]) if path else ""
        commit = str((record.get("git") or {}).get("commit") or "")
        out[stats.run_key(cell)] = (device, weights, commit)
    return out


def _differs(a: list[tuple[str, str, str]], b: list[tuple[str, str, str]]) -> str:
    """What differs between two heads' paired runs (``""``: nothing recorded differs)."""
    names = ("device", "weights", "commit")
    found = [
        name
        for k, name in enumerate(names)
        if any(x[k] and y[k] and x[k] != y[k] for x, y in zip(a, b, strict=True))
    ]
    return ", ".join(found)


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

    Args:
        runs: :func:`bench.results.stats.run_values`.
        score_frame: :func:`scores` of the same runs (whether each head beats the constant).
        loo: :func:`jackknife_runs` (None or empty: seeds only).
        studies: The experiment's studies: each is a Holm family, the rest the headline.
        margins: The equivalence margins the experiment declares.
        cells: The cells' provenance records (``cells.json``): device, weights, commit.
        order: Heads in display order (``head_a`` comes first); others follow by name.

    Returns:
        The frame, one row per unordered pair, ``estimate = mean(a − b)`` over paired runs.
    """
    loo = loo or {}
    where = _provenance(cells)
    beats = score_frame.set_index([*SETTING, "head_label"])["beats_constant"]
    margin_of = {(m.task, m.metric): m.margin / 100 for m in margins}
    rank = {h: i for i, h in enumerate(order)}
    rows = []
    runs = _setting_runs(runs)
    for keys, group in runs[runs["value"].notna()].groupby(SETTING, sort=False):
        wide = group.pivot_table(index=PAIR, columns="head_label", values="value")
        heads = sorted(wide.columns, key=lambda h: (rank.get(h, len(rank)), h))
        metric = str(group["metric"].iloc[0])
        margin = margin_of.get((str(keys[0]), metric), math.nan)
        for i, a in enumerate(heads):
            for b in heads[i + 1 :]:
                pair = wide[[a, b]].dropna()
                ka = [(*keys[:2], a, *keys[2:], *r) for r in pair.index]
                kb = [(*keys[:2], b, *keys[2:], *r) for r in pair.index]
                theta = dev_theta([loo.get(k) for k in ka], [loo.get(k) for k in kb])
                est = estimate(pair[a] - pair[b], theta)
                unknown = ("", "", "")
                differs = _differs(
                    [where.get(k, unknown) for k in ka], [where.get(k, unknown) for k in kb]
                )
                lo90, hi90 = interval(est, 0.90)
                rows.append(
                    {
                        **dict(zip(SETTING, keys, strict=True)),
                        "metric": metric,
                        "head_a": a,
                        "head_b": b,
                        "n_pairs": len(pair),
                        "mean_a": float(pair[a].mean()),
                        "mean_b": float(pair[b].mean()),
                        "estimate": est.mean,
                        "se_seed": est.se_seed,
                        "se_dev": est.se_dev,
                        "se": est.se,
                        "df": est.df,
                        "p": math.nan if differs else _p_value(est),
                        "low90": lo90,
                        "high90": hi90,
                        "margin": margin,
                        "min_margin": max(abs(lo90), abs(hi90)),
                        "reason": _why_untested(est, differs),
                        "comparable": not differs,
                        "both_beat": bool(
                            beats.get((*keys, a), False) and beats.get((*keys, b), False)
                        ),
                        "interval_method": est.method,
                    }
                )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    frame["family"] = family_of(frame, studies)
    return _verdicts(_holm(frame))[COMPARISON_COLUMNS]


def _p_value(est: Estimate) -> float:
    """Two-sided t-test of ``mean = 0`` (NaN without a spread: no test)."""
    if not math.isfinite(est.se) or est.se == 0:
        return math.nan
    return float(2 * sps.t.sf(abs(est.mean) / est.se, est.df))


def _why_untested(est: Estimate, differs: str) -> str:
    """Why a comparison has no p-value (``""``: it has one)."""
    if differs:
        return f"{differs} differ"
    if not math.isfinite(est.se):
        return "fewer than two paired runs"
    return "no spread: every paired difference the same" if est.se == 0 else ""


def _holm(frame: pd.DataFrame) -> pd.DataFrame:
    """Holm's p within each family (statsmodels) and Bonferroni intervals over its m tests."""
    frame = frame.assign(m=0, p_holm=math.nan, sim_low=math.nan, sim_high=math.nan)
    for _, part in frame.groupby("family", sort=False):
        tested = part[part["p"].notna()]
        if tested.empty:
            continue
        m = len(tested)
        frame.loc[tested.index, "m"] = m
        frame.loc[tested.index, "p_holm"] = multipletests(tested["p"], method="holm")[1]
        for i, r in tested.iterrows():
            est = Estimate(r["estimate"], r["se_seed"], r["se_dev"], r["se"], r["df"])
            frame.loc[i, ["sim_low", "sim_high"]] = interval(est, 1 - ALPHA / m)
    return frame


def _verdicts(frame: pd.DataFrame) -> pd.DataFrame:
    """The one verdict per comparison and the interval it uses."""
    equivalent = (
        frame["both_beat"]
        & (frame["low90"] > -frame["margin"])
        & (frame["high90"] < frame["margin"])
    )
    significant = frame["p_holm"] < ALPHA
    verdict = np.select(
        [
            ~frame["comparable"],
            equivalent,
            significant & (frame["estimate"] > 0),
            significant & (frame["estimate"] < 0),
        ],
        ["not comparable", "equivalent", "better", "worse"],
        default="inconclusive",
    )
    frame = frame.assign(verdict=verdict)
    uses_90 = frame["verdict"] == "equivalent"
    return frame.assign(
        shown=np.where(uses_90, "90%", "95% simultaneous"),
        low=np.where(uses_90, frame["low90"], frame["sim_low"]),
        high=np.where(uses_90, frame["high90"], frame["sim_high"]),
    )


def mark_best(score_frame: pd.DataFrame, comparison_frame: pd.DataFrame) -> pd.DataFrame:
    """Fill ``best`` (highest mean of its setting) and ``beats_all`` ('better' than all)."""
    out = score_frame.copy()
    for _, group in out.groupby(SETTING, sort=False):
        if group["mean"].notna().any():
            out.loc[group["mean"].idxmax(), "best"] = True
    for i, r in out.iterrows():
        rows = oriented(setting_rows(comparison_frame, r), str(r["head_label"]))
        out.loc[i, "beats_all"] = bool(len(rows) and (rows["verdict"] == "better").all())
    return out


def setting_rows(frame: pd.DataFrame, setting: Mapping[str, Any] | pd.Series) -> pd.DataFrame:
    """The rows of one setting (``setting`` holds the :data:`SETTING` columns)."""
    inside = np.ones(len(frame), dtype=bool)
    for key in SETTING:
        inside &= (frame[key] == setting[key]).to_numpy()
    return frame[inside]


_FLIP = {"better": "worse", "worse": "better"}


def oriented(frame: pd.DataFrame, head_a: str, head_b: str | None = None) -> pd.DataFrame:
    """The comparisons of ``head_a`` (against ``head_b`` or every head), read as ``a − b``.

    Rows stored the other way round are flipped: estimate and intervals change sign, means
    swap, ``better``/``worse`` swap; p-values and the other verdicts stay.
    """
    mine = frame[(frame["head_a"] == head_a) | (frame["head_b"] == head_a)]
    if head_b is not None:
        mine = mine[(mine["head_a"] == head_b) | (mine["head_b"] == head_b)]
    flip = mine["head_b"] == head_a
    out = mine.copy()
    for x, y in (("head_a", "head_b"), ("mean_a", "mean_b")):
        out.loc[flip, [x, y]] = mine.loc[flip, [y, x]].to_numpy()
    for low, high in (("low90", "high90"), ("sim_low", "sim_high"), ("low", "high")):
        out.loc[flip, [low, high]] = -mine.loc[flip, [high, low]].to_numpy()
    out.loc[flip, "estimate"] = -mine.loc[flip, "estimate"]
    out.loc[flip, "verdict"] = mine.loc[flip, "verdict"].map(lambda v: _FLIP.get(v, v))
    return out


def build(
    runs: pd.DataFrame,
    predictions: pd.DataFrame,
    studies: Sequence[Study] = (),
    margins: Sequence[Margin] = (),
    cells: Sequence[Mapping[str, Any]] = (),
    order: Sequence[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both frames of some runs: ``(scores, comparisons)``.

    Args:
        runs: :func:`bench.results.stats.run_values` (main metric, dev split).
        predictions: ``predictions.parquet`` rows (empty: intervals count seeds only).
        studies: The experiment's studies (families).
        margins: Its equivalence margins.
        cells: Its cells' provenance records.
        order: Heads in display order.
    """
    loo = jackknife_runs(predictions, runs)
    score_frame = scores(runs, loo, studies)
    comparison_frame = comparisons(runs, score_frame, loo, studies, margins, cells, order)
    return mark_best(score_frame, comparison_frame), comparison_frame


def from_results(
    table: pd.DataFrame,
    predictions: pd.DataFrame,
    cells: Sequence[Mapping[str, Any]],
    command: str,
    conf_dir: Path | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both frames of a results table, with the families and margins of its launch's preset.

    Args:
        table: The tidy results table.
        predictions: Its ``predictions.parquet`` rows (empty: seeds only).
        cells: Its cells' provenance records (``cells.json``).
        command: The newest launch's command line (it names the experiment preset).
        conf_dir: The Hydra config tree (default: the package's).

    Returns:
        ``(scores, comparisons)``, main metric on the dev split.
    """
    return build(
        stats.run_values(table),
        predictions,
        studies_of(command, conf_dir),
        margins_of(command, conf_dir),
        cells,
        head_order(),
    )


def frame_files(score_frame: pd.DataFrame, comparison_frame: pd.DataFrame) -> dict[str, bytes]:
    """``scores`` and ``comparisons`` as the contents of their CSV and Parquet files."""
    files = {}
    for name, frame in zip(FRAME_NAMES, (score_frame, comparison_frame), strict=True):
        text, parquet = io.StringIO(newline=""), io.BytesIO()
        frame.to_csv(text, index=False)
        frame.to_parquet(parquet, index=False)
        files[f"{name}.csv"] = text.getvalue().encode("utf-8")
        files[f"{name}.parquet"] = parquet.getvalue()
    return files


def read_frames(folder: str | Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The ``scores`` and ``comparisons`` a results directory holds (None: not written)."""
    paths = [Path(folder) / f"{name}.parquet" for name in FRAME_NAMES]
    if not all(p.is_file() for p in paths):
        return None
    score_frame, comparison_frame = (pd.read_parquet(p) for p in paths)
    return score_frame, comparison_frame
