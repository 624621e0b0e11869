"""The committed self-check shows in the report and in the README's Findings, truthfully.

``results/fair_heads/selfcheck.json`` is the record of one ``python -m bench.run.selfcheck
results/fair_heads`` run (with ``--slice NAME`` for another slice than the default one). Its
section in the report and its Findings sentence are checked against values computed here
from the committed ``results.csv`` with pandas and SciPy (the committed side) and from the
record's ``today`` values (the side only the re-run knows). Nothing here names what the
committed record holds: its slice, its cells, which of them are identical, moved or kept
their score with other predictions, and every count the sentence gives are derived from the
record and the results table, so the checks hold for whichever record is committed.

The record committed on 2026-11-25 is kept as a fixture,
``tests/data/selfcheck_fair_heads_2026-11-25_avx512.json``: the default slice (six SST-2
cells) re-trained on an AVX-512 machine, four identical, one with the same score and 2 of
872 predictions changed, one moved +0.57. Beside the committed results table it exercises
what an all-identical record cannot: a moved cell, a "same score" cell, the largest move and
the diluted shift of its head's mean. An all-identical record says so plainly; a record the
results no longer match is flagged; a missing record shows nothing; a bad one is an error
naming the file.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from bs4 import BeautifulSoup, Tag
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
#: The record committed on 2026-11-25 (default slice, AVX-512): 4 identical, 1 same score, 1 moved.
FIXTURE = Path(__file__).parent / "data" / "selfcheck_fair_heads_2026-11-25_avx512.json"

#: Written out here, not read from bench.report: the paper-style metric names, task titles.
SHORT = {"accuracy": "acc", "f1": "F1", "mcc": "MCC", "pearson": "Pearson"}
TITLES = {"sst2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "cola": "CoLA", "stsb": "STS-B"}
REGRESSION = {"stsb"}
#: A re-run cell's score is the committed one within this (docs/protocol.md).
ATOL = 1e-6


@pytest.fixture(scope="module")
def record() -> dict:
    if not RECORD.is_file():
        pytest.skip("no committed self-check record")
    return json.loads(RECORD.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def ctx(record) -> ReportContext:
    return build_context(load_inputs(EXPERIMENT))


@pytest.fixture(scope="module")
def old() -> dict:
    """The record committed on 2026-11-25, kept as a fixture."""
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def old_ctx(tmp_path_factory, old) -> ReportContext:
    """The 2026-11-25 record beside the committed results table, as the report reads it."""
    return build_context(load_inputs(_copy(tmp_path_factory.mktemp("old"), old)))


def _copy(parent: Path, record: dict | str | None) -> Path:
    """The committed results table in a fresh directory, with ``record`` as its selfcheck.json."""
    folder = parent / "fair_heads"
    folder.mkdir()
    shutil.copy(EXPERIMENT / "results.csv", folder / "results.csv")
    if record is not None:
        text = record if isinstance(record, str) else json.dumps(record)
        (folder / RECORD_FILE).write_text(text, encoding="utf-8")
    return folder


@functools.cache
def _results() -> pd.DataFrame:
    return pd.read_csv(EXPERIMENT / "results.csv")


def _committed(row: dict[str, Any]) -> tuple[pd.Series, str]:
    """A setting's dev main-metric values by seed and the metric's name, from results.csv."""
    table = _results()
    rows = table[
        (table["task"] == row["task"])
        & (table["encoder"] == row["encoder"])
        & (table["freeze_label"] == row["freeze_label"])
        & (table["head_label"] == row["head_label"])
        & (table["train_size"] == int(row["train_size"]))
        & (table["split"] == "dev")
        & (table["metric"] == table["main_metric"])
        & (table["status"] == "ok")
    ]
    assert rows["metric"].nunique() == 1, f"{row['task']}/{row['head_label']}: one main metric"
    values = rows.set_index("seed")["value"].astype(float).sort_index()
    assert values.index.is_unique, "one run per seed (no order seeds in fair_heads)"
    return values, str(rows["metric"].iloc[0])


def _setting(row: dict[str, Any]) -> tuple[str, str, str, str]:
    return (row["task"], row["encoder"], row["head_label"], row["freeze_label"])


def _tables(html: str) -> tuple[Tag, list[list[list[str]]]]:
    """The self-check section of a report page and the cells of each of its tables."""
    section = BeautifulSoup(html, "html.parser").find("section", id="selfcheck")
    assert section is not None, "the report has no self-check section"
    tables = [
        [[td.get_text() for td in tr.find_all("td")] for tr in t.tbody.find_all("tr")]
        for t in section.find_all("table")
        if t.tbody is not None
    ]
    return section, tables


def _expected(record: dict) -> dict:
    """Every number the section and the sentence show, computed here independently.

    ``cells`` by ``(task, encoder, head, freeze, seed)``: the committed value from
    results.csv, today's, their difference, whether the score is the same (within
    :data:`ATOL`) and whether the cell is identical (the same score and no prediction
    changed). ``heads`` by setting: the committed seeds' mean, 95% t and BCa intervals, and
    the mean with the re-run seeds' values from today.
    """
    assert float(record["identical_atol"]) == ATOL
    assert record["split"] == "dev" and float(record["confidence"]) == 0.95
    cells, heads = {}, {}
    for cell in record["cells"]:
        assert cell["status"] == "ok", "a record with failed cells: extend these checks"
        committed, metric = _committed(cell)
        value = committed[int(cell["seed"])]
        today = float(cell["today"])
        changed = None if cell["changed"] is None else int(cell["changed"])
        same = abs(today - value) <= ATOL
        cells[(*_setting(cell), int(cell["seed"]))] = {
            "row": cell,
            "metric": metric,
            "value": value,
            "today": today,
            "diff": today - value,
            "same": same,
            "changed": changed,
            "identical": same and changed == 0,
        }
        assert cell["metric"] == metric, f"{cell}: the task's main metric"
    for setting in record["settings"]:
        key = _setting(setting)
        x, metric = _committed(setting)
        seeds = sorted(int(s) for s in setting["seeds"])
        assert seeds == sorted(k[-1] for k in cells if k[:-1] == key), f"{key}: its cells"
        t_low, t_high = sps.t.interval(0.95, df=x.size - 1, loc=x.mean(), scale=sps.sem(x))
        assert setting["ci_method"] == "BCa" and x.nunique() > 1  # BCa needs spread
        boot = sps.bootstrap(
            (x.to_numpy(),), np.mean, n_resamples=10_000, method="BCa", rng=np.random.default_rng(0)
        ).confidence_interval
        mixed = x.copy()
        for seed in seeds:
            mixed[seed] = cells[(*key, seed)]["today"]
        today = mixed.mean()
        heads[key] = {
            "row": setting,
            "metric": metric,
            "n": x.size,
            "seeds": seeds,
            "mean": x.mean(),
            "t": (t_low, t_high),
            "bca": (boot.low, boot.high),
            "slice": (x[seeds].mean(), mixed[seeds].mean()),
            "today": today,
            "shift": today - x.mean(),
            "in_t": t_low <= today <= t_high,
            "in_bca": boot.low <= today <= boot.high,
        }
        # the record's own numbers agree with these up to float32 rounding of a metric
        assert abs(float(setting["shift"]) - (today - x.mean())) < ATOL, key
    return {"cells": cells, "heads": heads}


def _p(value: float) -> str:
    return f"{100 * value:.2f}"


def _signed(value: float) -> str:
    """A move in points with its sign; one too small for two decimals keeps two digits."""
    x = 100 * value
    return f"{x:+.1e}" if 1e-4 <= abs(x) < 0.005 else f"{x:+.2f}"


def _yes(inside: bool) -> str:
    return "yes" if inside else "NO"


def _seeds(seeds: list[int]) -> str:
    run = len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1))
    return f"{seeds[0]}-{seeds[-1]}" if run else ",".join(map(str, seeds))


def _where(row: dict[str, Any]) -> str:
    """``SST-2 frozen `last4_concat``` for a setting, with `` seed 2`` for a cell."""
    text = f"{TITLES[row['task']]} {row['freeze_label']} `{row['head_label']}`"
    return text + (f" seed {int(row['seed'])}" if "seed" in row else "")


def _predictions(cell: dict[str, Any]) -> str:
    return f"{cell['changed']} of {int(cell['row']['n_predictions'])} predictions changed"


def _command(record: dict) -> str:
    name = record["slice"]["name"]
    return (
        f"python -m bench.run.selfcheck {record['experiment']}"
        + ("" if name == "default" else f" --slice {name}")
        + (" --reuse-cache" if record.get("cache") == "reused" else "")
    )


def _devices(record: dict) -> str:
    """Today's device (fair_heads trains on CPUs) beside the committed cells', if recorded."""
    hardware = record["today"]["hardware"]
    assert hardware["gpu"] is None
    today = f"today on CPU ({hardware['cpu_capability']})"
    committed = [d for d in record["committed"].get("devices") or [] if d != "not recorded"]
    if not committed:
        return f"{today} (the committed cells do not record their hardware)"
    return f"{today}; the committed cells on {', '.join(committed)}"


def _findings(record: dict, expected: dict) -> str:
    """What the check found, as the Findings sentence words it after its opening."""
    cells = list(expected["cells"].values())
    identical = sum(c["identical"] for c in cells)
    count = f"all {len(cells)}" if identical == len(cells) else f"{identical} of {len(cells)}"
    text = f"{count} re-trained cells identical (score and predictions)"
    changed = [c for c in cells if c["same"] and c["changed"]]
    unknown = [c for c in cells if c["same"] and c["changed"] is None]
    if len(changed) == 1:
        text += (
            f", 1 with the same score but {_predictions(changed[0])} ({_where(changed[0]['row'])})"
        )
    elif changed:
        most = max(changed, key=lambda c: c["changed"])
        text += (
            f", {len(changed)} with the same score but changed predictions (most: "
            f"{_where(most['row'])}, {_predictions(most)})"
        )
    if unknown:
        text += f", {len(unknown)} with the same score (predictions not compared)"
    moved = [c for c in cells if not c["same"]]
    big = max(moved, key=lambda c: abs(c["diff"])) if moved else None
    if big is not None:
        known = "" if big["changed"] is None else f", {_predictions(big)}"
        text += (
            f", the largest move {_signed(big['diff'])} {SHORT[big['metric']]} points "
            f"({_where(big['row'])}{known})"
        )
    heads = expected["heads"]
    outside = [h for h in heads.values() if not (h["in_t"] and h["in_bca"])]
    if outside:
        named = ", ".join(
            f"{_where(h['row'])} (t {_yes(h['in_t'])}, BCa {_yes(h['in_bca'])})" for h in outside
        )
        return text + (
            f"; NOT REPRODUCED: {len(heads) - len(outside)} of {len(heads)} heads' means stay "
            f"within their committed 95% t and BCa intervals, not {named}."
        )
    text += (
        f"; every head's mean ({len(heads)} heads) stays within its committed 95% t and BCa "
        "intervals"
    )
    # "unchanged" goes by the record's shifts, which _expected checked against ours (their
    # float32 rounding of a metric can leave ~1e-8 where ours is 0: "largest shift 0.00")
    atol = float(record.get("identical_atol") or 0.0)
    if all(abs(float(s["shift"])) <= atol for s in record["settings"]):
        return text + " (unchanged)."
    text += f" (largest shift {100 * max(abs(h['shift']) for h in heads.values()):.2f} points)."
    if big is not None:
        home = heads[_setting(big["row"])]
        if len(home["seeds"]) < home["n"]:
            key = _setting(home["row"])
            moves = [_signed(expected["cells"][(*key, s)]["diff"]) for s in home["seeds"]]
            listed = moves[0] if len(moves) == 1 else f"{', '.join(moves[:-1])} and {moves[-1]}"
            text += (
                " A head's mean takes today's values for its re-run seeds only, which dilutes a "
                f"cell's move: {_where(home['row'])} seeds {_seeds(home['seeds'])} moved "
                f"{listed} points, its {home['n']}-seed mean {_signed(home['shift'])}."
            )
    return text


def _opening(record: dict) -> str:
    """The Findings sentence up to what the check found."""
    git = record["today"]["git"]
    commit = git["commit"][:7] + (" (modified tree)" if git.get("dirty") else "")
    committed = ", ".join(f"`{c[:7]}`" for c in record["committed"]["git"])
    return (
        f"Self-check (`{_command(record)}`, {record['finished_at'][:10]} at `{commit}` on cells "
        f"trained at {committed}; {_devices(record)}): "
    )


def _check_section(record: dict, ctx: ReportContext) -> tuple[Tag, list, dict]:
    """The section shows the record against the committed results; returns what it shows."""
    expected = _expected(record)
    section = selfcheck_section(ctx)
    assert section is not None and section.id == "selfcheck"
    page, (rows, cells, heads) = _tables(f'<section id="selfcheck">{section.body}</section>')
    about = dict(rows)
    assert about["Command"] == _command(record)
    assert about["Slice"].startswith(f"{record['slice']['name']}: ")
    git = record["today"]["git"]
    dirty = " (with uncommitted changes)" if git.get("dirty") else ""
    assert about["Code today"] == git["commit"] + dirty
    assert about["Code of the committed cells"] == ", ".join(record["committed"]["git"])
    kernels = record["today"]["hardware"]["cpu_capability"]
    assert about["Devices"].startswith(f"today on CPU ({kernels})")  # fair_heads: no GPU
    committed = record["committed"].get("devices") or ["not recorded"]
    if committed == ["not recorded"]:  # a record written before cells kept their hardware
        assert "(the committed cells do not record their hardware)" in about["Devices"]
    else:
        assert f"the committed cells on {', '.join(committed)}" in about["Devices"]
    assert about["Devices"].startswith(f"{_devices(record)}; CPU kernels today {kernels} on ")
    assert about["Finished at"] == record["finished_at"]

    findings = _findings(record, expected)
    verdict = page.find("p", string=lambda text: bool(text) and text.startswith("Verdict: "))
    assert verdict is not None and verdict.get_text() == f"Verdict: {findings.replace('`', '')}"
    assert f"Verdict: {check_text(record, code=False)}" in page.get_text()
    every = [c["identical"] for c in expected["cells"].values()]
    within = [h["in_t"] and h["in_bca"] for h in expected["heads"].values()]
    assert verdict["class"] == ["lead" if all(every) and all(within) else "warning"]
    # the record's own verdict line counts by score alone; the page says NOT REPRODUCED only
    assert ("REPRODUCED" in page.get_text()) == (not all(within))

    assert len(cells) == len(expected["cells"]) == len(record["cells"])
    shown = set()
    for row in cells:
        path, metric, committed_text, today, delta, changed_text = row
        task, encoder, head, freeze, seed = path.split("/")
        key = (task, encoder, head, freeze, int(seed.split("=")[1]))
        shown.add(key)
        want = expected["cells"][key]
        assert (metric, committed_text, today) == (
            SHORT[want["metric"]],
            _p(want["value"]),
            _p(want["today"]),
        ), path
        if not want["same"]:
            assert delta == _signed(want["diff"]), path
        else:  # identical only when no prediction changed either
            assert delta == ("identical" if want["identical"] else "same score"), path
        n, scores = want["row"]["n_predictions"], want["row"]["score_diff"]
        if n is None:  # no predictions read
            assert changed_text == "—", path
        elif want["changed"] is None:  # the committed ones unknown
            assert changed_text == f"n/a of {int(n)}", path
        else:
            assert changed_text == (
                f"{want['changed']} of {int(n)}"
                + (f" (scores: max |Δ| {scores:.1e})" if task in REGRESSION else "")
            ), path
            assert (scores is None) == (task not in REGRESSION), path
    assert shown == set(expected["cells"])
    same = sum(c["same"] and not c["identical"] for c in expected["cells"].values())
    assert [row[4] for row in cells].count("same score") == same

    assert len(heads) == len(expected["heads"]) == len(record["settings"])
    for row in heads:
        want = expected["heads"][tuple(row[0].split("/"))]
        assert row[1] == SHORT[want["metric"]]
        assert row[2] == str(want["n"])
        assert row[3] == _p(want["mean"])
        assert row[4] == f"{_p(want['t'][0])} to {_p(want['t'][1])}"
        assert row[5] == f"{_p(want['bca'][0])} to {_p(want['bca'][1])} (BCa)"
        assert row[6] == _seeds(want["seeds"])
        assert row[7] == f"{_p(want['slice'][0])} → {_p(want['slice'][1])}"
        assert row[8] == f"{_p(want['today'])} ({_signed(want['shift'])})"
        assert row[9] == f"t {_yes(want['in_t'])}, BCa {_yes(want['in_bca'])}"
    return page, cells, expected


def _check_sentence(record: dict, ctx: ReportContext) -> str:
    """The Findings sentence says what an independent count says; returns it."""
    expected = _expected(record)
    sentence = selfcheck_sentence(ctx.inputs.selfcheck, ctx.inputs.table)
    assert sentence is not None
    assert "changed since" not in sentence  # the record matches the committed results
    assert sentence == _opening(record) + _findings(record, expected)
    cells = expected["cells"].values()
    if all(c["identical"] for c in cells):  # said plainly, with nothing that moved
        assert f": all {len(cells)} re-trained cells identical (score and predictions);" in sentence
        assert "same score" not in sentence and "largest move" not in sentence
    return sentence


def test_the_section_shows_the_record_against_the_committed_results(record, ctx):
    _check_section(record, ctx)


def test_the_sentence_says_what_an_independent_count_says(record, ctx):
    _check_sentence(record, ctx)


def test_the_readme_gives_the_committed_record_sentence(record, ctx):
    sentence = selfcheck_sentence(ctx.inputs.selfcheck, ctx.inputs.table)
    assert sentence is not None
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


def test_the_2026_11_25_record_shows_its_moved_and_same_score_cells(old, old_ctx):
    """The default slice's six SST-2 cells: one kept its score with 2 predictions changed."""
    page, cells, expected = _check_section(old, old_ctx)
    about = dict(_tables(str(page))[1][0])
    assert about["Command"] == "python -m bench.run.selfcheck results/fair_heads"
    assert about["Code today"] == old["today"]["git"]["commit"]  # a clean tree
    assert len(cells) == len(expected["cells"]) == 6
    assert [row[4] for row in cells].count("same score") == 1  # last4_concat seed 2
    assert [row[4] for row in cells].count("identical") == 4
    moved = [row for row in cells if row[4] not in ("identical", "same score")]
    assert [row[0] for row in moved] == ["sst2/minilm/last4_concat/frozen/seed=3"]
    assert len(expected["heads"]) == 2
    assert {h["n"] for h in expected["heads"].values()} == {10}
    assert "REPRODUCED" not in page.get_text()  # the record's own line counts by score alone


def test_the_2026_11_25_record_sentence_names_the_same_score_cell_and_the_largest_move(
    old, old_ctx
):
    expected = _expected(old)
    diffs = {key[2:]: c["diff"] for key, c in expected["cells"].items()}  # (head, freeze, seed)
    changed = {(c["head_label"], c["freeze_label"], c["seed"]): c["changed"] for c in old["cells"]}
    same = [k for k, d in diffs.items() if abs(d) <= ATOL]
    identical = sum(changed[k] == 0 for k in same)
    (head, freeze, seed), largest = max(diffs.items(), key=lambda item: abs(item[1]))
    sentence = _check_sentence(old, old_ctx)
    assert sentence.startswith(
        "Self-check (`python -m bench.run.selfcheck results/fair_heads`, "
        f"{old['finished_at'][:10]} at `{old['today']['git']['commit'][:7]}`"
    )
    assert identical == 4 and len(same) == 5  # seed 2 of last4_concat: 2 predictions moved
    assert (
        f": {identical} of {len(diffs)} re-trained cells identical (score and predictions), "
        "1 with the same score but 2 of 872 predictions changed (SST-2 frozen `last4_concat` "
        "seed 2), the largest move"
    ) in sentence
    assert (head, freeze, seed) == ("last4_concat", "frozen", 3)
    assert (
        f"the largest move {100 * largest:+.2f} acc points (SST-2 frozen `{head}` seed {seed}"
        in sentence
    )
    heads = {key[2]: h for key, h in expected["heads"].items()}
    every = all(h["in_t"] and h["in_bca"] for h in heads.values())
    assert every and (
        "every head's mean (2 heads) stays within its committed 95% t and BCa intervals" in sentence
    )
    shift = max(abs(h["today"] - h["mean"]) for h in heads.values())
    assert shift > 0 and f"(largest shift {100 * shift:.2f} points)." in sentence
    moves = [diffs[(head, freeze, s)] for s in (1, 2, 3)]
    mine = heads[head]
    assert sentence.endswith(
        f"{head}` seeds 1-3 moved {100 * moves[0]:+.2f}, {100 * moves[1]:+.2f} and "
        f"{100 * moves[2]:+.2f} points, its {mine['n']}-seed mean "
        f"{100 * (mine['today'] - mine['mean']):+.2f}."
    )


def _old_slice(committed: pd.DataFrame) -> pd.DataFrame:
    """The committed rows of the 2026-11-25 record's slice: SST-2 frozen, two heads, seeds 1-3."""
    return committed[
        (committed["task"] == "sst2")
        & (committed["freeze_label"] == "frozen")
        & committed["head_label"].isin(["mean_linear", "last4_concat"])
        & committed["seed"].isin([1, 2, 3])
    ].copy()


def _all_identical(old: dict) -> dict:
    """The 2026-11-25 record's six cells re-run as committed, predictions included."""
    committed = read_table(EXPERIMENT)
    cells = _old_slice(committed)
    found = compare(committed, cells).records()
    for cell in found["cells"]:
        cell["changed"], cell["n_predictions"] = 0.0, 872  # every prediction compared, none moved
    return {**old, **found}


def test_an_all_identical_record_says_so_plainly(tmp_path, old):
    record = _all_identical(old)
    inputs = load_inputs(_copy(tmp_path, record))
    assert stale_lines(inputs.selfcheck, inputs.table) == []
    findings = (
        "all 6 re-trained cells identical (score and predictions); every head's mean (2 heads) "
        "stays within its committed 95% t and BCa intervals (unchanged)."
    )
    assert check_text(record) == check_text(record, code=False) == findings
    assert _findings(record, _expected(record)) == findings
    sentence = selfcheck_sentence(inputs.selfcheck, inputs.table)
    assert sentence == _opening(record) + findings
    page, cells, _ = _check_section(record, build_context(inputs))
    assert [row[4] for row in cells] == ["identical"] * 6
    verdict = page.find("p", string=lambda text: bool(text) and text.startswith("Verdict: "))
    assert verdict is not None and verdict["class"] == ["lead"]


def test_a_record_the_results_no_longer_match_is_flagged(tmp_path, old):
    folder = _copy(tmp_path, old)
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


def test_a_head_that_moved_out_of_its_interval_is_not_reproduced(old):
    committed = read_table(EXPERIMENT)
    cells = _old_slice(committed)
    moved = (cells["head_label"] == "last4_concat") & (cells["split"] == "dev")
    cells.loc[moved, "value"] -= 0.05  # three seeds 5 points lower: the mean leaves both
    moved_record = {**old, **compare(committed, cells).records()}
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
    assert sentence == _opening(moved_record) + _findings(moved_record, _expected(moved_record))


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


@pytest.mark.parametrize("which", ["committed", "2026-11-25"])
def test_a_record_in_a_results_copy_reads_as_committed(tmp_path, request, which):
    """The committed record, and the fixture the moved-cell checks use, match the results."""
    record = request.getfixturevalue("record" if which == "committed" else "old")
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
