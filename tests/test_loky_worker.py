"""A loky worker that grows is not replaced under the allowance :func:`allow_growth` sets.

Real loky workers (joblib's ``Parallel(backend="loky")``): each task sleeps past loky's
one-second check interval, and two of them keep 350 MB, more than loky's 300 MB allowance.
Without :func:`allow_growth` loky replaces the grown workers (new pids; this is the control
that shows the test can fail); with it, the same workers run every task.
"""

from __future__ import annotations

import os
import time

import pytest
from joblib import Parallel, delayed
from joblib.externals.loky import get_reusable_executor

from bench.run import loky_worker

_KEPT: list[bytearray] = []  # what a task keeps, in the worker process that ran it


def _task(keep_mb: int, allow: bool) -> tuple[int, dict | None]:
    record = loky_worker.allow_growth(2) if allow else None
    time.sleep(1.2)  # loky checks a worker's memory at most once a second
    if keep_mb:
        block = bytearray(keep_mb << 20)
        block[:: 1 << 12] = b"\1" * len(block[:: 1 << 12])  # touch every page: resident
        _KEPT.append(block)
    return os.getpid(), record


def _pids(allow: bool) -> tuple[list[int], list[dict | None]]:
    try:
        out = Parallel(n_jobs=2, backend="loky", pre_dispatch="n_jobs")(
            delayed(_task)(mb, allow) for mb in (0, 0, 350, 350, 0, 0, 0, 0)
        )
    finally:
        get_reusable_executor().shutdown(wait=True)  # the kept memory goes with the workers
    return [pid for pid, _ in out], [record for _, record in out]


def test_allowance_is_a_share_of_the_machine_never_below_lokys() -> None:
    gib = 1 << 30
    assert loky_worker.growth_allowance(4, 128 * gib, int(3e8)) == 16 * gib
    assert loky_worker.growth_allowance(0, 8 * gib, int(3e8)) == 4 * gib  # at least 1 worker
    assert loky_worker.growth_allowance(64, 1 * gib, int(3e8)) == int(3e8)
    assert loky_worker.allow_growth(2) is None  # not a loky worker: nothing changes
    assert loky_worker.record() is None


@pytest.mark.skipif(
    (loky_worker.host_memory_bytes() or 0) < 4 << 30, reason="needs 4 GiB of memory"
)
def test_a_grown_worker_is_replaced_by_loky_unless_allowed() -> None:
    pids, _ = _pids(allow=False)
    assert len(set(pids)) > 2, f"loky kept its grown workers: {pids}"  # the control
    pids, records = _pids(allow=True)
    assert len(set(pids)) == 2, f"loky replaced a worker under the allowance: {pids}"
    host = loky_worker.host_memory_bytes()
    assert host is not None
    expected = loky_worker.growth_allowance(2, host, int(3e8)) >> 20
    assert all(r == {"restart_after_mb": expected, "loky_default_mb": 286} for r in records)
