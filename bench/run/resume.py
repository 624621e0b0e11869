"""Resume: decide from a cell's stored result whether to train it again.

A cell's run directory is derived from the cell, so re-running a sweep finds every
earlier result in place. A cell is skipped when its ``result.json`` says ``ok`` for the
same configuration (same :func:`bench.cell.config_hash`); failed and diverged cells are
re-run only when asked (``+rerun_failed=true``); everything else (no result, a result
that cannot be read, a result for a different configuration) is trained again, after the
previous attempt's leftovers are removed so that nothing half-written survives.

A cell being trained holds ``<run_dir>/.running.lock`` (an OS file lock, released when its
process exits, even when killed), so two launches over overlapping cells never train the
same cell at once: the second skips it as ``running``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from bench.cell import RESULT_FILE

#: Status of a cell as seen from its run directory.
STATES = ("done", "failed", "diverged", "stale", "corrupt", "pending", "running")
RUNNING_LOCK = ".running.lock"
#: The state of a cell another process is training now: never started twice, not even by force.
RUNNING = "running"
FAILED_STATES = frozenset({"failed", "diverged"})
# What a run leaves in its directory (Hydra's own `.hydra/` is rewritten by every launch).
_RUN_OUTPUTS = ("logs", "tb", "predictions_*", ".*.tmp", RESULT_FILE)


@dataclass(frozen=True)
class CellState:
    """What a run directory holds.

    Attributes:
        state: One of :data:`STATES`: ``done`` (``ok`` for this config), ``failed``,
            ``diverged``, ``stale`` (a result for another config), ``corrupt``
            (unreadable result file), ``pending`` (no result) or ``running`` (another
            process is training it: see :func:`cell_lock`).
        reason: The stored failure reason, or why the file is stale or corrupt.
    """

    state: str
    reason: str | None = None


def cell_state(run_dir: str | Path, config_hash: str) -> CellState:
    """Read ``<run_dir>/result.json`` and classify it against the wanted config.

    Args:
        run_dir: The cell's run directory.
        config_hash: Hash of the config that would run now.

    Returns:
        The cell's state.
    """
    path = Path(run_dir) / RESULT_FILE
    if not path.exists():
        return CellState("pending")
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        status = result["status"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return CellState("corrupt", f"{type(err).__name__}: {err}")
    stored_hash = result.get("config_hash")
    if stored_hash != config_hash:
        return CellState("stale", f"stored config {str(stored_hash)[:12]} != {config_hash[:12]}")
    if status == "ok":
        return CellState("done")
    if status in FAILED_STATES:
        return CellState(status, result.get("reason"))
    return CellState("corrupt", f"unexpected status {status!r}")


def should_run(state: CellState, rerun_failed: bool = False, force: bool = False) -> bool:
    """Whether a cell in ``state`` is trained (again).

    Args:
        state: From :func:`cell_state`.
        rerun_failed: Re-run ``failed`` and ``diverged`` cells.
        force: Re-run every cell, including ``done`` ones.

    Returns:
        True when the cell must be trained.
    """
    if state.state == RUNNING:
        return False
    if force:
        return True
    if state.state == "done":
        return False
    if state.state in FAILED_STATES:
        return rerun_failed
    return True


@contextmanager
def cell_lock(run_dir: str | Path) -> Iterator[bool]:
    """Hold the cell's running lock while this process trains it.

    Args:
        run_dir: The cell's run directory (created if missing).

    Yields:
        True when this process now holds the lock (released on exit from the block);
        False when another process holds it, i.e. is training the cell.
    """
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(Path(run_dir) / RUNNING_LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def running_elsewhere(run_dir: str | Path) -> CellState | None:
    """The ``running`` state if another process is training the cell now, else None."""
    if not (Path(run_dir) / RUNNING_LOCK).exists():
        return None
    with cell_lock(run_dir) as mine:
        return None if mine else CellState(RUNNING, "another process is training it")


def clear_run_outputs(run_dir: str | Path) -> list[Path]:
    """Remove what an earlier attempt left in ``run_dir`` (result, predictions, logs, temp files).

    Hydra's ``.hydra/`` folder is kept: the launcher has just rewritten it for this run.

    Args:
        run_dir: The cell's run directory.

    Returns:
        The removed paths.
    """
    removed = []
    for pattern in _RUN_OUTPUTS:
        for path in Path(run_dir).glob(pattern):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed
