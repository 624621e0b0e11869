"""Readers refuse results they cannot trust (issue 50).

A results table that holds one cell twice, two tables joined with ``cat``, predictions that
do not cover their split once each, a cell whose predictions are gone; and ``collect`` given
overlapping roots. The fixtures are the committed results (``results/quick``'s table, cells of
``results/fair_heads_gpu/runs`` with their real predictions), changed as a careless user would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_report import write_synthetic_sweep

from bench.errors import DataError
from bench.report.__main__ import main as report_main
from bench.report.inputs import load_inputs
from bench.results import tables
from bench.results.collect import TABLE_FILES, collect, read_table
from bench.results.stats import RUN_KEYS, normalize_table, run_values
from bench.run.resume import cell_state
from conftest import ROOT

QUICK = ROOT / "results" / "quick"
COMMITTED = sorted(p.parent for p in (ROOT / "results").glob("*/results.parquet"))
#: Two committed SST-2 cells with their predictions (872 dev examples; seed 4: 660 right).
CELLS = ROOT / "results" / "fair_heads_gpu" / "runs" / "sst2" / "minilm" / "linear" / "frozen"
SEEDS = ("seed=4-order=4", "seed=8-order=8")


def _cli(module: str, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )


def _refused(capsys: pytest.CaptureFixture[str], run: object) -> str:
    """Call a command line's ``main``; it must exit 2 with one line; that line."""
    with pytest.raises(SystemExit) as exit_info:
        run()  # type: ignore[operator]
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


# --- a results table holding one cell twice ---------------------------------------------------


def _twice(kind: str, folder: Path) -> Path:
    """``results/quick``'s table with some cells listed again (as ``kind`` says)."""
    table = pd.read_csv(QUICK / "results.csv")
    if kind == "a failed copy":  # the table concatenated with itself, its runs marked failed
        copy = table.assign(status="failed", split=np.nan, metric=np.nan, value=np.nan)
    else:  # the first cell's dev accuracy again, with another value
        copy = table.iloc[:1].assign(value=0.99)
    folder.mkdir()
    pd.concat([table, copy]).to_csv(folder / "results.csv", index=False)
    return folder


@pytest.mark.parametrize("kind", ["a failed copy", "two ok values"])
def test_tables_and_report_refuse_a_table_holding_a_cell_twice(tmp_path, capsys, kind):
    source = _twice(kind, tmp_path / "twice")
    out = tmp_path / "out"
    for run in (
        lambda: tables.main([str(source), "--style", "heads", "-o", str(out)]),
        lambda: report_main([str(source), "-o", str(out / "r.html")]),
    ):
        err = _refused(capsys, run)
        assert "sst2/minilm/linear/frozen/seed=1" in err and "collect" in err, err
        assert "runs/quick/sst2/minilm/linear/frozen/seed=1" in err, err  # its run directory
    assert not out.exists()
    with pytest.raises(DataError, match="more than once"):  # the README and every statistic
        load_inputs(source)
    with pytest.raises(DataError, match="more than once"):
        run_values(pd.read_csv(source / "results.csv"))


@pytest.mark.parametrize("folder", COMMITTED, ids=lambda p: p.name)
def test_every_committed_table_loads_and_its_csv_reads_as_its_parquet(folder):
    csv, parquet = (normalize_table(read_table(folder / name)) for name in reversed(TABLE_FILES))
    assert not csv.empty
    read = [*RUN_KEYS, "status", "split", "metric", "value", "baseline", "run_dir"]
    pd.testing.assert_frame_equal(csv[read], parquet[read], check_dtype=False)


# --- malformed CSVs are named by file and row --------------------------------------------------


def test_two_tables_joined_with_cat_are_named_by_file_and_row(tmp_path):
    joined = tmp_path / "joined.csv"
    text = (QUICK / "results.csv").read_bytes()  # a header and 8 rows
    joined.write_bytes(text + text)
    proc = _cli("bench.results.tables", joined, "--style", "heads", "-o", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{joined}: row 10" in proc.stderr and "header" in proc.stderr, proc.stderr
    assert "collect" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_value_that_is_not_a_number_is_named_by_file_row_and_column(tmp_path, capsys):
    table = pd.read_csv(QUICK / "results.csv")
    table["seed"] = table["seed"].astype(object)
    table.loc[3, "seed"] = "one"
    table.to_csv(tmp_path / "results.csv", index=False)
    err = _refused(capsys, lambda: report_main([str(tmp_path), "-o", str(tmp_path / "r.html")]))
    assert f"{tmp_path / 'results.csv'}: row 5: seed='one'" in err and "integer" in err


# --- predictions that do not cover their split once each ---------------------------------------


@pytest.fixture
def two_cells(tmp_path):
    """Two committed cells copied into a runs folder, their dev predictions uncompressed."""
    runs = tmp_path / "runs"
    for seed in SEEDS:
        shutil.copytree(CELLS / seed, runs / seed)
        dev = pd.read_csv(runs / seed / "predictions_dev.csv.gz")
        (runs / seed / "predictions_dev.csv.gz").unlink()
        dev.to_csv(runs / seed / "predictions_dev.csv", index=False)
    return runs


def _collect(runs: Path, out: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    proc = _cli("bench.results.collect", runs, "-o", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, [c["run_dir"] for c in json.loads((out / "cells.json").read_text())]


@pytest.mark.parametrize("kind", ["doubled", "a quarter, same accuracy"])
def test_predictions_that_do_not_cover_the_split_once_are_refused(two_cells, tmp_path, kind):
    proc, kept = _collect(two_cells, tmp_path / "before")
    assert len(kept) == 2 and "warning" not in proc.stdout + proc.stderr  # the real cells pass
    path = two_cells / SEEDS[0] / "predictions_dev.csv"
    dev = pd.read_csv(path)
    if kind == "doubled":
        changed = pd.concat([dev, dev])
    else:  # 165 of the 660 right and 53 of the 212 wrong: the recorded accuracy, 218 rows
        right = dev["label"] == dev["pred"]
        changed = pd.concat([dev[right].iloc[:165], dev[~right].iloc[:53]])
    changed.to_csv(path, index=False)
    rows = len(changed)
    proc, kept = _collect(two_cells, tmp_path / "after")
    assert len(kept) == 1 and kept[0].endswith(SEEDS[1]), kept
    [warning] = [line for line in proc.stdout.splitlines() if "predictions_dev.csv" in line]
    assert "refused" in warning and "'dev'" in warning, warning
    assert f"{rows} rows" in warning and "872" in warning, warning
    frame = pd.read_parquet(tmp_path / "after" / "predictions.parquet")
    assert len(frame[frame["split"] == "dev"]) == 872  # the other cell's, each example once


# --- a cell whose predictions are gone ----------------------------------------------------------


def test_a_cell_whose_predictions_are_gone_is_named_and_trained_again(two_cells, tmp_path):
    gone = two_cells / SEEDS[0]
    (gone / "predictions_dev.csv").unlink()
    proc, kept = _collect(two_cells, tmp_path / "out")
    assert len(kept) == 1
    [warning] = [line for line in proc.stdout.splitlines() if "no predictions" in line]
    assert f"runs/{gone.name}: refused" in warning and "dev" in warning, warning
    assert "again" in warning and "superseded" in warning, warning  # how to re-run it
    # resume (a launch, and its --dry-run) no longer calls it done: it trains it again
    stored = json.loads((gone / "result.json").read_text())["config_hash"]
    state = cell_state(gone, stored)
    assert state.state == "corrupt" and "predictions_dev" in state.reason, state
    other = two_cells / SEEDS[1]
    assert (
        cell_state(other, json.loads((other / "result.json").read_text())["config_hash"]).state
        == "done"
    )


# --- collect given overlapping roots ------------------------------------------------------------


def test_overlapping_roots_read_each_file_once_and_each_warning_is_said_once(tmp_path):
    runs = tmp_path / "runs"
    write_synthetic_sweep(runs)
    path = sorted((runs / "sst2").rglob("result.json"))[0]
    result = json.loads(path.read_text())
    del result["config_hash"]  # one warning to count
    path.write_text(json.dumps(result))
    proc = _cli("bench.results.collect", runs, runs / "sst2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = proc.stdout + proc.stderr
    assert "duplicate" not in said, said
    assert said.count("no 'config_hash'") == 1, said


def test_two_results_of_one_run_directory_name_are_one_cell_to_collect(tmp_path, capsys):
    """Same label, seed and axes, other head options (two sweeps): one run to every table."""
    runs = tmp_path / "runs"
    write_synthetic_sweep(runs)
    result = json.loads(sorted((runs / "sst2").rglob("result.json"))[0].read_text())
    result["cell"] |= {"head": "pooler", "layers": "-2"}
    result["finished_at"] = "2099-01-01T00:00:00.000000Z"
    (runs / "other" / "seed=1").mkdir(parents=True)
    (runs / "other" / "seed=1" / "result.json").write_text(json.dumps(result))
    collect([runs], tmp_path / "out")  # before: the statistics refused the table it wrote
    said = capsys.readouterr().out
    assert "duplicate of cell sst2/tiny_bert/linear/frozen/seed=1" in said, said
    table = normalize_table(read_table(tmp_path / "out"))
    cell = table[(table["head_label"] == "linear") & (table["freeze_label"] == "frozen")]
    assert cell[cell["seed"] == 1]["head"].tolist() == ["pooler"]  # the later result
