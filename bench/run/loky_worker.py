"""A launcher's loky worker trains many cells: loky must not restart it for growing 300 MB.

Under ``hydra/launcher=gpu_pack`` (and ``joblib``) each cell runs in a loky worker process
that trains one cell after another, and compiles the encoder once for all of them
(``trainer.compile``). loky measures a worker's resident memory after its first job and,
after each later one, shuts down a worker that grew by more than 300 MB since
(``_MAX_MEMORY_LEAK_SIZE``, a guard against leaking tasks) and starts a fresh process in its
place. A training process grows by more than that over its first cells: on the H100, gpu_pack
workers grew from about 2.4 to 4.0 GB over their first six or seven trainings of RTE
(``peak_memory.process_rss_mb`` in their results). loky then replaced all four, with its
warning "A worker stopped while some jobs were given to the executor. This can be caused by a
too short worker timeout or by a memory leak.", and each new process compiled the encoder
again: those cells took about 44 s instead of 9 (results/device_logs/2026-11-27-h100/).
Under ``trainer.compile=reduce-overhead`` every cell records its CUDA graphs anew (its
parameters live at new addresses) and torch keeps the earlier cells' recordings until the
compiled code itself is reset (docs/gpu.md, "Why a compiled worker grows").

:func:`allow_growth` gives a loky worker an allowance that fits a training process instead: its
share of the machine's memory (:data:`HOST_SHARE` of it, divided among the launcher's workers),
never less than loky's own. A worker that grows past that is still replaced, which is what
loky's guard is for. loky offers no setting for this; the allowance is its module's constant,
which its worker loop reads after every job. Outside a loky worker nothing changes.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any

#: The module whose worker loop applies the allowance (joblib's copy of loky).
LOKY_EXECUTOR = "joblib.externals.loky.process_executor"
#: The part of the machine's memory the launcher's workers may grow into, together.
HOST_SHARE = 0.5

_record: dict[str, Any] | None = None


def in_loky_worker() -> bool:
    """Whether this process is a loky worker (``multiprocessing``'s ``LokyProcess``)."""
    return type(multiprocessing.current_process()).__name__ == "LokyProcess"


def host_memory_bytes() -> int | None:
    """The machine's physical memory, or None where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def growth_allowance(workers: int, host_bytes: int, loky_default: int) -> int:
    """How much a worker may grow after its first job before loky replaces it.

    Args:
        workers: The launcher's worker processes (``n_jobs``); at least 1 is assumed.
        host_bytes: The machine's physical memory.
        loky_default: loky's own allowance (kept when it is the larger).

    Returns:
        ``HOST_SHARE`` of ``host_bytes`` divided among ``workers``, at least ``loky_default``.
    """
    return max(loky_default, int(host_bytes * HOST_SHARE) // max(1, workers))


def allow_growth(workers: int) -> dict[str, Any] | None:
    """In a loky worker, let it grow by its share of the machine's memory before a restart.

    Args:
        workers: The launcher's worker processes (``n_jobs``).

    Returns:
        None outside a loky worker; else a record for ``result.json``: ``restart_after_mb``
        (the allowance now in force) and ``loky_default_mb``, or ``reason`` when it could not
        be set.
    """
    global _record
    if not in_loky_worker():
        return None
    _record = _set_allowance(workers)
    return _record


def record() -> dict[str, Any] | None:
    """What :func:`allow_growth` last did in this process (None: not a loky worker)."""
    return _record


def _set_allowance(workers: int) -> dict[str, Any]:
    executor = sys.modules.get(LOKY_EXECUTOR)
    default = getattr(executor, "_MAX_MEMORY_LEAK_SIZE", None)
    if executor is None or not isinstance(default, int):
        return {"reason": f"{LOKY_EXECUTOR}._MAX_MEMORY_LEAK_SIZE not found"}
    loky_default = int(getattr(executor, "_headbench_loky_default", default))
    host = host_memory_bytes()
    if host is None:
        return {"reason": "the machine's memory is unknown", "loky_default_mb": loky_default >> 20}
    allowance = growth_allowance(workers, host, loky_default)
    executor._headbench_loky_default = loky_default  # type: ignore[attr-defined]
    executor._MAX_MEMORY_LEAK_SIZE = allowance  # type: ignore[attr-defined]
    return {"restart_after_mb": allowance >> 20, "loky_default_mb": loky_default >> 20}
