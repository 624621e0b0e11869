"""The committed self-check records, read as frames and shown in the report, recomputed here.

``results/<experiment>/selfcheck.json`` is the record of one ``python -m bench.run.selfcheck``
run. Every number its frames (:mod:`bench.results.selfcheck_record`) and the report's section
give is recomputed here from the committed ``results.csv`` with pandas and SciPy (the
committed side: values, means, t and BCa intervals) and from the record's ``today`` values
(the side only the re-run knows). Nothing here names what a committed record holds.

The record committed on 2026-11-25 is kept as a fixture,
``tests/data/selfcheck_fair_heads_2026-11-25_avx512.json``: the default slice (six SST-2
cells) re-trained on an AVX-512 machine, with a moved cell and one that kept its score while
two predictions changed; it is read beside the committed ``fair_heads`` results.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from bs4 import BeautifulSoup
from scipy import stats as sps

from bench.errors import DataError
from bench.report.selfcheck import selfcheck_section
from bench.results.collect import read_table
from bench.results.reproduction import compare
from bench.results.selfcheck_record import (
    RECORD_FILE,
    cell_frame,
    device_name,
    environment,
    head_frame,
    read_record,
)
from conftest import ROOT

EXPERIMENT = ROOT / "results" / "fair_heads"
GPU = ROOT / "results" / "fair_heads_gpu"
#: The record committed on 2026-11-25 (default slice, AVX-512): 4 identical, 1 same score, 1 moved.
FIXTURE = Path(__file__).parent / "data" / "selfcheck_fair_heads_2026-11-25_avx512.json"
#: A re-run cell's score is the committed one within this (docs/protocol.md).
ATOL = 1e-6
#: (record, the results directory it is read beside)
RECORDS = {
    "fair_heads": (EXPERIMENT / RECORD_FILE, EXPERIMENT),
    "fair_heads_gpu": (GPU / RECORD_FILE, GPU),
    "2026-11-25": (FIXTURE, EXPERIMENT),
}


def _load(which: str) -> tuple[dict[str, Any], Path]:
    path, folder = RECORDS[which]
    if not path.is_file():
        pytest.skip(f"no {path}")
    return json.loads(path.read_text(encoding="utf-8")), folder


def _committed(folder: Path, row: dict[str, Any]) -> tuple[pd.Series, str]:
    """A setting's dev main-metric values by seed and the metric's name, from results.csv."""
    table = pd.read_csv(folder / "results.csv")
    rows = table[
        (table["task"] == row["task"])
        & (table["encoder"] == row["encoder"])
        & (table["freeze_label"] == row["freeze_label"])
        & (table["head_label"] == row["head_label"])
        & (table["train_size"].fillna(0) == int(row["train_size"]))
        & (table["split"] == "dev")
        & (table["metric"] == table["main_metric"])
        & (table["status"] == "ok")
    ]
    assert rows["metric"].nunique() == 1
    values = rows.set_index("seed")["value"].astype(float).sort_index()
    assert values.index.is_unique, "one run per seed"
    return values, str(rows["metric"].iloc[0])


def _setting(row: dict[str, Any]) -> tuple[str, ...]:
    return (row["task"], row["encoder"], row["head_label"], row["freeze_label"])


def _expected(record: dict[str, Any], folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per cell and per head, every number the frames give, recomputed here."""
    assert record["split"] == "dev" and float(record["identical_atol"]) == ATOL
    cells = []
    for cell in record["cells"]:
        values, metric = _committed(folder, cell)
        committed, today = values[int(cell["seed"])], float(cell["today"])
        changed = np.nan if cell["changed"] is None else float(cell["changed"])
        same = cell["status"] == "ok" and abs(today - committed) <= ATOL
        cells.append(
            {
                "key": (*_setting(cell), int(cell["seed"])),
                "metric": metric,
                "committed": committed,
                "today": today,
                "diff": today - committed,
                "changed": changed,
                "n_predictions": cell["n_predictions"],
                "same_score": same,
                "identical": same and changed == 0,
            }
        )
    cells_frame = pd.DataFrame(cells).set_index("key")
    heads = []
    for setting in record["settings"]:
        x, metric = _committed(folder, setting)
        seeds = sorted(int(s) for s in setting["seeds"])
        mixed = x.copy()
        for seed in seeds:
            mixed[seed] = cells_frame.loc[[(*_setting(setting), seed)], "today"].iloc[0]
        t_low, t_high = sps.t.interval(0.95, df=x.size - 1, loc=x.mean(), scale=sps.sem(x))
        bca = sps.bootstrap(
            (x.to_numpy(),), np.mean, n_resamples=10_000, method="BCa", rng=np.random.default_rng(0)
        ).confidence_interval
        heads.append(
            {
                "key": _setting(setting),
                "metric": metric,
                "n": x.size,
                "seeds": seeds,
                "committed_mean": x.mean(),
                "t_low": t_low,
                "t_high": t_high,
                "ci_low": bca.low,
                "ci_high": bca.high,
                "today_mean": mixed.mean(),
                "shift": mixed.mean() - x.mean(),
                "inside": t_low <= mixed.mean() <= t_high and bca.low <= mixed.mean() <= bca.high,
            }
        )
    return cells_frame, pd.DataFrame(heads).set_index("key")


def _by_key(frame: pd.DataFrame, seed: bool) -> pd.DataFrame:
    keys = ["task", "encoder", "head_label", "freeze_label", *(["seed"] if seed else [])]
    return frame.set_index(pd.Index(list(frame[keys].itertuples(index=False, name=None))))


@pytest.mark.parametrize("which", list(RECORDS))
def test_the_frames_are_the_record_recomputed_from_the_committed_results(which):
    record, folder = _load(which)
    want_cells, want_heads = _expected(record, folder)
    table = read_table(folder)
    cells = _by_key(cell_frame(record, table), seed=True).loc[want_cells.index]
    assert len(cells) == len(record["cells"])
    for column in ("committed", "today", "diff"):
        np.testing.assert_allclose(cells[column], want_cells[column], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(cells["changed"], want_cells["changed"])
    assert cells["metric"].tolist() == want_cells["metric"].tolist()
    assert cells["same_score"].tolist() == want_cells["same_score"].tolist()
    assert cells["identical"].tolist() == want_cells["identical"].tolist()
    assert not cells["stale"].any()  # the record matches the committed results

    heads = _by_key(head_frame(record, table), seed=False).loc[want_heads.index]
    assert len(heads) == len(record["settings"])
    assert heads["n"].tolist() == want_heads["n"].tolist()
    assert heads["seeds"].map(sorted).tolist() == want_heads["seeds"].tolist()
    for column in ("committed_mean", "t_low", "t_high", "ci_low", "ci_high"):
        np.testing.assert_allclose(heads[column], want_heads[column], rtol=0, atol=1e-12)
    # today's values are the record's float32 metrics: the same up to their rounding
    for column in ("today_mean", "shift"):
        np.testing.assert_allclose(heads[column], want_heads[column], rtol=0, atol=ATOL)
    assert heads["inside"].tolist() == want_heads["inside"].tolist()
    assert heads["reproduces"].tolist() == want_heads["inside"].tolist()  # no seed failed
    assert not heads["stale"].any()


def _section_tables(record: dict[str, Any], table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The section's two tables as text frames, by id."""
    section = selfcheck_section(
        SimpleNamespace(inputs=SimpleNamespace(selfcheck=record, table=table))
    )
    assert section is not None and section.id == "selfcheck" and section.title == "Self-check"
    page = BeautifulSoup(section.body, "html.parser")
    tables = {}
    for html in page.find_all("table"):
        header = [th.get_text() for th in html.thead.find_all("th")]
        rows = [[td.get_text() for td in tr.find_all("td")] for tr in html.tbody.find_all("tr")]
        tables[html["id"]] = pd.DataFrame(rows, columns=header)
        tables[html["id"]].attrs["caption"] = html.caption.get_text()
    assert set(tables) == {"selfcheck-cells", "selfcheck-heads"}
    return tables


def _points(value: float, sign: str = "") -> str:
    return f"{100 * value:{sign}.2f}"


@pytest.mark.parametrize("which", list(RECORDS))
def test_the_section_shows_the_recomputed_numbers(which):
    record, folder = _load(which)
    want_cells, want_heads = _expected(record, folder)
    tables = _section_tables(record, read_table(folder))

    cells = tables["selfcheck-cells"]
    assert len(cells) == len(want_cells)
    for _, row in cells.iterrows():
        task, encoder, head, freeze, seed = row["cell"].split("/")
        want = want_cells.loc[[(task, encoder, head, freeze, int(seed.removeprefix("seed=")))]]
        want = want.iloc[0]
        assert row["metric"] == want["metric"]
        assert (row["committed"], row["today"]) == (
            _points(want["committed"]),
            _points(want["today"]),
        )
        assert row["Δ"] == _points(want["diff"], "+")
        changed = "–" if np.isnan(want["changed"]) else f"{want['changed']:.0f}"
        assert (row["predictions changed"], row["of"]) == (changed, str(want["n_predictions"]))
        assert row["identical"] == ("yes" if want["identical"] else "no")
    assert "status" not in cells and "stale" not in cells  # every cell finished, none stale

    heads = tables["selfcheck-heads"]
    assert len(heads) == len(want_heads)
    for _, row in heads.iterrows():
        want = want_heads.loc[[tuple(row["setting"].split("/"))]].iloc[0]
        assert row["metric"] == want["metric"]
        assert (row["seeds"], row["re-run"]) == (str(want["n"]), ",".join(map(str, want["seeds"])))
        for column, value in [
            ("committed mean", want["committed_mean"]),
            ("t low", want["t_low"]),
            ("t high", want["t_high"]),
            ("BCa low", want["ci_low"]),
            ("BCa high", want["ci_high"]),
            ("today's mean", want["today_mean"]),
        ]:
            assert row[column] == _points(value), column
        assert row["shift"] == _points(want["shift"], "+")
        assert row["inside"] == ("yes" if want["inside"] else "no")

    env = environment(record).set_index("item")
    caption = cells.attrs["caption"]
    for value in (record["finished_at"][:10], record["today"]["git"]["commit"][:7]):
        assert value in caption
    assert env.at["device", "today"] in caption and env.at["device", "committed"] in caption
    assert len(caption.split()) <= 30 and len(heads.attrs["caption"].split()) <= 30


def test_the_2026_11_25_record_holds_a_moved_and_a_same_score_cell():
    record, folder = _load("2026-11-25")
    want_cells, want_heads = _expected(record, folder)
    cells = _by_key(cell_frame(record, read_table(folder)), seed=True)
    assert cells["identical"].sum() == want_cells["identical"].sum() == 4
    same = cells[cells["same_score"] & ~cells["identical"]]
    assert same.index.tolist() == [("sst2", "minilm", "last4_concat", "frozen", 2)]
    assert same["changed"].tolist() == [2.0] and same["n_predictions"].tolist() == [872]
    moved = cells[~cells["same_score"]]
    assert moved.index.tolist() == [("sst2", "minilm", "last4_concat", "frozen", 3)]
    # a head's mean takes today's values for its 3 re-run seeds of 10: it dilutes the move
    heads = _by_key(head_frame(record), seed=False)
    key = ("sst2", "minilm", "last4_concat", "frozen")
    own = want_cells.loc[[(*key, s) for s in (1, 2, 3)], "diff"]
    assert heads.loc[[key], "shift"].iloc[0] == pytest.approx(own.sum() / 10, abs=ATOL)
    assert heads["inside"].all() and want_heads["inside"].all()


def test_the_gpu_record_dilutes_its_largest_cell_move_in_its_heads_mean():
    record, folder = _load("fair_heads_gpu")
    want_cells, want_heads = _expected(record, folder)
    largest = want_cells["diff"].abs().idxmax()
    assert largest == ("rte", "minilm", "bilstm", "frozen", 3)
    key = largest[:4]
    own = want_cells.loc[[(*key, s) for s in (1, 2, 3)], "diff"]
    head = _by_key(head_frame(record), seed=False).loc[[key]].iloc[0]
    assert head["shift"] == pytest.approx(own.sum() / want_heads.loc[[key], "n"].iloc[0], abs=ATOL)
    assert abs(head["shift"]) < 0.005 < own.abs().min()  # each cell moved by points, the mean not


def _copy(parent: Path, record: dict | str | None) -> Path:
    """The committed results table in a fresh directory, with ``record`` as its selfcheck.json."""
    folder = parent / "fair_heads"
    folder.mkdir()
    shutil.copy(EXPERIMENT / "results.csv", folder / "results.csv")
    if record is not None:
        text = record if isinstance(record, str) else json.dumps(record)
        (folder / RECORD_FILE).write_text(text, encoding="utf-8")
    return folder


def test_a_record_the_results_no_longer_match_is_marked_stale(tmp_path):
    record, _ = _load("2026-11-25")
    folder = _copy(tmp_path, record)
    table = pd.read_csv(folder / "results.csv")
    row = (
        (table["task"] == "sst2")
        & (table["freeze_label"] == "frozen")
        & (table["head_label"] == "mean_linear")
        & (table["seed"] == 2)
        & (table["split"] == "dev")
        & (table["metric"] == "accuracy")
    )
    assert row.sum() == 1
    table.loc[row, "value"] += 1 / 872  # a cell committed again after the check
    table.to_csv(folder / "results.csv", index=False)
    table = read_table(folder)
    cells = _by_key(cell_frame(record, table), seed=True)
    assert cells.index[cells["stale"]].tolist() == [("sst2", "minilm", "mean_linear", "frozen", 2)]
    heads = _by_key(head_frame(record, table), seed=False)
    assert heads.index[heads["stale"]].tolist() == [("sst2", "minilm", "mean_linear", "frozen")]
    tables = _section_tables(record, table)
    assert tables["selfcheck-cells"]["stale"].tolist().count("yes") == 1
    assert tables["selfcheck-heads"]["stale"].tolist().count("yes") == 1


def test_a_head_that_moved_out_of_its_interval_is_shown_outside():
    record, folder = _load("2026-11-25")
    committed = read_table(folder)
    cells = committed[
        (committed["task"] == "sst2")
        & (committed["freeze_label"] == "frozen")
        & committed["head_label"].isin(["mean_linear", "last4_concat"])
        & committed["seed"].isin([1, 2, 3])
    ].copy()
    moved = (cells["head_label"] == "last4_concat") & (cells["split"] == "dev")
    cells.loc[moved, "value"] -= 0.05  # three seeds 5 points lower
    moved_record = {**record, **compare(committed, cells).records()}
    _, want_heads = _expected(moved_record, folder)
    assert want_heads["inside"].to_dict() == {
        ("sst2", "minilm", "last4_concat", "frozen"): False,
        ("sst2", "minilm", "mean_linear", "frozen"): True,
    }
    heads = _by_key(head_frame(moved_record), seed=False).loc[want_heads.index]
    assert heads["inside"].tolist() == heads["reproduces"].tolist() == [False, True]
    assert "ci_low" in heads and heads["ci_low"].isna().all()  # a new record: t alone
    shown = _section_tables(moved_record, committed)["selfcheck-heads"]
    assert shown["inside"].tolist() == ["no", "yes"] and "BCa low" not in shown
    # compared without predictions: the same score, but no cell is called identical
    assert not cell_frame(moved_record)["identical"].any()
    assert cell_frame(moved_record)["same_score"].sum() == 3


def test_without_a_record_there_is_no_section(tmp_path):
    folder = _copy(tmp_path, None)
    assert read_record(folder) is None
    inputs = SimpleNamespace(selfcheck=None, table=read_table(folder))
    assert selfcheck_section(SimpleNamespace(inputs=inputs)) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: "{not json", r"not JSON \(Expecting property name"),
        (lambda r: [r], "not a JSON object"),
        (
            lambda r: {k: v for k, v in r.items() if k != "settings"},
            "not a self-check record: no settings",
        ),
        (lambda r: {**r, "cells": []}, "'cells' must be a non-empty list"),
        (
            lambda r: {**r, "cells": [{k: v for k, v in r["cells"][0].items() if k != "today"}]},
            r"cells\[0\] lacks today",
        ),
        (
            lambda r: {**r, "cells": [{**r["cells"][0], "committed": "0.71"}]},
            r"cells\[0\]\.committed is '0\.71', not a number",
        ),
        (
            lambda r: {**r, "settings": [{**r["settings"][0], "t_low": True}]},
            r"settings\[0\]\.t_low is True, not a number",
        ),
    ],
)
def test_a_bad_record_is_an_error_naming_the_file(tmp_path, change, message):
    record, _ = _load("2026-11-25")
    bad = change(json.loads(json.dumps(record)))
    folder = _copy(tmp_path, bad)
    path = str(folder / RECORD_FILE)
    with pytest.raises(DataError, match=message) as err:
        read_record(folder)
    assert str(err.value).startswith(f"{path}: ")
    assert "python -m bench.run.selfcheck" in str(err.value)  # how to write it again


@pytest.mark.parametrize("which", list(RECORDS))
def test_a_record_in_a_results_copy_reads_as_committed(tmp_path, which):
    record, _ = _load(which)
    assert read_record(_copy(tmp_path, record)) == record


@pytest.mark.parametrize("which", list(RECORDS))
def test_the_environment_sets_the_committed_versions_beside_todays(which):
    record, _ = _load(which)
    env = environment(record).set_index("item")
    versions = record["committed"]["versions"]
    for name, version in record["today"]["versions"].items():
        committed = "/".join(versions[name])
        assert env.loc[name].tolist() == [committed, str(version), committed == str(version)]
    assert env.at["commit", "committed"] == "/".join(c[:7] for c in record["committed"]["git"])
    assert env.at["commit", "today"].startswith(record["today"]["git"]["commit"][:7])
    assert env.at["device", "today"] == f"CPU ({record['today']['hardware']['cpu_capability']})"
    devices = record["committed"].get("devices")
    assert env.at["device", "committed"] == ("/".join(devices) if devices else "not recorded")


def test_a_device_is_a_gpu_a_cpus_kernels_or_said_to_be_unknown():
    """fair_heads's cells recorded their machine (2 cores, no GPU) before the CPU's kernels
    were kept: they trained on a CPU, whose kernels are what is not recorded."""
    assert device_name({"gpu": "NVIDIA H200", "cpu_capability": "AVX512"}) == "NVIDIA H200"
    assert device_name({"gpu": None, "cpu_capability": "AVX2"}) == "CPU (AVX2)"
    cells = json.loads((ROOT / "results" / "fair_heads" / "cells.json").read_text())
    hardware = cells[0]["hardware"]
    assert hardware["gpu"] is None and "cpu_capability" not in hardware
    assert device_name(hardware) == "CPU (kernels not recorded)"
    assert device_name(None) == device_name({}) == "not recorded"


def test_a_mean_outside_a_recorded_bca_interval_is_outside():
    """Older records carry a BCa interval beside the t one: a mean must stay in both."""
    record, _ = _load("2026-11-25")
    record = json.loads(json.dumps(record))
    first = record["settings"][0]
    assert first["t_low"] <= first["today_mean"] <= first["t_high"]
    first["ci_high"] = first["today_mean"] - 1e-9  # inside t, just above the BCa interval
    heads = head_frame(record)
    assert heads["inside"].tolist() == [False] + [True] * (len(heads) - 1)
    assert heads["reproduces"].tolist() == heads["inside"].tolist()
