"""Learning curves and the report's figures: nested training subsets that all select on one
held-out slice (``selection.carve=first``), the reference curve presets and their cost
estimate, and the figures and sections of :mod:`bench.report.figures` /
:mod:`bench.report.sections`, whose numbers are checked against the frames they draw and
against NumPy recomputations (never against wording)."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bs4 import BeautifulSoup
from hydra.core.override_parser.overrides_parser import OverridesParser
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from omegaconf import OmegaConf

from bench.axes.sweep import expand
from bench.cell import config_hash
from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.selection import carve_first, carve_selection
from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_tokenizer
from bench.report import figures
from bench.report.context import ReportContext
from bench.report.inputs import ReportInputs
from bench.report.sections import (
    cost_section,
    curves_section,
    spread_section,
    training_size_section,
)
from bench.report.style import Palette
from bench.results import stats
from bench.results.collect import tidy
from bench.results.curves import sized_settings, split_by_size
from bench.results.result_file import with_axes
from bench.run.plan import plan
from bench.run.preflight import check_protocol
from conftest import CONF, ROOT

SIZES = {"rte": [100, 200, 500, 1000, 2000], "sst2": [100, 200, 500, 1000, 2000, 4000]}


def _labels(data_dir: Path, task: str) -> list:
    spec = get_task(task)
    return read_glue_tsv(glue_file(data_dir, spec, "train.tsv"), spec)["label"]


# --- nested subsets, one slice -----------------------------------------------------------


@pytest.mark.parametrize("task", ["rte", "sst2"])
def test_subsets_are_nested_and_every_size_selects_on_one_disjoint_slice(data_dir, task):
    labels = _labels(data_dir, task)
    n = len(labels)
    carved = {size: carve_first(labels, size, 490, 0, "class", task) for size in SIZES[task]}
    slices = {tuple(select.tolist()) for _, select in carved.values()}
    assert len(slices) == 1  # the same slice at every size ...
    select = set(next(iter(slices)))
    assert len(select) == 490
    # ... the one the whole training split gets (without a subset, both carves agree)
    whole_train, whole_select = carve_selection(labels, None, 490, 0, "class", task)
    assert set(whole_select.tolist()) == select
    assert carve_first(labels, None, 490, 0, "class", task)[0].tolist() == whole_train.tolist()
    previous: set[int] = set()
    for size in SIZES[task]:
        train = set(carved[size][0].tolist())
        assert len(train) == size and not train & select  # disjoint from the slice
        assert previous < train  # nested: every smaller subset is inside this one
        previous = train
    share = Counter(labels)  # stratified: each class keeps its share of the split, within one
    got = Counter(labels[i] for i in select)
    for label, count in share.items():
        assert abs(got[label] - count * 490 / n) < 1
    if task == "rte":  # every example outside the slice is the largest subset
        assert previous == set(range(n)) - select


def test_a_size_beyond_what_the_slice_leaves_names_the_key_the_task_and_the_maximum(data_dir):
    labels = _labels(data_dir, "rte")
    assert len(carve_first(labels, 2000, 490, 0, "class", "rte train")[0]) == 2000
    message = r"data.train_size=2001 but rte train has 2490 examples .* at most 2000 remain"
    with pytest.raises(ConfigError, match=message):
        carve_first(labels, 2001, 490, 0, "class", "rte train")
    with pytest.raises(ConfigError, match="at most 1990 remain"):
        carve_first(labels, 2000, 500, 0, "class", "rte train")


def test_the_default_carve_keeps_every_hash_and_first_is_hashed(compose_cfg):
    default = compose_cfg("seed=1", "data.train_size=400")
    assert default.selection.carve == "last"
    old = compose_cfg("seed=1", "data.train_size=400")
    del old.selection["carve"]  # a config from before the option
    assert config_hash(default) == config_hash(old)
    first = compose_cfg("seed=1", "data.train_size=400", "selection.carve=first")
    assert config_hash(first) != config_hash(default)


def test_an_unknown_carve_is_refused_with_the_valid_choices(compose_cfg):
    check_protocol(compose_cfg("seed=1", "selection.carve=first"))
    with pytest.raises(ConfigError, match=r"selection.carve='middle'; valid choices: last, first"):
        check_protocol(compose_cfg("seed=1", "selection.carve=middle"))


def test_the_datamodule_trains_on_the_nested_subsets_and_records_the_slice(data_dir):
    encoder = OmegaConf.to_container(OmegaConf.load(CONF / "encoder" / "minilm.yaml"))
    selection = {"name": "heldout", "size": 40, "carve": "first"}
    served = {}
    for size in (50, 120):
        dm = GlueDataModule(
            get_task("rte"),
            load_tokenizer(encoder),
            data_dir=data_dir,
            train_size=size,
            data_seed=0,
            max_length=32,
            batch_size=16,
            eval_batch_size=64,
            selection=selection,
        )
        dm.setup("fit")
        served[size] = ({dm.train[i]["idx"] for i in range(len(dm.train))}, dm.selection_ids)
    (small, ids), (large, ids_large) = served[50], served[120]
    assert ids == ids_large and len(ids) == 40 and not (large & set(ids))
    assert len(small) == 50 and small < large
    labels = _labels(data_dir, "rte")
    assert ids == carve_first(labels, 50, 40, 0, "class", "rte train")[1].tolist()


# --- the report's figures ----------------------------------------------------------------

HEADS = ["linear", "pooler-random", "bilstm"]
SCORE_COLUMNS = [*stats.SETTING_KEYS, "head_label", "metric", "n", "mean", "low", "high"]


def _scores(rows: list[tuple]) -> pd.DataFrame:
    """A scores frame by hand: (task, freeze, size, head, metric, mean, low, high, constant)."""
    frame = pd.DataFrame(
        [
            {
                "task": task,
                "encoder": "minilm",
                "freeze_label": freeze,
                "train_size": size,
                "head_label": head,
                "metric": metric,
                "n": 5,
                "mean": mean,
                "low": low,
                "high": high,
                "best_constant": constant,
            }
            for task, freeze, size, head, metric, mean, low, high, constant in rows
        ]
    )
    lower = frame["metric"].map({"mcc": -1.0}).fillna(0.0)
    frame["clipped"] = (frame["low"] <= lower) | (frame["high"] >= 1.0)
    frame["beats_constant"] = frame["low"] > frame["best_constant"]
    setting = frame.groupby(stats.SETTING_KEYS)["mean"]
    frame["best"] = frame["mean"] == setting.transform("max")
    frame["beats_all"] = False
    return frame


def _settings(n: int) -> pd.DataFrame:
    """``n`` settings of SST-2 (frozen, sizes 100, 200, ...), each with the three heads."""
    rng = np.random.default_rng(n)
    rows = []
    for i in range(n):
        for head in HEADS:
            mean = rng.uniform(0.7, 0.9)
            rows.append(
                (
                    "sst2",
                    "frozen",
                    100 * (i + 1),
                    head,
                    "accuracy",
                    mean,
                    mean - 0.02,
                    mean + 0.02,
                    0.509,
                )
            )
    return _scores(rows)


SCORES = _scores(
    [
        ("sst2", "frozen", 2000, "linear", "accuracy", 0.712, 0.70, 0.724, 0.509),
        ("sst2", "frozen", 2000, "pooler-random", "accuracy", 0.716, 0.705, 0.727, 0.509),
        ("sst2", "frozen", 2000, "bilstm", "accuracy", 0.788, 0.78, 0.796, 0.509),
        ("cola", "frozen", 2000, "linear", "mcc", 0.04, -1.0, 0.3, 0.0),  # clipped below
        ("cola", "frozen", 2000, "bilstm", "mcc", 0.05, 0.02, 0.08, 0.0),
        ("rte", "full", 1000, "linear", "accuracy", 0.93, 0.85, 1.0, 0.527),  # clipped above
        ("rte", "full", 1000, "bilstm", "accuracy", 0.55, 0.50, 0.60, 0.527),
    ]
)


def _panel(fig: Figure, title: str):
    shown = {ax: ax.get_title().replace("\n", " ") for ax in fig.axes if ax.get_visible()}
    found = [ax for ax, text in shown.items() if text == title]  # however the panel wraps it
    assert len(found) == 1, [ax.get_title() for ax in fig.axes]
    return found[0]


def _dots(ax, marker="o"):
    return [ln for ln in ax.lines if ln.get_marker() == marker and len(ln.get_xdata()) == 1]


def _dashed(ax):
    return [ln for ln in ax.lines if ln.get_linestyle() == "--"]


def _overlapping_text(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose boxes overlap, and texts cut off by the figure's edge."""
    canvas = FigureCanvasAgg(fig)  # also for a figure the report has already closed
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, ax.xaxis.get_offset_text()]
        for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            every = axis.get_major_ticks() + axis.get_minor_ticks()
            ticks = [(tick.get_loc(), tick.label1) for tick in every]
            lo, hi = min(lo, hi), max(lo, hi)
            texts += [t for loc, t in ticks if lo <= loc <= hi and t.get_visible()]
    for legend in fig.legends:
        texts += legend.get_texts()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_text()]
    cut = [
        (name, "edge")
        for name, box in boxes
        if not fig.bbox.contains(box.x0, box.y0) or not fig.bbox.contains(box.x1, box.y1)
    ]
    return cut + [(a, b) for (a, x), (b, y) in itertools.combinations(boxes, 2) if x.overlaps(y)]


PALETTE = Palette(HEADS, ["frozen", "full"])


@pytest.fixture
def drawn(monkeypatch):
    """The figures the sections draw, per figure function."""
    found: dict[str, list[Figure]] = {}

    def spy(name: str):
        draw = getattr(figures, name)

        def drawn_by(*args, **kwargs):
            fig = draw(*args, **kwargs)
            found.setdefault(name, []).append(fig)
            return fig

        return drawn_by

    for name in ("curves", "cost_scatter", "seed_strips"):
        monkeypatch.setattr(figures, name, spy(name))
    return found


def test_the_scores_plot_draws_every_mean_and_interval_of_the_frame_with_the_best_constant():
    fig = figures.scores_plot(SCORES, PALETTE, multi_encoder=False)
    assert fig is not None
    titles = {
        "SST-2 frozen": ("sst2", "frozen"),
        "CoLA frozen": ("cola", "frozen"),
        "RTE full": ("rte", "full"),
    }
    for title, (task, freeze) in titles.items():
        ax = _panel(fig, title)
        rows = SCORES[(SCORES["task"] == task) & (SCORES["freeze_label"] == freeze)]
        heads = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        dots = {heads[int(d.get_ydata()[0])]: d for d in _dots(ax)}
        assert sorted(dots) == sorted(rows["head_label"])
        for r in rows.itertuples():
            dot = dots[r.head_label]
            assert dot.get_xdata()[0] == pytest.approx(100 * r.mean)
            assert (dot.get_markerfacecolor() == "white") == (not r.beats_constant)
            assert (dot.get_markeredgecolor() == "black") == bool(r.best)
            bars = [
                ln
                for ln in ax.lines
                if len(ln.get_xdata()) == 2 and ln.get_marker() in ("None", None, "")
            ]
            spans = {
                tuple(np.round(ln.get_xdata(), 6))
                for ln in bars
                if ln.get_ydata()[0] == dot.get_ydata()[0]
            }
            assert (round(100 * r.low, 6), round(100 * r.high, 6)) in spans
        (constant,) = _dashed(ax)
        assert constant.get_xdata()[0] == pytest.approx(100 * rows["best_constant"].iloc[0])
    assert figures.scores_plot(SCORES.iloc[:0], PALETTE, False) is None


def test_a_score_axis_starts_at_zero_only_when_zero_is_in_range():
    fig = figures.scores_plot(SCORES, PALETTE, multi_encoder=False)
    sst2, cola = _panel(fig, "SST-2 frozen"), _panel(fig, "CoLA frozen")
    low, high = sst2.get_xlim()
    assert 45 < low < 50.9 and high > 79.6  # every interval and the constant (50.9), not 0
    assert cola.get_xlim()[0] < -99  # the clipped interval reaches −100
    for ax in (sst2, cola):  # every drawn value inside the axis
        values = np.concatenate([ln.get_xdata() for ln in ax.lines if ln.get_linestyle() != "--"])
        assert ax.get_xlim()[0] <= values.min() and values.max() <= ax.get_xlim()[1]


def test_an_interval_clipped_at_the_metrics_range_is_marked_at_that_end_only():
    fig = figures.scores_plot(SCORES, PALETTE, multi_encoder=False)
    cola, rte, sst2 = (_panel(fig, t) for t in ("CoLA frozen", "RTE full", "SST-2 frozen"))
    assert [d.get_xdata()[0] for d in _dots(cola, "<")] == [pytest.approx(-100.0)]
    assert _dots(cola, ">") == []
    assert [d.get_xdata()[0] for d in _dots(rte, ">")] == [pytest.approx(100.0)]
    assert _dots(rte, "<") == [] and _dots(sst2, "<") == _dots(sst2, ">") == []


@pytest.mark.parametrize("n", [5, 7, 12, 14])
def test_the_first_figure_fits_one_screen_beside_the_answer_with_no_text_overlapping(n):
    scores = _settings(n)
    fig = figures.scores_plot(scores, PALETTE, multi_encoder=n > 10)
    assert fig is not None
    width, height = fig.get_size_inches() * 96
    assert height <= 450 and width <= 520  # beside the answer table, not scaled down
    title = "SST-2 minilm frozen 500" if n > 10 else "SST-2 frozen 500"
    assert len(_dots(_panel(fig, title))) == len(HEADS)
    assert _overlapping_text(fig) == []


#: Per (head, freeze): the dev values of seeds 1..3 (None: the run crashed).
RUNS = {
    ("linear", "frozen"): [0.70, 0.72, 0.74],
    ("bilstm", "frozen"): [0.80, 0.83, 0.86],
    ("pooler-random", "frozen"): [0.50, None, 0.62],  # 0.50 is below the baseline: failed
    ("linear", "full"): [0.85, 0.86, 0.87],
    ("bilstm", "full"): [0.86, 0.88, 0.90],
}
BASELINE = 0.509


def _result(task, head, freeze, size, seed, value, baseline=BASELINE, **extra):
    cell = {
        "task": task,
        "encoder": "minilm",
        "head": head,
        "head_label": head,
        "layers": "-1",
        "freeze": freeze,
        "freeze_label": freeze,
        "seed": seed,
    }
    return with_axes(
        {
            "cell": cell,
            "config": {"data": {"train_size": size}},
            "status": "ok" if value is not None else "failed",
            "main_metric": "accuracy",
            "best": {"epoch": 1, "metrics": {"dev": {"accuracy": value}}} if value else None,
            "baseline": {"dev": {"metrics": {"accuracy": baseline}}},
            "finished_at": "2026-11-25T00:00:00Z",
            **extra,
        }
    )


def _table(runs=RUNS, size=2000, **extra) -> pd.DataFrame:
    results = [
        _result(
            "sst2",
            head,
            freeze,
            size,
            seed,
            value,
            params={"trainable": len(head) * 100},
            train_time_s=10.0 * seed,
            **extra,
        )
        for (head, freeze), values in runs.items()
        for seed, value in enumerate(values, start=1)
    ]
    return stats.normalize_table(tidy(results))


def _context(
    table: pd.DataFrame, scores: pd.DataFrame, comparisons=None, history=None
) -> ReportContext:
    inputs = ReportInputs(
        source="test",
        table=table,
        history=pd.DataFrame() if history is None else history,
        cells=[],
        launch={},
    )
    return ReportContext(
        inputs=inputs,
        palette=PALETTE,
        runs=stats.run_values(table),
        scores=scores,
        comparisons=pd.DataFrame(
            columns=[
                *stats.SETTING_KEYS,
                "head_a",
                "head_b",
                "mean_a",
                "mean_b",
                "estimate",
                "low",
                "high",
                "verdict",
                "p_holm",
                "low90",
                "high90",
                "sim_low",
                "sim_high",
            ]
        )
        if comparisons is None
        else comparisons,
        multi_encoder=False,
        sized=sized_settings(scores),
    )


def _read_tables(body: str) -> list[pd.DataFrame]:
    soup = BeautifulSoup(body, "html.parser")
    out = []
    for table in soup.find_all("table"):
        header = [th.get_text() for th in table.find("thead").find_all("th")]
        rows = [
            [td.get_text() for td in tr.find_all("td")] for tr in table.find("tbody").find_all("tr")
        ]
        out.append(pd.DataFrame(rows, columns=header))
    return out


def _run_scores(table: pd.DataFrame) -> pd.DataFrame:
    """Scores rows (mean only) of a table's runs, enough for the sections that read them."""
    runs = stats.run_values(table)
    g = runs.groupby(stats.GROUP_KEYS)["value"]
    frame = g.agg(mean="mean", low="min", high="max").reset_index()
    frame["metric"], frame["best_constant"] = "accuracy", BASELINE
    frame["best"] = frame["mean"] == frame.groupby(stats.SETTING_KEYS)["mean"].transform("max")
    return frame.assign(beats_all=False, beats_constant=True, clipped=False)


def test_the_seed_strips_draw_every_run_and_the_spread_table_recomputes_from_them():
    table = _table()
    ctx = _context(table, _run_scores(table))
    fig = figures.seed_strips(ctx.runs, PALETTE, multi_encoder=False)
    frozen = _panel(fig, "SST-2 frozen")
    heads = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    drawn = {}
    for marker in ("o", "X"):
        for dot in _dots(frozen, marker):
            drawn.setdefault(heads[round(dot.get_ydata()[0])], []).append(
                (marker, round(dot.get_xdata()[0], 6))
            )
    for (head, freeze), values in RUNS.items():
        if freeze != "frozen":
            continue
        expected = [
            ("X" if v <= BASELINE else "o", round(100 * v, 6)) for v in values if v is not None
        ]
        assert sorted(drawn[head]) == sorted(expected)
    assert len(_dots(frozen, "v")) == 1  # the crashed run, on the edge
    (threshold,) = _dashed(frozen)
    assert threshold.get_xdata()[0] == pytest.approx(100 * BASELINE)
    assert _overlapping_text(fig) == []
    section = spread_section(ctx)
    assert section is not None and section.id == "seed-spread"
    spread, evp = _read_tables(section.body)
    for row in spread.itertuples():
        values = np.array([v for v in RUNS[(row.Head, row.Freeze)] if v is not None])
        assert int(row.Runs) == 3 and int(row.Failed) == sum(
            v is None or v <= BASELINE for v in RUNS[(row.Head, row.Freeze)]
        )
        assert (row.Min, row.Median, row.Max) == tuple(
            f"{100 * f(values):.1f}" for f in (np.min, np.median, np.max)
        )
        sd = f"{100 * np.std(values, ddof=1):.1f}" if len(values) > 1 else "–"
        assert sd == row.SD
    for row in evp.to_dict("records"):
        values = [v for v in RUNS[(row["Head"], row["Freeze"])] if v is not None]
        assert row["Seeds"] == str(len(values)) and row["Best seen"] == f"{100 * max(values):.1f}"
        for n in (1, 3):
            maxima = [max(t) for t in itertools.product(values, repeat=n)]  # every draw of n
            expected = f"{100 * np.mean(maxima):.1f} ± {100 * np.std(maxima):.2f}"
            assert row[f"n = {n}"] == (expected if n <= len(values) else "")
    assert spread_section(_context(table.iloc[:0], _run_scores(table).iloc[:0])) is None


def test_the_pareto_front_is_every_point_no_other_beats_on_both_axes(drawn):
    rng = np.random.default_rng(7)
    cost, score = pd.Series(rng.uniform(1, 100, 40)), pd.Series(rng.uniform(0, 1, 40))
    mask = figures.pareto_mask(cost, score)
    for i in range(40):
        others = [j for j in range(40) if j != i]
        dominated = any(cost[j] <= cost[i] and score[j] >= score[i] for j in others)
        assert mask[i] == (not dominated)
    table = _table()
    ctx = _context(table, _run_scores(table))
    section = cost_section(ctx)
    assert section is not None
    (front,) = _read_tables(section.body)
    scores = _run_scores(table).set_index(["head_label", "freeze_label"])
    params = {h: len(h) * 100 for h, _ in RUNS}
    c, s = pd.Series([params[h] for h, _ in scores.index]), pd.Series(scores["mean"].to_numpy())
    on_front = set(np.array(scores.index)[figures.pareto_mask(c, s)])
    assert {(r.Head, r.Freeze) for r in front.itertuples() if r[-2] == "yes"} == on_front
    for r in front.itertuples():
        assert r.Mean == f"{100 * scores.loc[(r.Head, r.Freeze), 'mean']:.1f}"
    (fig,) = drawn["cost_scatter"]  # training times 10–30 s: less than a decade, still legible
    assert _overlapping_text(fig) == []


def test_the_epoch_curves_plot_the_mean_of_the_selection_slice_that_history_holds(drawn):
    rows = []
    rng = np.random.default_rng(3)
    for head, seed, epoch in itertools.product(HEADS, (1, 2, 3), (0, 1, 2)):
        for split, metric in (("select", "accuracy"), ("select", "f1"), ("dev", "accuracy")):
            value = rng.uniform(0.5, 0.9)
            rows.append(
                {
                    "task": "sst2",
                    "encoder": "minilm",
                    "head": head,
                    "head_label": head,
                    "freeze_label": "frozen",
                    "seed": seed,
                    "train_size": np.nan,
                    "epoch": epoch,
                    "split": split,
                    "metric": metric,
                    "value": value,
                }
            )
    history = pd.DataFrame(rows)
    table = _table({(h, "frozen"): [0.7, 0.71, 0.72] for h in HEADS}, size=None)
    ctx = _context(table, _run_scores(table), history=history)
    section = curves_section(ctx)
    assert section is not None
    kept = history[(history["split"] == "select") & (history["metric"] == "accuracy")]
    means = kept.groupby(["head_label", "epoch"])["value"].mean()
    (ax,) = [a for a in drawn["curves"][0].axes if a.get_visible()]
    lines = [ln for ln in ax.lines if ln.get_linestyle() == "-" and len(ln.get_xdata()) == 3]
    assert len(lines) == len(HEADS)
    plotted = {tuple(np.round(ln.get_ydata(), 6)) for ln in lines}
    assert plotted == {tuple(np.round(100 * means[h].to_numpy(), 6)) for h in HEADS}
    assert all(list(ln.get_xdata()) == [1, 2, 3] for ln in lines)  # epochs shown 1-based
    (shown,) = _read_tables(section.body)
    for row in shown.to_dict("records"):
        assert [row[f"Epoch {e + 1}"] for e in range(3)] == [
            f"{100 * means[(row['Head'], e)]:.1f}" for e in range(3)
        ]
    assert curves_section(_context(table, _run_scores(table))) is None  # no history


#: Scores of one learning curve (frozen SST-2 at 100 and 400 examples) and a setting at one
#: size (full, 1,000): (head, size) -> mean, with ±0.03 intervals.
CURVE = {
    ("linear", 100): 0.60,
    ("bilstm", 100): 0.55,
    ("pooler-random", 100): 0.58,
    ("linear", 400): 0.70,
    ("bilstm", 400): 0.80,
    ("pooler-random", 400): 0.66,
}


def _curve_scores() -> pd.DataFrame:
    rows = [
        ("sst2", "frozen", size, head, "accuracy", m, m - 0.03, m + 0.03, 0.509)
        for (head, size), m in CURVE.items()
    ]
    rows += [
        ("sst2", "full", 1000, head, "accuracy", m, m - 0.01, m + 0.01, 0.509)
        for head, m in (("linear", 0.85), ("bilstm", 0.86))
    ]
    return _scores(rows)


def _comparison(size, a, b, estimate, verdict, p):
    """A comparisons row as the frame stores it (either orientation)."""
    return {
        "task": "sst2",
        "encoder": "minilm",
        "freeze_label": "frozen",
        "train_size": size,
        "head_a": a,
        "head_b": b,
        "mean_a": CURVE[(a, size)],
        "mean_b": CURVE[(b, size)],
        "estimate": estimate,
        "low": estimate - 0.02,
        "high": estimate + 0.01,
        "verdict": verdict,
        "p_holm": p,
        "low90": np.nan,
        "high90": np.nan,
        "sim_low": np.nan,
        "sim_high": np.nan,
    }


def test_the_size_section_plots_the_scores_and_reads_each_leader_from_the_comparisons():
    scores = _curve_scores()
    comparisons = pd.DataFrame(
        [  # stored b − a where the best head is head_b: the section must flip them
            _comparison(100, "pooler-random", "linear", -0.02, "worse", 0.04),
            _comparison(100, "bilstm", "linear", -0.05, "worse", 0.001),
            _comparison(400, "bilstm", "linear", 0.10, "better", 0.0001),
            _comparison(400, "pooler-random", "bilstm", -0.14, "worse", 0.0001),
        ]
    )
    ctx = _context(_table(), scores, comparisons)
    section = training_size_section(ctx)
    assert section is not None and section.id == "training-size"
    (leaders,) = _read_tables(section.body)
    assert leaders["Freeze"].tolist() == ["frozen, 100 examples", "frozen, 400 examples"]
    at_100, at_400 = leaders.to_dict("records")
    assert (at_100["Best"], at_100["Runner-up"], at_100["Verdict"]) == (
        "linear",
        "pooler-random",
        "better",
    )
    assert (at_100["Difference"], at_100["Low"], at_100["High"]) == (
        "2.0",
        "1.0",
        "4.0",
    )  # −(−2 + [−2, +1])
    assert (at_400["Best"], at_400["Runner-up"], at_400["Verdict"]) == (
        "bilstm",
        "linear",
        "better",
    )
    assert (at_400["Difference"], at_400["Low"], at_400["High"], at_400["p (Holm)"]) == (
        "10.0",
        "8.0",
        "11.0",
        "0.0001",
    )
    fig = figures.curves(
        scores[scores["freeze_label"] == "frozen"],
        PALETTE,
        False,
        "train_size",
        ["task", "encoder", "freeze_label"],
    )
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert ax.get_xscale() == "log" and list(ax.get_xticks()) == [100, 400]
    lines = {
        tuple(np.round(ln.get_ydata(), 6))
        for ln in ax.lines
        if ln.get_linestyle() == "-" and len(ln.get_xdata()) == 2
    }
    assert lines == {
        (round(100 * CURVE[(h, 100)], 6), round(100 * CURVE[(h, 400)], 6)) for h in HEADS
    }
    best = sorted(
        (round(d.get_xdata()[0]), round(d.get_ydata()[0], 6))
        for d in _dots(ax)
        if d.get_markeredgecolor() == "black"
    )
    assert best == [(100, 60.0), (400, 80.0)]
    (constant,) = _dashed(ax)
    assert list(constant.get_ydata()) == pytest.approx([50.9, 50.9])
    assert _overlapping_text(fig) == []
    one_size = scores[scores["freeze_label"] == "full"]
    assert training_size_section(_context(_table(), one_size, comparisons)) is None


def test_sizes_split_the_panels_of_a_curve_and_only_there():
    scores = _curve_scores()
    assert sized_settings(scores) == {("sst2", "minilm", "frozen")}
    groups = [(keys, size, len(rows)) for keys, size, rows in split_by_size(scores, ["task"])]
    assert groups == [(("sst2",), 100, 3), (("sst2",), 400, 3), (("sst2",), 1000, 2)]
    titles = [t for t, _ in figures.setting_panels(scores, multi=False)]
    assert titles == ["SST-2 frozen 100", "SST-2 frozen 400", "SST-2 full"]


# --- a real sweep, end to end ------------------------------------------------------------

TINY_CURVE = (
    "encoder=tiny_bert",
    "task=sst2",
    "head=linear,mean_linear",
    "freeze=frozen",
    "data.train_size=40,80,160",
    "seed=1,2",
    "axes=[train_size]",
    "selection.carve=first",
    "selection.size=32",
    "search=random",
    "search.trials=1",  # a search per size (its trial stored beside the size's seeds)
    "trainer.max_epochs=2",
    "data.max_length=32",
    "data.batch_size=16",
)


@pytest.mark.slow  # a real curve sweep, about a minute; the pieces are tested above
def test_a_tiny_curve_sweep_runs_collects_and_reports_its_points(data_dir, tmp_path):
    runs, results, page = tmp_path / "runs", tmp_path / "results", tmp_path / "report.html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "-m",
            *TINY_CURVE,
            f"runs_dir={runs}",
            f"results_dir={results}",
            f"report_file={page}",
            f"cache.dir={tmp_path / 'cache'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = {
        p.parent.relative_to(runs).as_posix(): json.loads(p.read_text())
        for p in runs.rglob("result.json")
    }
    assert sorted(found) == sorted(
        f"sst2/tiny_bert/{head}/frozen/train_size={size}/seed={seed}"
        for head in ("linear", "mean_linear")
        for size in (40, 80, 160)
        for seed in (1, 2)
    )
    assert all(r["status"] == "ok" for r in found.values())
    # Every size selected on the slice carve_first draws, and trained on its own size.
    slice_ids = carve_first(_labels(data_dir, "sst2"), 40, 32, 0, "class", "sst2 train")[1]
    for path, r in found.items():
        assert r["selection"]["ids"] == slice_ids.tolist(), path
        assert r["selection"]["carve"] == "first"
        assert r["data"]["n_train"] == r["cell"]["train_size"]
    for head in ("linear", "mean_linear"):  # each size searched on its own, beside its seeds
        for size in (40, 80, 160):
            trials = runs / f"sst2/tiny_bert/{head}/frozen/train_size={size}/trials"
            assert [p.name for p in trials.iterdir()] == ["trial=1"]
    # The sweep's end collected its results and wrote the report (report_file).
    assert (results / "results.csv").is_file()
    section = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser").find(
        "section", id="training-size"
    )
    assert section is not None and section.select("figure > img")
    (leaders,) = _read_tables(str(section))
    assert leaders["Freeze"].tolist() == [f"frozen, {n} examples" for n in (40, 80, 160)]
    for row, size in zip(leaders.to_dict("records"), (40, 80, 160), strict=True):
        means = {
            head: np.mean(
                [
                    r["best"]["metrics"]["dev"]["accuracy"]
                    for r in found.values()
                    if r["cell"]["head_label"] == head and r["cell"]["train_size"] == size
                ]
            )
            for head in ("linear", "mean_linear")
        }
        assert row["Mean"] == f"{100 * max(means.values()):.1f}"
        assert means[row["Best"]] == max(means.values())


# --- the reference presets ---------------------------------------------------------------


def _jobs(name: str) -> list[dict[str, str]]:
    """The preset's cells as key -> value, expanded as the sweeper does (nothing composed)."""
    preset = OmegaConf.load(CONF / "experiment" / f"{name}.yaml")
    sweeper = OmegaConf.to_container(preset.hydra.sweeper)
    jobs = expand(OverridesParser.create(), sweeper.get("params"), sweeper.get("grids"), [])
    return [dict(item.split("=", 1) for item in job) for job in jobs]


def test_the_cpu_curve_preset_is_the_promised_grid():
    preset = OmegaConf.load(CONF / "experiment" / "curves_sst2_rte.yaml")
    assert preset.selection.carve == "first" and list(preset.axes) == ["train_size"]
    assert preset.defaults[1] == {"override /search": "random"}
    jobs = _jobs("curves_sst2_rte")
    heads = {"linear", "pooler", "last4_concat", "bilstm", "mean_linear"}
    sizes: dict[tuple[str, str], set[int]] = {}
    for j in jobs:
        sizes.setdefault((j["task"], j["freeze"]), set()).add(int(j["data.train_size"]))
    assert {k: sorted(v) for k, v in sizes.items()} == {
        ("sst2", "frozen"): SIZES["sst2"],
        ("rte", "frozen"): SIZES["rte"],
        ("sst2", "full"): [100, 300, 1000],
    }
    for j in jobs:  # every head of a setting has the same budget
        assert j["head"] in heads
        frozen = j["freeze"] == "frozen"
        assert j["search.trials"] == ("6" if frozen else "4")
        assert j["trainer.max_epochs"] == ("3" if frozen else "2")
    assert len(jobs) == 5 * (11 * 5 + 3 * 3) == 320


def test_the_gpu_curve_preset_ends_at_every_example_outside_the_slice(data_dir):
    preset = OmegaConf.load(CONF / "experiment" / "curves_sst2_rte_gpu.yaml")
    assert preset.selection.carve == "first"
    jobs = _jobs("curves_sst2_rte_gpu")
    for task in ("sst2", "rte"):
        largest = max(int(j["data.train_size"]) for j in jobs if j["task"] == task)
        assert largest == len(_labels(data_dir, task)) - preset.selection.size
    assert {j["freeze"] for j in jobs} == {"frozen", "full"}
    assert {j["seed"] for j in jobs} == {str(s) for s in range(1, 11)}


#: Where each head's time goes (docs: the preset's header): a frozen linear-family cell costs
#: what it did at 2,000 examples; a frozen BiLSTM or fine-tuned cell in proportion to the
#: examples it processes, an evaluated example counting a third of a trained one.
EVAL_SHARE = 1 / 3
DEV = {"sst2": 872, "rte": 277}


def _processed(size, epochs, selection, dev=0):
    return size * epochs + EVAL_SHARE * (selection * epochs + dev)


@pytest.mark.skipif(not (ROOT / "results/fair_heads/trials.csv").is_file(), reason="not run")
def test_the_cpu_presets_cost_estimate_is_what_fair_heads_timings_give():
    trials = pd.read_csv(ROOT / "results/fair_heads/trials.csv")
    median = trials.groupby(["freeze_label", "task", "head_label"])["wall_time_s"].median()

    def rate(freeze, task, head):  # seconds per processed example in fair_heads' trials
        size, epochs = (2000, 3) if freeze == "frozen" else (1000, 2)
        return median[(freeze, task, head)] / _processed(
            size, epochs, 500 if task == "sst2" else 490
        )

    def cost(job, trial):
        task, head, size = job["task"], job["head"], int(job["data.train_size"])
        epochs = int(job["trainer.max_epochs"])
        processed = _processed(size, epochs, 490, 0 if trial else DEV[task])
        if job["freeze"] == "frozen":
            if head != "bilstm":  # start-up dominates: its cost at 2,000 examples
                label = {"linear": "mean_linear", "pooler": "pooler-random"}.get(head, head)
                return median[("frozen", task, label)]
            return rate("frozen", task, "bilstm") * processed
        per = rate("full", task, "last4_concat" if head == "last4_concat" else "pooler-random")
        if head == "bilstm":  # the encoder's cost plus the BiLSTM over its tokens
            per += rate("frozen", task, "bilstm")
        return per * processed

    jobs = _jobs("curves_sst2_rte")
    seconds = Counter()
    searched = set()
    for job in jobs:
        seconds[job["head"]] += cost(job, trial=False)
        setting = (job["task"], job["head"], job["freeze"], job["data.train_size"])
        if setting not in searched:  # trials are shared by a setting's seeds
            searched.add(setting)
            seconds[job["head"]] += int(job["search.trials"]) * cost(job, trial=True)
    total, bilstm = sum(seconds.values()) / 3600, seconds["bilstm"] / 3600
    header = (CONF / "experiment" / "curves_sst2_rte.yaml").read_text()
    stated = re.search(r"costs at 2,000 examples \(start-up dominates\): ([\d.]+) h of", header)
    assert stated and float(stated.group(1)) == round(total, 1)
    assert f"{bilstm:.1f} h of it the BiLSTM head" in header
    docs = (ROOT / "docs" / "experiments.md").read_text()  # the same numbers, in words
    assert f"estimates {total:.1f} h of one-thread process time for the CPU run,\n" in docs
    assert f"{bilstm:.1f} h of it the BiLSTM head" in docs
    side_by_side = max(bilstm, total - bilstm)  # the BiLSTM process, the other four heads
    assert f"take about {side_by_side:.0f} h side by side" in docs


@pytest.mark.slow  # composes 320 cells: about a minute on two cores
def test_the_cpu_curve_preset_plans_one_run_directory_per_size(tmp_path):
    cells = plan(CONF, ["experiment=curves_sst2_rte", f"runs_dir={tmp_path}"], multirun=False)
    parts = [cell.run_dir.relative_to(tmp_path).parts for cell in cells]
    assert len(parts) == 320 == len(set(parts))
    assert {p[4] for p in parts if p[0] == "rte"} == {f"train_size={n}" for n in SIZES["rte"]}
    assert {p[2] for p in parts} == {
        "linear",
        "pooler-random",
        "last4_concat",
        "bilstm",
        "mean_linear",
    }
    assert sum(c.trials for c in {c.run_dir.parent: c for c in cells}.values()) == 55 * 6 + 15 * 4


@pytest.mark.slow  # composes 1,400 cells: several minutes on two cores
def test_the_gpu_curve_preset_plans_and_passes_preflight(tmp_path):
    from bench.run.preflight import check_cell

    cells = plan(
        CONF, ["experiment=curves_sst2_rte_gpu", f"runs_dir={tmp_path}"], False, check_cell
    )
    assert len(cells) == 1400 and not [c for c in cells if c.problem]
