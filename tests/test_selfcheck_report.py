"""The committed self-check shows in the report and in the README's Findings, truthfully.

``results/fair_heads/selfcheck.json`` is the record of one ``python -m bench.run.selfcheck
results/fair_heads`` run. Its section in the report and its Findings sentence are checked
against values computed here from the committed ``results.csv`` with pandas and SciPy (the
committed side) and from the record's ``today`` values (the side only the re-run knows). A
record the results no longer match is flagged; a missing record shows nothing; a bad one
is an error naming the file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bs4 import BeautifulSoup
from scipy import stats as sps

from bench.errors import DataError
from bench.report import SECTION_BUILDERS
from bench.report.__main__ import main as report_main
from bench.report.context import ReportContext, build_context
from bench.report.inputs import load_inputs
from bench.report.provenance import provenance_section
from bench.report.selfcheck import check_text, selfcheck_section, selfcheck_sentence
from bench.results.collect import read_table
from bench.results.reproduction import compare
from bench.results.selfcheck_record import RECORD_FILE, device_name, read_record, stale_lines
from conftest import ROOT

EXPERIMENT = ROOT / "results" / "fair_heads"
RECORD = EXPERIMENT / RECORD_FILE
REPORT = ROOT / "reports" / "fair_heads.html"
pytestmark = pytest.mark.skipif(not RECORD.is_file(), reason="no committed self-check record")


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def ctx() -> ReportContext:
    return build_context(load_inputs(EXPERIMENT))


def _committed(task: str, freeze: str, head: str) -> pd.Series:
    """A setting's dev main-metric values by seed, read from results.csv alone."""
    table = pd.read_csv(EXPERIMENT / "results.csv")
    rows = table[
        (table["task"] == task)
        & (table["encoder"] == "minilm")
        & (table["freeze_label"] == freeze)
        & (table["head_label"] == head)
        & (table["split"] == "dev")
        & (table["metric"] == table["main_metric"])
        & (table["status"] == "ok")
    ]
    return rows.set_index("seed")["value"].astype(float).sort_index()


def _tables(html: str) -> tuple[BeautifulSoup, list[list[list[str]]]]:
    """The self-check section of a report page and the cells of each of its tables."""
    section = BeautifulSoup(html, "html.parser").find("section", id="selfcheck")
    assert section is not None, "the report has no self-check section"
    tables = [
        [[td.get_text() for td in tr.find_all("td")] for tr in t.find("tbody").find_all("tr")]
        for t in section.find_all("table")
    ]
    return section, tables


def _expected(record: dict) -> dict:
    """Every number the section and the sentence show, computed here independently."""
    cells, heads = {}, {}
    for cell in record["cells"]:
        committed = _committed(cell["task"], cell["freeze_label"], cell["head_label"])
        value = committed[cell["seed"]]
        today = float(cell["today"])
        cells[(cell["head_label"], cell["seed"])] = (value, today, today - value)
    for setting in record["settings"]:
        head = setting["head_label"]
        x = _committed(setting["task"], setting["freeze_label"], head)
        t_low, t_high = sps.t.interval(0.95, df=x.size - 1, loc=x.mean(), scale=sps.sem(x))
        boot = sps.bootstrap(
            (x.to_numpy(),), np.mean, n_resamples=10_000, method="BCa", rng=np.random.default_rng(0)
        ).confidence_interval
        mixed = x.copy()
        for seed in setting["seeds"]:
            mixed[seed] = cells[(head, seed)][1]
        today = mixed.mean()
        heads[head] = {
            "n": x.size,
            "mean": x.mean(),
            "t": (t_low, t_high),
            "bca": (boot.low, boot.high),
            "today": today,
            "in_t": t_low <= today <= t_high,
            "in_bca": boot.low <= today <= boot.high,
        }
    return {"cells": cells, "heads": heads}


def _p(value: float) -> str:
    return f"{100 * value:.2f}"


def _yes(inside: bool) -> str:
    return "yes" if inside else "NO"


def test_the_section_shows_the_record_against_the_committed_results(record, ctx):
    expected = _expected(record)
    section = selfcheck_section(ctx)
    assert section is not None and section.id == "selfcheck"
    page, (about, cells, heads) = _tables(f'<section id="selfcheck">{section.body}</section>')
    about = dict(about)
    assert about["Command"] == "python -m bench.run.selfcheck results/fair_heads"
    assert about["Code today"] == record["today"]["git"]["commit"]
    assert about["Code of the committed cells"] == ", ".join(record["committed"]["git"])
    kernels = record["today"]["hardware"]["cpu_capability"]
    assert about["Devices"].startswith(f"today on CPU ({kernels})")  # fair_heads: no GPU
    committed = record["committed"].get("devices") or ["not recorded"]
    if committed == ["not recorded"]:  # a record written before cells kept their hardware
        assert "(the committed cells do not record their hardware)" in about["Devices"]
    else:
        assert f"the committed cells on {', '.join(committed)}" in about["Devices"]
    assert f"CPU kernels today {kernels}" in about["Devices"]
    assert about["Finished at"] == record["finished_at"]
    assert f"Verdict: {check_text(record, code=False)}" in page.get_text()
    assert "REPRODUCED" not in page.get_text()  # the record's own line counts by score alone

    assert len(cells) == len(expected["cells"]) == 6
    changed = {(c["head_label"], c["seed"]): c["changed"] for c in record["cells"]}
    for row in cells:
        path, metric, committed, today, delta, _changed = row
        head, seed = path.split("/")[2], int(path.rsplit("=", 1)[1])
        value, now, diff = expected["cells"][(head, seed)]
        assert (metric, committed, today) == ("acc", _p(value), _p(now)), path
        if abs(diff) > 1e-6:
            assert delta == f"{100 * diff:+.2f}", path
        else:  # identical only when no prediction changed either
            assert delta == ("identical" if changed[(head, seed)] == 0 else "same score"), path
    assert [row[4] for row in cells].count("same score") == 1  # last4_concat seed 2

    assert len(heads) == len(expected["heads"]) == 2
    for row in heads:
        head = row[0].split("/")[2]
        want = expected["heads"][head]
        assert row[2] == str(want["n"]) == "10"
        assert row[3] == _p(want["mean"])
        assert row[4] == f"{_p(want['t'][0])} to {_p(want['t'][1])}"
        assert row[5] == f"{_p(want['bca'][0])} to {_p(want['bca'][1])} (BCa)"
        assert row[8] == f"{_p(want['today'])} ({100 * (want['today'] - want['mean']):+.2f})"
        assert row[9] == f"t {_yes(want['in_t'])}, BCa {_yes(want['in_bca'])}"


def test_the_sentence_says_what_an_independent_count_says(record, ctx):
    expected = _expected(record)
    diffs = {key: d for key, (_, _, d) in expected["cells"].items()}
    changed = {(c["head_label"], c["seed"]): c["changed"] for c in record["cells"]}
    same = [k for k, d in diffs.items() if abs(d) <= 1e-6]
    identical = sum(changed[k] == 0 for k in same)
    (head, seed), largest = max(diffs.items(), key=lambda item: abs(item[1]))
    sentence = selfcheck_sentence(ctx.inputs.selfcheck, ctx.inputs.table)
    assert sentence is not None
    assert sentence.startswith(
        "Self-check (`python -m bench.run.selfcheck results/fair_heads`, "
        f"{record['finished_at'][:10]} at `{record['today']['git']['commit'][:7]}`"
    )
    assert identical == 4 and len(same) == 5  # seed 2 of last4_concat: 2 predictions moved
    assert (
        f": {identical} of {len(diffs)} re-trained cells identical (score and predictions), "
        "1 with the same score but 2 of 872 predictions changed (SST-2 frozen `last4_concat` "
        "seed 2), the largest move"
    ) in sentence
    assert (
        f"the largest move {100 * largest:+.2f} acc points (SST-2 frozen `{head}` seed {seed}"
        in sentence
    )
    every = all(h["in_t"] and h["in_bca"] for h in expected["heads"].values())
    assert every == (
        "every head's mean (2 heads) stays within its committed 95% t and BCa intervals" in sentence
    )
    shift = max(abs(h["today"] - h["mean"]) for h in expected["heads"].values())
    assert f"(largest shift {100 * shift:.2f} points)." in sentence
    moves = [diffs[(head, s)] for s in (1, 2, 3)]
    mine = expected["heads"][head]
    assert sentence.endswith(
        f"{head}` seeds 1-3 moved {100 * moves[0]:+.2f}, {100 * moves[1]:+.2f} and "
        f"{100 * moves[2]:+.2f} points, its {mine['n']}-seed mean "
        f"{100 * (mine['today'] - mine['mean']):+.2f}."
    )
    assert "changed since" not in sentence  # the record matches the committed results
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert sentence in readme


def test_the_committed_report_shows_the_committed_record(record, ctx):
    section = selfcheck_section(ctx)
    assert section is not None
    _, now = _tables(f'<section id="selfcheck">{section.body}</section>')
    page, committed = _tables(REPORT.read_text(encoding="utf-8"))
    assert committed == now  # the committed page is the record's, every cell and head
    assert f"Verdict: {check_text(record, code=False)}" in page.get_text()
    # the section sits before provenance, after every analysis section
    assert (
        SECTION_BUILDERS.index(selfcheck_section) == SECTION_BUILDERS.index(provenance_section) - 1
    )


def _copy(tmp_path: Path, record: dict | str | None) -> Path:
    """The committed results table in a fresh directory, with ``record`` as its selfcheck.json."""
    folder = tmp_path / "fair_heads"
    folder.mkdir()
    shutil.copy(EXPERIMENT / "results.csv", folder / "results.csv")
    if record is not None:
        text = record if isinstance(record, str) else json.dumps(record)
        (folder / RECORD_FILE).write_text(text, encoding="utf-8")
    return folder


def test_a_record_the_results_no_longer_match_is_flagged(tmp_path, record):
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
    inputs = load_inputs(folder)
    lines = stale_lines(inputs.selfcheck, inputs.table)
    assert lines[0].startswith("sst2/minilm/mean_linear/frozen/seed=2: committed 0.802752")
    assert lines[1] == (
        "sst2/minilm/mean_linear/frozen: committed_mean, t_low, t_high, ci_low, ci_high "
        "changed since the check"
    )
    assert len(lines) == 2
    sentence = selfcheck_sentence(inputs.selfcheck, inputs.table)
    assert sentence is not None
    assert sentence.endswith(
        "The committed results have changed since it ran (2 values differ): re-run it."
    )
    section = selfcheck_section(build_context(inputs))
    assert section is not None and "have changed since this check ran" in section.body


def test_a_head_that_moved_out_of_its_interval_is_not_reproduced(record):
    committed = read_table(EXPERIMENT)
    cells = committed[
        (committed["task"] == "sst2")
        & (committed["freeze_label"] == "frozen")
        & committed["head_label"].isin(["mean_linear", "last4_concat"])
        & committed["seed"].isin([1, 2, 3])
    ].copy()
    moved = (cells["head_label"] == "last4_concat") & (cells["split"] == "dev")
    cells.loc[moved, "value"] -= 0.05  # three seeds 5 points lower: the mean leaves both
    moved_record = {**record, **compare(committed, cells).records()}
    sentence = selfcheck_sentence(moved_record, committed)
    assert sentence is not None
    # compared without predictions: a cell with the committed score is not called identical
    assert (
        ": 0 of 6 re-trained cells identical (score and predictions), 3 with the same score "
        "(predictions not compared), the largest move -5.00 acc points"
    ) in sentence
    assert sentence.endswith(
        "NOT REPRODUCED: 1 of 2 heads' means stay within their committed 95% t and BCa "
        "intervals, not SST-2 frozen `last4_concat` (t NO, BCa NO)."
    )


def test_without_a_record_there_is_no_section_and_no_sentence(tmp_path):
    folder = _copy(tmp_path, None)
    inputs = load_inputs(folder)
    assert inputs.selfcheck is None and read_record(folder) is None
    assert selfcheck_section(build_context(inputs)) is None
    assert selfcheck_sentence(inputs.selfcheck, inputs.table) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: "{not json", r"not JSON \(Expecting property name"),
        (lambda r: [r], "not a JSON object"),
        (
            lambda r: {k: v for k, v in r.items() if k != "verdict"},
            "not a self-check record: no verdict",
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
    ],
)
def test_a_bad_record_is_an_error_naming_the_file(tmp_path, record, change, message, capsys):
    folder = _copy(tmp_path, None)
    bad = change(json.loads(json.dumps(record)))
    (folder / RECORD_FILE).write_text(bad if isinstance(bad, str) else json.dumps(bad))
    path = str(folder / RECORD_FILE)
    with pytest.raises(DataError, match=message) as err:
        load_inputs(folder)
    assert str(err.value).startswith(f"{path}: ")
    assert "python -m bench.run.selfcheck" in str(err.value)  # how to write it again
    with pytest.raises(SystemExit) as exit_:
        report_main([str(folder), "-o", str(tmp_path / "report.html")])
    assert exit_.value.code == 2  # bad input, named in one line
    assert capsys.readouterr().err.startswith(f"error: {path}: ")
    assert not (tmp_path / "report.html").exists()


def test_a_record_in_a_results_copy_reads_as_committed(tmp_path, record):
    folder = _copy(tmp_path, record)
    assert read_record(folder) == record
    assert stale_lines(record, load_inputs(folder).table) == []


GPU = ROOT / "results" / "fair_heads_gpu"


@pytest.mark.skipif(not (GPU / RECORD_FILE).is_file(), reason="no fair_heads_gpu self-check")
def test_the_gpu_check_names_its_largest_cell_move_beside_the_diluted_mean():
    """The cross-device check: each RTE ``bilstm`` cell moved by points, its mean barely."""
    record = json.loads((GPU / RECORD_FILE).read_text(encoding="utf-8"))
    table = pd.read_csv(GPU / "results.csv")
    dev = table[
        (table["split"] == "dev")
        & (table["metric"] == table["main_metric"])
        & (table.status == "ok")
    ]
    moves, committed = {}, {}
    for cell in record["cells"]:
        key = (cell["task"], cell["head_label"])
        rows = dev[(dev["task"] == cell["task"]) & (dev["head_label"] == cell["head_label"])]
        rows = rows[rows["freeze_label"] == cell["freeze_label"]]
        committed[key] = rows.set_index("seed")["value"].astype(float)
        value = committed[key][cell["seed"]]
        moves[(*key, cell["seed"])] = (float(cell["today"]) - value, cell["changed"])
    (task, head, seed), (largest, changed) = max(moves.items(), key=lambda kv: abs(kv[1][0]))
    assert (task, head, seed) == ("rte", "bilstm", 3)
    identical = sum(abs(d) <= 1e-6 and c == 0 for d, c in moves.values())
    text = check_text(record)
    assert text.startswith(f"{identical} of {len(moves)} re-trained cells identical")
    assert (
        f"the largest move {100 * largest:+.2f} acc points (RTE frozen `bilstm` seed 3, "
        f"{int(changed)} of 277 predictions changed)"
    ) in text
    own = [moves[(task, head, s)][0] for s in (1, 2, 3)]
    values = committed[(task, head)]
    shift = sum(own) / len(values)
    assert abs(100 * shift) < 0.5 < min(abs(100 * d) for d in own)  # diluted ten-fold
    assert text.endswith(
        f"RTE frozen `bilstm` seeds 1-3 moved {100 * own[0]:+.2f}, {100 * own[1]:+.2f} and "
        f"{100 * own[2]:+.2f} points, its {len(values)}-seed mean {100 * shift:+.2f}."
    )


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
