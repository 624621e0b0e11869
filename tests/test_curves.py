"""Learning curves by training size (#24 item 1): nested training subsets that all select on
one held-out slice (``selection.carve=first``), the curve statistics (checked against NumPy and
SciPy), the report section, the labels of settings that differ only by size, the Findings
sentence, and the reference presets with their cost estimate."""

from __future__ import annotations

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
from omegaconf import OmegaConf
from scipy import stats as sps

from bench.axes.sweep import expand
from bench.cell import config_hash
from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.selection import carve_first, carve_selection
from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_tokenizer
from bench.report.budget import budget_lines, missing_heads, unequal_settings
from bench.report.context import build_context
from bench.report.findings import curves_sentence
from bench.report.headline import headline_frame
from bench.report.inputs import load_inputs
from bench.report.readme import experiment_readme
from bench.results import stats
from bench.results.collect import tidy
from bench.results.curves import curve_leaders, curve_points, leaders_of, sized_settings
from bench.results.references import load_references
from bench.results.result_file import with_axes
from bench.results.tables import build
from bench.run.plan import plan
from bench.run.preflight import check_protocol
from conftest import CONF, ROOT, holm_reference

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


# --- the statistics ----------------------------------------------------------------------

#: dev accuracy per (head, size) and seed 1..5: linear leads at 100 and 400 (at 400 by a hair),
#: bilstm takes over at 1,600 (clearly) — and mean_linear at 6,400 by a hair (not significant).
CURVE = {
    ("linear", 100): [0.60, 0.61, 0.59, 0.62, 0.60],
    ("bilstm", 100): [0.55, 0.56, 0.54, 0.55, 0.57],
    ("mean_linear", 100): [0.58, 0.57, 0.59, 0.58, 0.56],
    ("linear", 400): [0.70, 0.71, 0.69, 0.72, 0.70],
    ("bilstm", 400): [0.69, 0.72, 0.68, 0.70, 0.71],
    ("mean_linear", 400): [0.66, 0.67, 0.66, 0.68, 0.65],
    ("linear", 1600): [0.73, 0.74, 0.72, 0.73, 0.74],
    ("bilstm", 1600): [0.80, 0.79, 0.81, 0.80, 0.79],
    ("mean_linear", 1600): [0.75, 0.76, 0.74, 0.75, 0.77],
    ("linear", 6400): [0.75, 0.76, 0.74, 0.75, 0.76],
    ("bilstm", 6400): [0.83, 0.81, 0.82, 0.84, 0.80],
    ("mean_linear", 6400): [0.84, 0.80, 0.83, 0.82, 0.83],
}
#: A setting at one size (fine-tuning, 1,000 examples): labelled as before, no curve.
FULL = {"linear": [0.85, 0.86, 0.84], "bilstm": [0.86, 0.88, 0.87]}


def _result(head, freeze, size, seed, value):
    cell = {
        "task": "sst2",
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
            "status": "ok",
            "main_metric": "accuracy",
            "best": {"epoch": 1, "metrics": {"dev": {"accuracy": value}}},
            "baseline": {"dev": {"metrics": {"accuracy": 0.509}}},
            "finished_at": "2026-11-25T00:00:00Z",
        }
    )


def _curve_table() -> pd.DataFrame:
    results = [
        _result(head, "frozen", size, seed, value)
        for (head, size), values in CURVE.items()
        for seed, value in enumerate(values, start=1)
    ]
    results += [
        _result(head, "full", 1000, seed, value)
        for head, values in FULL.items()
        for seed, value in enumerate(values, start=1)
    ]
    return tidy(results)


def test_curve_points_are_the_cells_means_and_intervals_recomputed_with_scipy():
    points = curve_points(_curve_table())
    assert set(points["freeze_label"]) == {"frozen"}  # one size under full: no curve
    assert len(points) == len(CURVE)
    for _, p in points.iterrows():
        x = np.asarray(CURVE[(p["head_label"], p["train_size"])])
        assert p["n"] == 5 and p["mean"] == pytest.approx(x.mean())
        low, high = sps.t.interval(0.95, df=4, loc=x.mean(), scale=sps.sem(x))
        assert (p["t_low"], p["t_high"]) == pytest.approx((low, high))
        boot = sps.bootstrap(
            (x,), np.mean, n_resamples=10_000, method="BCa", rng=np.random.default_rng(0)
        )
        assert p["ci_method"] == "BCa"
        ci = boot.confidence_interval
        assert (p["ci_low"], p["ci_high"]) == pytest.approx((ci.low, ci.high))
    sizes = points[points["head_label"] == "bilstm"]["train_size"].tolist()
    assert sizes == [100, 400, 1600, 6400]


def test_the_leader_per_size_and_its_changes_match_paired_t_tests_with_holm_in_the_curve():
    leaders = curve_leaders(_curve_table())
    means = {key: np.mean(v) for key, v in CURVE.items()}
    sizes = [100, 400, 1600, 6400]
    heads = ["linear", "bilstm", "mean_linear"]
    order = {s: sorted(heads, key=lambda h: (-round(means[(h, s)], 12), h)) for s in sizes}
    # The family: at each size, the leader against each other head (paired by seed).
    family = [(s, order[s][0], other) for s in sizes for other in order[s][1:]]
    p = [sps.ttest_rel(CURVE[(a, s)], CURVE[(b, s)]).pvalue for s, a, b in family]
    holm = dict(zip(family, holm_reference(p), strict=True))
    assert leaders["leader"].tolist() == [order[s][0] for s in sizes]
    assert leaders["leader"].tolist() == ["linear", "linear", "bilstm", "mean_linear"]
    assert leaders["changed"].tolist() == [False, False, True, True]
    assert (leaders["n_comparisons"] == len(family)).all()
    for _, r in leaders.iterrows():
        s = r["train_size"]
        runner = order[s][1]
        assert r["runner_up"] == runner
        assert r["margin"] == pytest.approx(means[(order[s][0], s)] - means[(runner, s)])
        assert r["margin_p_holm"] == pytest.approx(holm[(s, order[s][0], runner)])
        assert r["margin_significant"] == (holm[(s, order[s][0], runner)] < 0.05)
    at_1600, at_6400 = leaders.iloc[2], leaders.iloc[3]
    assert (at_1600["previous"], at_1600["leader"]) == ("linear", "bilstm")
    assert at_1600["change_p_holm"] == pytest.approx(holm[(1600, "bilstm", "linear")])
    p_change = holm[(1600, "bilstm", "linear")]
    assert at_1600["change_significant"] and p_change < 0.05
    assert at_1600["change_tier"] == (
        "***" if p_change < 0.001 else "**" if p_change < 0.01 else "*"
    )
    d = np.subtract(CURVE[("bilstm", 1600)], CURVE[("linear", 1600)])
    assert at_1600["change"] == pytest.approx(d.mean())
    low, high = sps.ttest_rel(
        CURVE[("bilstm", 1600)], CURVE[("linear", 1600)]
    ).confidence_interval()
    assert (at_1600["change_t_low"], at_1600["change_t_high"]) == pytest.approx((low, high))
    # mean_linear leads at 6,400 by 0.4 points over bilstm: a change, but not a supported one
    assert (at_6400["previous"], at_6400["leader"]) == ("bilstm", "mean_linear")
    assert at_6400["change_p_holm"] == pytest.approx(holm[(6400, "mean_linear", "bilstm")])
    assert not at_6400["change_significant"] and at_6400["change_tier"] == "n.s."


def test_a_leader_that_does_not_beat_the_constant_is_marked_at_its_size():
    table = _curve_table()
    sizes = pd.to_numeric(table["train_size"])
    # linear leads at 100 with 60.4 and at 400 with 70.4 (5 seeds each)
    table.loc[sizes == 100, "baseline"] = 0.605  # above its mean: no winner there
    table.loc[sizes == 400, "baseline"] = 0.70  # below its mean, inside its t-interval
    leaders = curve_leaders(table).set_index("train_size")
    for size, threshold in ((100, 0.605), (400, 0.70), (1600, 0.509), (6400, 0.509)):
        x = np.asarray(CURVE[(leaders.at[size, "leader"], size)])
        low, _ = sps.t.interval(0.95, df=len(x) - 1, loc=x.mean(), scale=sps.sem(x))
        expected = (
            "at or below"
            if x.mean() <= threshold
            else "interval reaches it"
            if low <= threshold
            else "above"
        )
        assert leaders.at[size, "leader_vs_constant"] == expected
    assert leaders["leader_vs_constant"].tolist() == [
        "at or below",
        "interval reaches it",
        "above",
        "above",
    ]
    sentence = curves_sentence(curve_leaders(table))
    assert sentence is not None
    assert (
        "then `mean_linear` at 6,400 examples (with Holm over this curve's 8 comparisons, "
        "significantly ahead of its runner-up only at 1,600 examples, tied at the other sizes; "
        "no leader's mean beats the best constant prediction at 100 examples)" in sentence
    )


def test_settings_that_differ_only_by_size_are_labelled_and_one_size_is_not(tmp_path):
    table = _curve_table()
    assert sized_settings(table) == {("sst2", "minilm", "frozen")}
    out = tmp_path / "curve"
    out.mkdir()
    table.to_csv(out / "results.csv", index=False)
    ctx = build_context(load_inputs(out))
    frame = headline_frame(ctx)
    assert frame["freeze_shown"].tolist() == [
        "frozen, 100 examples",
        "frozen, 400 examples",
        "frozen, 1,600 examples",
        "frozen, 6,400 examples",
        "full",
    ]
    text = experiment_readme(out)
    assert "- SST-2, frozen, 1,600 examples: bilstm scores 79.8 acc" in text
    assert "| SST-2 | full | acc | bilstm |" in text  # one size: shown as before
    sentence = curves_sentence(curve_leaders(table))
    assert sentence is not None
    assert "SST-2 frozen: `linear` from 100 to 400 examples, then `bilstm` at 1,600" in sentence
    assert "The lead changes hands twice, 1 of 2 significantly" in sentence
    assert (
        "`mean_linear` overtakes `bilstm` by 0.4 points" in sentence
        and "not significant" in sentence
    )
    one_size = table[table["freeze_label"] == "full"]
    assert curves_sentence(curve_leaders(one_size)) is None  # no curve: no sentence
    heads = build(table, "heads", load_references())  # a heads table per size of a curve
    assert [t.title for t in heads.tables] == [
        "sst2 — minilm — 100 examples",
        "sst2 — minilm — 400 examples",
        "sst2 — minilm — 1,000 examples",
        "sst2 — minilm — 1,600 examples",
        "sst2 — minilm — 6,400 examples",
    ]
    glue = build(table, "glue", load_references()).tables[0]  # a row per head and size
    assert [row[2] for row in glue.rows if row[1] == "bilstm"] == [
        *(f"frozen, {n} examples" for n in ("100", "400", "1,600", "6,400")),
        "full",
    ]
    assert len(glue.rows) == len(CURVE) + len(FULL)


def test_the_budget_names_a_curves_sizes_once_and_does_not_call_them_unequal():
    def record(task, head, size):
        return {
            "cell": {
                "task": task,
                "encoder": "m",
                "head_label": head,
                "freeze_label": "frozen",
                "train_size": size,
            },
            "config": {
                "search": {"name": "none"},
                "selection": {"name": "heldout", "size": 490, "carve": "first"},
                "trainer": {"max_epochs": 3},
                "data": {"train_size": size},
                "freeze": {"name": "frozen"},
                "optim": {"frozen_head_lr": 0.001},
            },
        }

    cells = [record(t, h, s) for t in ("sst2", "rte") for h in ("a", "b") for s in (100, 400)]
    cells += [record("sst2", h, 1600) for h in ("a", "b")]
    assert unequal_settings(cells) == []
    lines = budget_lines(cells)
    assert len(lines) == 2 and all("the same slice at every training size" in x for x in lines)
    assert lines[0].startswith("frozen (rte):") and "100 or 400 training examples" in lines[0]
    assert lines[1].startswith("frozen (sst2):") and "100, 400 or 1,600 training" in lines[1]
    assert missing_heads(cells) == []  # every setting has both heads
    partial = [*cells, record("sst2", "c", 1600), record("sst2", "c", 400)]
    assert missing_heads(partial) == [
        "rte / m / frozen / 100 examples: no c cells (its verdict compares the other 2 heads)",
        "rte / m / frozen / 400 examples: no c cells (its verdict compares the other 2 heads)",
        "sst2 / m / frozen / 100 examples: no c cells (its verdict compares the other 2 heads)",
    ]
    assert missing_heads([record("rte", "a", 100), record("sst2", "b", 100)]) == [
        "rte / m / frozen: no b cells (its verdict compares one head)",
        "sst2 / m / frozen: no a cells (its verdict compares one head)",
    ]
    cells[0]["config"]["optim"] = {"frozen_head_lr": 0.01}  # one head of one size differs
    assert unequal_settings(cells) == [
        "sst2 / m / frozen / 100 examples: unequal budgets (a: no tuning: one fixed "
        "configuration (frozen_head_lr 0.01); b: no tuning: one fixed configuration "
        "(frozen_head_lr 0.001))"
    ]


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
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    section = soup.find("section", id="training-size")
    assert section is not None and section.select("figure > img")
    tables = section.find_all("table")
    header = [th.get_text() for th in tables[1].find("thead").find_all("th")]
    rows = [
        dict(zip(header, [td.get_text() for td in tr.find_all("td")], strict=True))
        for tr in tables[1].find("tbody").find_all("tr")
    ]
    assert len(rows) == 6
    for row in rows:
        size = int(row["Training examples"].split()[0].replace(",", ""))
        values = [
            r["best"]["metrics"]["dev"]["accuracy"]
            for r in found.values()
            if r["cell"]["head_label"] == row["Head"] and r["cell"]["train_size"] == size
        ]
        assert row["Runs with a score"] == "2/2"
        assert row["Mean"] == f"{100 * np.mean(values):.1f}"
    leader_rows = tables[0].find("tbody").find_all("tr")
    assert [tr.find_all("td")[2].get_text() for tr in leader_rows] == [
        "40 examples",
        "80 examples",
        "160 examples",
    ]
    verdict = soup.find("section", id="headline").get_text()
    assert "SST-2, frozen, 160 examples:" in verdict


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


def test_the_curve_intervals_beside_holm_are_simultaneous_over_the_curve_family():
    table = stats.normalize_table(_curve_table())
    cells, comparisons = stats.cell_stats(table), stats.compare_heads(table)
    leaders = leaders_of(cells, comparisons)
    curve = leaders[leaders["freeze_label"] == "frozen"].set_index("train_size")
    m = int(curve["n_comparisons"].iloc[0])
    means = {key: np.mean(v) for key, v in CURVE.items()}
    heads = ["linear", "bilstm", "mean_linear"]
    for size, r in curve.iterrows():
        order = sorted(heads, key=lambda h: (-round(means[(h, size)], 12), h))
        test = sps.ttest_rel(CURVE[(order[0], size)], CURVE[(order[1], size)])
        sim = test.confidence_interval(1 - 0.05 / m)
        assert (r["margin_sim_low"], r["margin_sim_high"]) == pytest.approx((sim.low, sim.high))
    at_6400 = curve.loc[6400]
    change = sps.ttest_rel(CURVE[("mean_linear", 6400)], CURVE[("bilstm", 6400)])
    sim = change.confidence_interval(1 - 0.05 / m)
    assert (at_6400["change_sim_low"], at_6400["change_sim_high"]) == pytest.approx(
        (sim.low, sim.high)
    )
    sentence = curves_sentence(leaders)
    assert sentence is not None
    assert (
        f"`mean_linear` overtakes `bilstm` by 0.4 points (simultaneous 95% interval "
        f"{100 * sim.low:.1f} to {100 * sim.high:.1f}, Holm over this curve's {m} "
        "comparisons: p = "
    ) in sentence
    one = change.confidence_interval(0.95)
    assert f"{100 * one.low:.1f} to {100 * one.high:.1f}" not in sentence
    # without the simultaneous columns the sentence gives Holm's p alone, no interval
    plain = curve_leaders(table)
    bare = curves_sentence(plain.drop(columns=[c for c in plain if "_sim_" in c]))
    assert bare is not None
    assert f"overtakes `bilstm` by 0.4 points (Holm over this curve's {m} comparisons: p = " in bare
