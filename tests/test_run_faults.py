"""Issue 20's holes in launching and resuming, each through the real CLI and real files.

A re-run keeps an earlier configuration's finished result; names never become paths
outside ``runs_dir``; unwritable output directories stop a sweep before training and a
sweep that could not write its results does not exit 0; skipped cells are left untouched;
bad or missing seeds get one line; a full disk names its path and is retried; a dry run
runs every preflight check; a cell stopped by a signal exits with 128 + the signal.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_interrupts import LONG_CELL
from test_report import write_synthetic_sweep

from bench.atomic import atomic_write, unwritable_reason
from bench.cell import config_hash
from bench.results.collect import collect
from bench.run.plan import plan
from bench.run.resume import CellState, ResumePolicy, cell_state, should_run
from bench.run.train import run
from conftest import CONF, ROOT, bench_in_this_process

SMALL = (
    "encoder=tiny_bert",
    "data.train_size=48",
    "selection.size=32",  # the held-out slice: 500 by default, slow on two cores
    "trainer.max_epochs=1",
    "data.max_length=32",
    "data.batch_size=16",
    "task=sst2",
    "head=linear",
)
TINY = (*SMALL, "freeze=frozen")
CELL = "sst2/tiny_bert/linear/frozen/seed=1"


def _bench(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _sweep(tmp_path: Path, *extra: str, cell: tuple[str, ...] = TINY) -> tuple[str, ...]:
    return (
        "-m",
        *cell,
        f"runs_dir={tmp_path}/runs",
        f"results_dir={tmp_path}/results",
        f"cache.dir={tmp_path}/cache",
        "report_file=null",  # no HTML report: these tests are about what is kept or refused
        *extra,
    )


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file below ``root``: modification time (ns) and content hash."""
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


# --- 3. a changed configuration never deletes the finished result -------------------------


def test_a_rerun_with_another_config_keeps_the_finished_result_in_superseded(tmp_path):
    first = bench_in_this_process(*_sweep(tmp_path, "seed=1"))
    assert first.returncode == 0, first.stderr[-2000:]
    cell = tmp_path / "runs" / CELL
    earlier = (cell / "result.json").read_bytes()
    predictions = (cell / "predictions_dev.csv").read_bytes()

    # optim.frozen_head_lr is hashed: the stored result is stale
    second = bench_in_this_process(*_sweep(tmp_path, "seed=1", "optim.frozen_head_lr=3e-3"))
    assert second.returncode == 0, second.stderr[-2000:]
    stored_hash = json.loads(earlier)["config_hash"][:12]
    kept = cell / "superseded" / stored_hash
    assert f"kept the earlier result (stale: stored config {stored_hash}" in second.stdout
    assert (kept / "result.json").read_bytes() == earlier
    assert (kept / "predictions_dev.csv").read_bytes() == predictions
    assert (kept / ".hydra" / "config.yaml").is_file()
    newer = json.loads((cell / "result.json").read_text())
    assert newer["status"] == "ok" and newer["config"]["optim"]["frozen_head_lr"] == 3e-3

    # Back to the first configuration: the second result is kept too, nothing is lost.
    third = bench_in_this_process(*_sweep(tmp_path, "seed=1"))
    assert third.returncode == 0, third.stderr[-2000:]
    assert sorted(p.name for p in (cell / "superseded").iterdir()) == sorted(
        [stored_hash, newer["config_hash"][:12]]
    )

    # +force=true re-trains a done cell; its finished result is kept as well (a suffix).
    done = (cell / "result.json").read_bytes()
    forced = bench_in_this_process(*_sweep(tmp_path, "seed=1", "+force=true"))
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert f"kept the earlier result (done) in {cell}/superseded/{stored_hash}-2" in forced.stdout
    assert (cell / "superseded" / f"{stored_hash}-2" / "result.json").read_bytes() == done


def test_an_unreadable_result_is_kept_not_deleted(tmp_path):
    cell = tmp_path / "runs" / CELL
    cell.mkdir(parents=True)
    (cell / "result.json").write_text('{"schema": 99, "status": "ok", "hand-edited": tru')
    proc = bench_in_this_process(*_sweep(tmp_path, "seed=1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (cell / "superseded" / "unreadable" / "result.json").read_text().endswith("tru")
    assert json.loads((cell / "result.json").read_text())["status"] == "ok"


# --- 5. names never become paths outside runs_dir -----------------------------------------


# Each name in a sweep; one also as a single run (the same check, another entry point:
# every launch is a subprocess of ~8 s, so not every name twice).
@pytest.mark.parametrize(
    ("override", "key", "multirun"),
    [
        ("head.label=../../escaped", "head.label", True),
        ("freeze.label=a/b", "freeze.label", True),
        ("sweep_name=../escaped", "sweep_name", True),
        ("head.label=..", "head.label", True),
        ("sweep_name=../escaped", "sweep_name", False),
    ],
    ids=["head-sweep", "freeze-sweep", "sweep_name-sweep", "dotdot-sweep", "sweep_name-single"],
)
def test_a_name_with_a_path_separator_or_dotdot_is_refused_before_anything_is_written(
    tmp_path, override, key, multirun
):
    runs = tmp_path / "deep" / "runs"
    args = (*TINY, "seed=1", f"runs_dir={runs}", f"results_dir={tmp_path}/deep/results", override)
    proc = _bench(*(("-m",) if multirun else ()), *args)
    assert proc.returncode == 2
    lines = _error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}=") and "'..'" in lines[0]
    assert list(tmp_path.rglob("*")) == [], "nothing may be created, inside runs_dir or out"


# --- 6. unwritable output directories -----------------------------------------------------


def test_an_unwritable_results_dir_stops_the_sweep_before_training(tmp_path):
    (tmp_path / "a_file").write_text("not a directory")
    proc = _bench(*_sweep(tmp_path, "seed=1", f"results_dir={tmp_path}/a_file/results"))
    assert proc.returncode == 2
    assert _error_lines(proc) == [
        f"error: results_dir={tmp_path}/a_file/results: cannot write there ({tmp_path}/a_file "
        "is not a directory); choose a writable directory (runs_dir=..., results_dir=... or "
        "sweep_name=...)"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_sweep_whose_results_cannot_be_written_at_its_end_exits_non_zero(tmp_path):
    (tmp_path / "results" / "results.csv").mkdir(parents=True)  # in the way of the table
    proc = bench_in_this_process(*_sweep(tmp_path, "seed=1"))
    assert proc.returncode == 1
    assert f"error: the results were not collected into {tmp_path}/results" in proc.stderr
    assert json.loads((tmp_path / "runs" / CELL / "result.json").read_text())["status"] == "ok"


def test_a_sweep_into_another_sweeps_results_is_refused_before_it_trains(tmp_path, monkeypatch):
    """The reported bug: a one-cell sweep's end replaced a collected table with its one cell.

    Its end would now refuse to collect (test_collect_faults.py); the launch refuses first,
    before training, and names the ways out. Taking one (another results_dir, then one
    collect of both sweeps) keeps every cell.
    """
    earlier, runs, results = tmp_path / "earlier", tmp_path / "runs", tmp_path / "results"
    cells = write_synthetic_sweep(earlier)  # real result files, collected as a sweep's end does
    monkeypatch.chdir(ROOT)
    collect([earlier], results)
    before = _snapshot(results)
    before.pop(".collect.lock")  # the lock is taken again, its time may change
    proc = bench_in_this_process(*_sweep(tmp_path, "seed=1"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = [x for x in _error_lines(proc) if x.startswith("error:")]
    assert line.startswith(
        f"error: {results} holds {len(cells)} cells that this sweep's end would drop from its "
        f"tables, since it collects {runs} alone: {len(cells)} from run directories outside "
        f"{runs} (e.g. "
    )
    assert line.endswith("nothing trained")
    assert not (runs / CELL / "result.json").exists()
    after = _snapshot(results)
    after.pop(".collect.lock")
    assert after == before  # every output: same bytes, same modification time
    # the way out the message names: this sweep's tables elsewhere, then both in one table
    elsewhere = tmp_path / "results-new"
    proc = bench_in_this_process(*_sweep(tmp_path, "seed=1"), f"results_dir={elsewhere}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((runs / CELL / "result.json").read_text())["status"] == "ok"
    both = ["-m", "bench.results.collect", str(earlier), str(runs), "-o", str(results)]
    proc = subprocess.run([sys.executable, *both], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(json.loads((results / "cells.json").read_text())) == len(cells) + 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_unwritable_reason_names_the_directory_in_the_way(tmp_path):
    assert unwritable_reason(tmp_path / "new" / "deeper") is None  # made when needed
    (tmp_path / "f").write_text("x")
    assert unwritable_reason(tmp_path / "f" / "sub") == f"{tmp_path / 'f'} is not a directory"


# --- 7. skipped cells are left untouched --------------------------------------------------

HOLD = """
import sys, time
from bench.run.resume import cell_lock
with cell_lock(sys.argv[1]) as mine:
    print("held" if mine else "refused", flush=True)
    time.sleep(600)
"""


def test_a_skipped_cell_is_left_untouched_done_or_running_elsewhere(tmp_path):
    sweep = _sweep(tmp_path, "seed=1")
    assert bench_in_this_process(*sweep).returncode == 0
    cell = tmp_path / "runs" / CELL
    before = _snapshot(cell)
    assert ".hydra/config.yaml" in before and "result.json" in before

    done = bench_in_this_process(*sweep)  # skipped: done
    assert done.returncode == 0 and f"skip (done): {cell}/result.json" in done.stdout
    assert _snapshot(cell) == before

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(cell)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # skipped: another process trains it
        running = bench_in_this_process(*sweep, "+force=true")
        assert running.returncode == 0, running.stderr[-2000:]
        assert f"skip (running in another process): {cell}/result.json" in running.stdout
        assert _snapshot(cell) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


# --- 10. seeds: out of range or missing ----------------------------------------------------


RANGE = "must be an integer from 0 to 4294967295"
MISSING = "error: seed: required, no value given; e.g. seed=1, or seed=1,2,3 with -m"


@pytest.mark.parametrize(
    ("seed_args", "message", "multirun"),
    [
        (("seed=-1",), f"error: seed=-1: {RANGE}", True),
        (("seed=4294967296",), f"error: seed=4294967296: {RANGE}", True),
        ((), MISSING, True),
        (("seed=-1",), f"error: seed=-1: {RANGE}", False),
        ((), MISSING, False),
    ],
    ids=["negative-sweep", "too-large-sweep", "missing-sweep", "negative-single", "missing-single"],
)
def test_a_bad_or_missing_seed_is_one_line_naming_the_key(tmp_path, seed_args, message, multirun):
    args = (*TINY, *seed_args, f"runs_dir={tmp_path}/runs", f"results_dir={tmp_path}/results")
    proc = _bench(*(("-m",) if multirun else ()), *args)
    assert proc.returncode == 2
    lines = _error_lines(proc)
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr[-2000:]
    assert not (tmp_path / "runs").exists()


# --- 11. a full disk names its path and is retried -----------------------------------------


def test_a_full_disk_names_the_path_and_the_cell_is_retried(
    compose_cfg, data_dir, tmp_path, monkeypatch
):
    def disk_full(run_dir, predictions):  # what a write on a full disk raises: no file name
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("bench.model.task_types.write_predictions", disk_full)
    cfg = compose_cfg(*TINY, "seed=1", f"data.dir={data_dir}", f"cache.dir={tmp_path}/cache")
    run_dir = tmp_path / "runs" / CELL
    result = run(cfg, run_dir)
    assert result["status"] == "failed" and result["retryable"] is True
    assert result["reason"].startswith("OSError: [Errno 28] No space left on device")
    assert f"while writing under run_dir {run_dir} (" in result["reason"]
    assert f"cache {tmp_path}/cache/features (" in result["reason"]

    state = cell_state(run_dir, config_hash(cfg))
    assert state == CellState("failed", result["reason"], True)
    assert should_run(state)  # a plain re-run retries it
    assert not should_run(state, ResumePolicy(rerun_environmental=False))


def test_a_cell_that_fails_for_its_own_reason_is_not_retried(compose_cfg, data_dir, tmp_path):
    # More training examples than the split has: the cell's own config, not the machine's.
    cfg = compose_cfg(*TINY, "seed=1", f"data.dir={data_dir}", "data.train_size=1000000")
    result = run(cfg, tmp_path / "run")
    assert result["status"] == "failed" and result["retryable"] is False
    assert result["reason"].startswith("ConfigError: data.train_size=1000000")
    assert not should_run(CellState("failed", result["reason"], result["retryable"]))


def test_a_cell_whose_data_directory_is_missing_is_retried(compose_cfg, tmp_path):
    """``data.dir`` is not hashed: once the path is fixed, a plain re-run trains the cell."""
    cfg = compose_cfg(*TINY, "seed=1", f"data.dir={tmp_path}/no-such-data")
    result = run(cfg, tmp_path / "run")
    assert result["status"] == "failed" and result["retryable"] is True
    assert result["reason"].startswith(f"MissingDataError: data.dir={tmp_path}/no-such-data:")
    assert should_run(CellState("failed", result["reason"], result["retryable"]))


def test_an_atomic_write_that_fails_without_a_file_name_names_its_destination(tmp_path):
    def full(handle):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=r"No space left on device: '.*/out\.json'") as caught:
        atomic_write(tmp_path / "out.json", full)
    assert caught.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # no temp file left behind


# --- 13. a dry run runs every preflight check -----------------------------------------------


def test_a_dry_run_runs_every_preflight_check_and_exits_2_when_one_fails(tmp_path):
    sweep = (*_sweep(tmp_path, "seed=1", "freeze=top_k", "freeze.k=1,99", cell=SMALL), "--dry-run")
    proc = _bench(*sweep)
    assert proc.returncode == 2
    lines = proc.stdout.splitlines()
    assert any(line.startswith("run  pending") and "top1" in line for line in lines)
    refused = [line for line in lines if line.startswith("fail pending")]
    assert len(refused) == 1 and "top99" in refused[0]
    assert "preflight: ConfigError: freeze.k=99" in refused[0]
    assert "2 cells: 2 pending; 2 would run (1 would fail preflight)" in proc.stdout
    assert not (tmp_path / "runs").exists()


def test_plan_checks_cells_only_with_a_check_given():
    cells = plan(CONF, [*SMALL, "seed=1", "freeze=top_k", "freeze.k=99"], multirun=False)
    assert cells[0].problem is None  # the callback's plan: identity and directories only


# --- 14. a stop signal exits with 128 + the signal ---------------------------------------------


@pytest.mark.parametrize(
    ("signum", "form"),
    [(signal.SIGINT, "single"), (signal.SIGINT, "sweep"), (signal.SIGTERM, "single")],
    ids=["SIGINT-single", "SIGINT-sweep", "SIGTERM-single"],
)
def test_a_cell_stopped_mid_training_exits_128_plus_the_signal(data_dir, tmp_path, signum, form):
    """Ctrl-C reaches the process group while Lightning trains: Lightning turns its
    KeyboardInterrupt into ``sys.exit(1)``, which must not hide the signal."""
    runs = tmp_path / "runs"
    args = (*LONG_CELL, "seed=1", f"data.dir={data_dir}", f"runs_dir={runs}")
    args += (f"results_dir={tmp_path}/results", "report_file=null")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", *(["-m"] if form == "sweep" else []), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    cell = runs / "sst2" / "tiny_bert" / "linear" / "full" / "seed=1"
    deadline = time.monotonic() + 300
    while not (cell / "logs" / "metrics.csv").exists():  # Lightning is in the fit loop
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the cell never started training"
        time.sleep(0.2)
    time.sleep(2)  # a few steps in
    os.killpg(proc.pid, signum)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, output[-3000:]
    assert not (cell / "result.json").exists() and "failed:" not in output
