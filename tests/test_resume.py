"""Resume, failure isolation and dry runs: real multiruns of tiny cells in real processes."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.results.collect import collect, read_table
from bench.results.run_records import last_launch, read_launch_log
from bench.run.plan import plan
from bench.run.resume import (
    CellState,
    ResumePolicy,
    cell_lock,
    cell_state,
    clear_run_outputs,
    running_elsewhere,
    should_run,
)
from conftest import CONF, ROOT, bench_in_this_process

TINY = (
    "encoder=tiny_bert",
    "data.train_size=48",
    "selection.size=32",  # the held-out slice: 500 by default, slow on two cores
    "trainer.max_epochs=1",
    "data.max_length=32",
    "data.batch_size=16",
)


def _bench(*args: str) -> subprocess.CompletedProcess:
    """``python -m bench *args``, exit status 0 (in this process: see conftest)."""
    proc = bench_in_this_process(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _results(runs: Path) -> dict[str, dict]:
    return {
        str(p.parent.relative_to(runs)): json.loads(p.read_text())
        for p in sorted(runs.rglob("result.json"))
    }


def _assert_nothing_half_written(root: Path) -> None:
    for path in root.rglob("*"):
        assert not path.name.endswith(".tmp"), f"leftover temp file {path}"
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".csv" and path.parent.name != "logs":
            with path.open() as handle:
                rows = list(csv.reader(handle))
            assert rows and len({len(r) for r in rows}) == 1, f"ragged CSV {path}"


# --- cell states ---------------------------------------------------------------------------


def _write_result(run_dir: Path, **fields) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "result.json").write_text(json.dumps(fields))


def test_cell_state_classifies_every_kind_of_run_directory(tmp_path):
    assert cell_state(tmp_path / "none", "h") == CellState("pending")
    _write_result(tmp_path / "ok", status="ok", config_hash="h")
    assert cell_state(tmp_path / "ok", "h") == CellState("done")
    stale = cell_state(tmp_path / "ok", "other")
    assert stale.state == "stale" and "other" in stale.reason
    _write_result(tmp_path / "bad", status="failed", config_hash="h", reason="DataError: x")
    assert cell_state(tmp_path / "bad", "h") == CellState("failed", "DataError: x")
    _write_result(tmp_path / "nan", status="diverged", config_hash="h", reason="loss nan")
    assert cell_state(tmp_path / "nan", "h").state == "diverged"
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "result.json").write_text('{"status": "ok", "config_h')  # truncated
    assert cell_state(tmp_path / "cut", "h").state == "corrupt"


@pytest.mark.parametrize(
    ("state", "policy", "expected"),
    [
        (CellState("pending"), ResumePolicy(), True),
        (CellState("corrupt"), ResumePolicy(), True),
        (CellState("stale"), ResumePolicy(), True),
        (CellState("done"), ResumePolicy(), False),
        (CellState("done"), ResumePolicy(rerun_failed=True), False),
        (CellState("done"), ResumePolicy(force=True), True),
        (CellState("failed"), ResumePolicy(), False),
        (CellState("failed"), ResumePolicy(rerun_failed=True), True),
        (CellState("diverged"), ResumePolicy(), False),
        (CellState("diverged"), ResumePolicy(rerun_failed=True), True),
        # a full disk or memory: retried unless +rerun_environmental=false
        (CellState("failed", "OSError: [Errno 28]", True), ResumePolicy(), True),
        (
            CellState("failed", "OSError: [Errno 28]", True),
            ResumePolicy(rerun_environmental=False),
            False,
        ),
        (CellState("running"), ResumePolicy(True, True), False),  # never trained twice
    ],
)
def test_which_cells_run_again(state, policy, expected):
    assert should_run(state, policy) is expected


def test_clearing_a_run_directory_removes_every_output_of_the_earlier_attempt(tmp_path):
    for name in (
        "result.json",
        "predictions_dev.csv",
        ".result.json.x1.tmp",
        "logs/metrics.csv",
        "tb/events.out",
        ".hydra/config.yaml",
        "cli.log",
        "superseded/abc/result.json",
        ".running.lock",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    clear_run_outputs(tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        ".running.lock",
        "superseded",
        "superseded/abc",
        "superseded/abc/result.json",
    ]


def test_collect_keeps_the_latest_result_of_a_duplicated_cell(tmp_path):
    cell = {
        "task": "rte",
        "encoder": "e",
        "head": "linear",
        "head_label": "linear",
        "layers": None,
        "freeze": "full",
        "freeze_label": "full",
        "seed": 1,
    }
    best = {"epoch": 0, "metrics": {"dev": {"accuracy": 0.6}}}
    _write_result(
        tmp_path / "a", cell=cell, status="ok", best=best, finished_at="2026-01-01T00:00:00.000000Z"
    )
    best = {"epoch": 1, "metrics": {"dev": {"accuracy": 0.7}}}
    _write_result(
        tmp_path / "b", cell=cell, status="ok", best=best, finished_at="2026-01-02T00:00:00.000000Z"
    )
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "result.json").write_text("{")  # unreadable: reported, not fatal
    table = collect([tmp_path], tmp_path / "out")
    assert table["value"].tolist() == [0.7]
    back = read_table(tmp_path / "out")  # Parquet round trip
    assert back["value"].tolist() == [0.7] and back["task"].tolist() == ["rte"]
    assert read_table(tmp_path / "out" / "results.csv")["value"].tolist() == [0.7]


# --- real multiruns ------------------------------------------------------------------------


@pytest.mark.slow  # three sweeps from the command line; should_run is tested above
def test_a_failing_cell_does_not_stop_the_sweep_and_reruns_only_when_asked(data_dir, tmp_path):
    """sst2/frozen diverges (NaN loss), rte fails (its training file holds no rows: the data's
    own fault, so not retried as missing data is), sst2/full is ok."""
    data = tmp_path / "data"
    (data / "glue" / "RTE").mkdir(parents=True)
    (data / "glue" / "SST-2").symlink_to(data_dir / "glue" / "SST-2")
    (data / "glue" / "RTE" / "dev.tsv").symlink_to(data_dir / "glue" / "RTE" / "dev.tsv")
    (data / "glue" / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n")
    runs = tmp_path / "runs"
    sweep = (
        "-m",
        "task=sst2,rte",
        "head=linear",
        "freeze=frozen,full",
        "seed=1",
        "optim.frozen_head_lr=1e36",
        "optim.warmup_ratio=0",
        f"data.dir={data}",
        f"runs_dir={runs}",
        f"results_dir={tmp_path}/results",
        *TINY,
    )
    _bench(*sweep)
    status = {cell: r["status"] for cell, r in _results(runs).items()}
    assert status == {
        "rte/tiny_bert/linear/frozen/seed=1": "failed",
        "rte/tiny_bert/linear/full/seed=1": "failed",
        "sst2/tiny_bert/linear/frozen/seed=1": "diverged",
        "sst2/tiny_bert/linear/full/seed=1": "ok",
    }
    assert "RTE" in _results(runs)["rte/tiny_bert/linear/full/seed=1"]["reason"]
    with (tmp_path / "results" / "results.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert sorted(r["status"] for r in table if r["task"] == "rte") == ["failed", "failed"]
    assert read_table(tmp_path / "results" / "results.parquet")["status"].tolist() == [
        r["status"] for r in table
    ]

    # Dry run: nothing would train; with +rerun_failed=true the three failures would.
    listing = _bench(*sweep, "--dry-run").stdout
    assert "4 cells: 1 diverged, 1 done, 2 failed; 0 would run" in listing
    assert "3 would run" in _bench(*sweep, "+rerun_failed=true", "--dry-run").stdout

    # A plain re-run trains nothing and leaves every result as it was.
    before = _results(runs)
    rerun = _bench(*sweep)
    assert rerun.stdout.count("skip (") == 4 and _results(runs) == before
    newest = last_launch(read_launch_log([runs]))
    assert newest["launches"] == 2 and newest["skipped"] == 4  # what the report shows
    assert newest["planned"] == sorted(status)  # each launch records the cells it planned

    # The RTE files are mended; re-running failed cells fixes them and keeps the ok one.
    (data / "glue" / "RTE" / "train.tsv").unlink()
    (data / "glue" / "RTE" / "train.tsv").symlink_to(data_dir / "glue" / "RTE" / "train.tsv")
    _bench(*sweep, "+rerun_failed=true")
    after = _results(runs)
    assert after["sst2/tiny_bert/linear/full/seed=1"] == before["sst2/tiny_bert/linear/full/seed=1"]
    assert after["rte/tiny_bert/linear/full/seed=1"]["status"] == "ok"
    assert after["sst2/tiny_bert/linear/frozen/seed=1"]["status"] == "diverged"  # still NaN
    _assert_nothing_half_written(runs)


def test_a_killed_sweep_resumes_to_every_cell_ok_exactly_once(data_dir, tmp_path):
    runs = tmp_path / "runs"
    sweep = (
        "-m",
        "task=sst2",
        "head=linear,bilstm",
        "freeze=frozen",
        "seed=1,2",
        f"data.dir={data_dir}",
        f"runs_dir={runs}",
        f"results_dir={tmp_path}/results",
        *TINY,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", *sweep],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not list(runs.rglob("result.json")) and time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before it could be killed"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-sweep: one cell done, the next one training
    proc.wait()
    finished = _results(runs)
    assert 1 <= len(finished) < 4 and all(r["status"] == "ok" for r in finished.values())
    assert not (tmp_path / "results" / "results.csv").exists()

    _bench(*sweep)
    results = _results(runs)
    assert len(results) == 4 and all(r["status"] == "ok" for r in results.values())
    for cell, result in finished.items():  # not trained twice
        assert results[cell]["finished_at"] == result["finished_at"]
    table = read_table(tmp_path / "results")
    cells = table.drop_duplicates(["head", "seed"])
    assert len(cells) == 4 and len(table) == 4  # one accuracy row per cell, no duplicates
    _assert_nothing_half_written(runs)


def test_dry_run_expands_a_preset_without_writing_anything(tmp_path):
    listing = _bench("-m", "+experiment=quick", f"runs_dir={tmp_path}/runs", "--dry-run").stdout
    assert "8 cells: 8 pending; 8 would run" in listing
    assert f"{tmp_path}/runs/sst2/minilm/bilstm/frozen/seed=1" in listing
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow  # plans 180 cells: most of a minute on two cores
def test_cpu_heads_is_the_promised_grid(tmp_path):
    cells = plan(CONF, ["experiment=cpu_heads", f"runs_dir={tmp_path}"], multirun=False)
    parts = [cell.run_dir.relative_to(tmp_path).parts for cell in cells]
    assert len(parts) == 180 == len(set(parts))
    assert {p[0] for p in parts} == {"sst2", "mrpc", "rte", "cola", "stsb"}
    assert {p[2] for p in parts} == {"linear", "pooler-random", "last4_concat", "bilstm"}
    assert {(p[1], p[3]) for p in parts} == {("minilm", f) for f in ("frozen", "top2", "full")}
    assert {p[4] for p in parts} == {"seed=1", "seed=2", "seed=3"}


@pytest.mark.slow  # the retired layers_sst2 preset's 60-cell plan (~20 s of composition)
def test_layers_sst2_is_the_promised_grid(tmp_path):
    cells = plan(CONF, ["experiment=layers_sst2", f"runs_dir={tmp_path}"], multirun=False)
    parts = [cell.run_dir.relative_to(tmp_path).parts for cell in cells]
    assert len(parts) == 60 == len(set(parts))
    choices = [f"L{i}" for i in range(7)] + [f"last4_{c}" for c in ("concat", "mean", "max")]
    assert {p[2] for p in parts} == {f"linear-{c}" for c in choices}
    assert {(p[0], p[1]) for p in parts} == {("sst2", "minilm")}
    assert {p[3] for p in parts} == {"frozen", "full"}


def test_a_sweep_whose_cells_share_a_run_directory_stops_before_training(tmp_path):
    sweep = (
        "-m",
        "task=sst2",
        "head=linear",
        "head.dropout=0.1,0.2",  # not part of the derived label
        "seed=1",
        f"runs_dir={tmp_path}/runs",
        f"results_dir={tmp_path}/results",
        *TINY,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *sweep],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2  # refused before Hydra starts, as the dry run refuses it
    assert "1 run directories would be shared" in proc.stderr and "head.label" in proc.stderr
    assert not (tmp_path / "runs").exists()
    labelled = _bench(*sweep, "head.label=linear-d${head.dropout}", "--dry-run").stdout
    assert "2 cells: 2 pending; 2 would run" in labelled and "shared" not in labelled


# --- one cell, one process ---------------------------------------------------------------

HOLD = """
import sys, time
from bench.run.resume import cell_lock
with cell_lock(sys.argv[1]) as mine:
    print("held" if mine else "refused", flush=True)
    time.sleep(600)
"""


def test_a_cell_another_process_is_training_is_skipped_not_trained_twice(tmp_path):
    run_dir = tmp_path / "runs" / "cell"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert running_elsewhere(run_dir) == CellState("running", "another process is training it")
        with cell_lock(run_dir) as mine:
            assert mine is False
        # The real command, even with +force=true: it says so and trains nothing.
        args = ("task=sst2", "head=linear", "seed=1", f"hydra.run.dir={run_dir}", "+force=true")
        proc = _bench(*args, *TINY)
        assert f"skip (running in another process): {run_dir}/result.json" in proc.stdout
        assert not (run_dir / "result.json").exists()
        assert "running" in _bench(*args, *TINY, "--dry-run").stdout
    finally:
        holder.send_signal(signal.SIGKILL)  # killed, as a crashed sweep would be
        holder.wait()
    assert running_elsewhere(run_dir) is None  # the OS released the dead holder's lock
    with cell_lock(run_dir) as mine:
        assert mine is True


@pytest.mark.slow  # plans 300 cells: about a minute on two cores
def test_fair_heads_is_the_promised_grid(tmp_path):
    cells = plan(CONF, ["experiment=fair_heads", f"runs_dir={tmp_path}"], multirun=False)
    parts = [cell.run_dir.relative_to(tmp_path).parts for cell in cells]
    assert len(parts) == 300 == len(set(parts))
    heads = {"linear", "pooler-random", "last4_concat", "bilstm", "mean_linear"}
    frozen = {p for p in parts if p[3] == "frozen"}
    full = {p for p in parts if p[3] == "full"}
    assert {p[0] for p in frozen} == {"sst2", "mrpc", "rte", "cola", "stsb"}
    assert {p[0] for p in full} == {"sst2", "rte"}
    assert {p[2] for p in parts} == heads and {p[1] for p in parts} == {"minilm"}
    assert {p[4] for p in frozen} == {f"seed={s}" for s in range(1, 11)}
    assert {p[4] for p in full} == {f"seed={s}" for s in range(1, 6)}
