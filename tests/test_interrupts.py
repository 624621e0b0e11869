"""A stop signal leaves the cell being trained pending, and the process starts no other cell.

The case this guards: a deadline's ``timeout`` signals a sweep's whole process group; the
DataLoader workers die first, the training process saw "DataLoader worker ... is killed by
signal: Terminated" and recorded the cell as failed, and went on to train the next cell.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from omegaconf import DictConfig

from bench.cell import config_hash
from bench.run import interrupts
from bench.run.cli import plugin_installed
from bench.run.resume import cell_state, should_run
from bench.run.train import record_failure, run
from conftest import ROOT, tiny_sst2_cell

#: A tiny-BERT fine-tuning cell with long epochs: its two DataLoader workers are alive when
#: the signal comes.
LONG_CELL = (
    "task=sst2",
    "head=linear",
    "freeze=full",
    "encoder=tiny_bert",
    "data.train_size=3000",
    "selection.size=32",
    "trainer.max_epochs=20",
    "data.max_length=32",
    "data.batch_size=16",
    "data.num_workers=2",
)


@pytest.fixture(autouse=True)
def _default_signals() -> Iterator[None]:
    """Each test starts as a plain Python process would: nothing received, SIGTERM's default,
    SIGINT's KeyboardInterrupt (an earlier test in this process may have trained a cell,
    which installs the handler; an xdist worker does not keep Python's SIGINT handler)."""
    saved = {signum: signal.getsignal(signum) for signum in interrupts.STOP_SIGNALS}
    interrupts.reset()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    interrupts.reset()
    for signum, handler in saved.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def test_sigterm_unwinds_a_process_that_would_have_died_and_is_remembered() -> None:
    interrupts.watch()
    interrupts.watch()  # idempotent: the default stays what the handler falls back to
    assert interrupts.received() is None
    interrupts.check()  # nothing received: a cell may start
    with pytest.raises(interrupts.Interrupted) as stopped:
        os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert "SIGTERM" in str(stopped.value)
    assert interrupts.received() == signal.SIGTERM
    with pytest.raises(interrupts.Interrupted):
        interrupts.check()
    interrupts.reset()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert interrupts.received() is None


def test_sigint_keeps_its_keyboard_interrupt_and_stops_only_the_cell_in_progress() -> None:
    interrupts.watch()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    assert interrupts.received() == signal.SIGINT
    err = RuntimeError("DataLoader worker (pid 1) is killed by signal: Interrupt.")
    stop = interrupts.as_interruption(err)  # the interrupted cell records no failure
    assert isinstance(stop, interrupts.Interrupted) and stop.code == 128 + signal.SIGINT
    interrupts.check()  # a cell started after Ctrl-C (a notebook, a REPL) is a new request
    assert interrupts.received() is None
    assert interrupts.as_interruption(err) is err


def test_a_handler_installed_before_is_called_not_replaced() -> None:
    seen: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        interrupts.watch()
        os.kill(os.getpid(), signal.SIGTERM)  # the earlier handler decides: no exception
        assert seen == [signal.SIGTERM] and interrupts.received() == signal.SIGTERM
    finally:
        interrupts.reset()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_stop_that_killed_the_dataloader_workers_exits_as_an_interruption() -> None:
    """The CI failure of 2026-11-27: SIGTERM's handler raised, then torch's SIGCHLD handler
    replaced the interruption with "DataLoader worker ... is killed by signal" (exit 1)."""
    script = ROOT / "tests" / "scripts" / "stop_with_dead_workers.py"
    done = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-3000:]
    assert "DataLoader worker" not in done.stderr and "not interrupted" not in done.stdout


def test_after_sigterm_only_a_dataloader_workers_death_is_tolerated() -> None:
    raises = [
        RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated."),
        RuntimeError("something else"),
        None,
    ]
    calls: list[int] = []

    def torch_like(signum: int, frame: object) -> None:
        calls.append(signum)
        err = raises[len(calls) - 1]
        if err is not None:
            raise err

    signal.signal(signal.SIGCHLD, torch_like)
    try:
        interrupts.watch()
        assert signal.getsignal(signal.SIGCHLD) is torch_like  # untouched before a stop
        with pytest.raises(interrupts.Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)
        wrapped = signal.getsignal(signal.SIGCHLD)
        assert callable(wrapped) and wrapped is not torch_like
        wrapped(signal.SIGCHLD, None)  # the worker the stop killed: no error
        with pytest.raises(RuntimeError, match="something else"):
            wrapped(signal.SIGCHLD, None)
        wrapped(signal.SIGCHLD, None)
        assert calls == [signal.SIGCHLD] * 3  # the handler before it runs every time
        interrupts.reset()
        assert signal.getsignal(signal.SIGCHLD) is torch_like
    finally:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)


def test_after_a_stop_an_error_is_an_interruption_and_no_failure_is_recorded(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    cfg = tiny_sst2_cell(compose_cfg)
    err = RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")
    assert interrupts.as_interruption(err) is err  # no signal yet: an ordinary failure
    result: dict = {}
    record_failure(cfg, tmp_path, result, err)
    assert result["status"] == "failed"

    interrupts.watch()
    with pytest.raises(interrupts.Interrupted):
        os.kill(os.getpid(), signal.SIGTERM)
    stop = interrupts.as_interruption(err)
    assert isinstance(stop, interrupts.Interrupted) and stop.signum == signal.SIGTERM
    keyboard = KeyboardInterrupt()
    assert interrupts.as_interruption(keyboard) is keyboard
    after: dict = {}
    with pytest.raises(interrupts.Interrupted) as raised:
        record_failure(cfg, tmp_path, after, err)
    assert raised.value.__cause__ is err and after == {}
    # and a cell asked for after the stop is refused before anything is written
    with pytest.raises(interrupts.Interrupted):
        run(cfg, tmp_path / "next")
    assert not (tmp_path / "next").exists()


def test_a_sweep_signalled_mid_training_leaves_its_cell_pending_and_starts_no_other(
    compose_cfg: Callable[..., DictConfig], data_dir: Path, tmp_path: Path
) -> None:
    """SIGTERM to the process group (as ``timeout`` sends it) while the first cell trains
    with two DataLoader workers: no result is written, the second cell never starts."""
    runs = tmp_path / "runs"
    overrides = (
        *LONG_CELL,
        f"data.dir={data_dir}",
        f"runs_dir={runs}",
        f"results_dir={tmp_path}/results",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "-m", "seed=1,2", *overrides],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    first = runs / "sst2" / "tiny_bert" / "linear" / "full" / "seed=1"
    deadline = time.monotonic() + 300
    while not (first / "logs" / "metrics.csv").exists():  # Lightning is in the fit loop
        assert proc.poll() is None, "the sweep ended before it was signalled"
        assert time.monotonic() < deadline, "the first cell never started training"
        time.sleep(0.2)
    time.sleep(2)  # a few steps in
    os.killpg(proc.pid, signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert not list(runs.rglob("result.json")), output[-3000:]
    assert "failed:" not in output
    assert not (runs / "sst2" / "tiny_bert" / "linear" / "full" / "seed=2").exists()
    state = cell_state(first, config_hash(compose_cfg(*overrides, "seed=1")))
    assert state.state == "pending" and should_run(state)  # the next launch trains it


def test_a_launchers_worker_left_behind_by_a_stopped_launch_trains_nothing_more(
    data_dir: Path, tmp_path: Path
) -> None:
    """gpu_pack's loky workers outlive the launch they served (loky ends an idle worker after
    minutes); told to stop with it, they leave the cells still queued to them untouched (no
    ``.hydra``, no outputs cleared) instead of starting them."""
    if not plugin_installed("hydra_plugins.hydra_joblib_launcher"):
        pytest.skip("hydra/launcher=gpu_pack needs the 'joblib' extra")
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "bench", "-m", "seed=1,2,3,4", *LONG_CELL),
            *(f"data.dir={data_dir}", f"runs_dir={runs}", f"results_dir={tmp_path}/results"),
            *("report_file=null", "hydra/launcher=gpu_pack", "runtime.cells_per_gpu=2"),
            "runtime.gpu_memory_gb=80",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    cells = runs / "sst2" / "tiny_bert" / "linear" / "full"
    try:
        deadline = time.monotonic() + 300
        while not (cells / "seed=1" / "logs" / "metrics.csv").exists():
            assert proc.poll() is None, "the sweep ended before it was signalled"
            assert time.monotonic() < deadline, "the first cell never started training"
            time.sleep(0.2)
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
        time.sleep(10)  # the workers, if they take the jobs queued to them, take them now
        assert not list(runs.rglob("result.json"))
        started = sorted(p.parent.parent.name for p in runs.rglob(".hydra/config.yaml"))
        assert started == ["seed=1", "seed=2"], "a cell queued to a worker was started"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the worker, which nobody else ends here
