"""Resume: decide from a cell's stored result whether to train it again.

A cell's run directory is derived from the cell, so re-running a sweep finds every
earlier result in place. A cell is skipped when its ``result.json`` says ``ok`` for the
same configuration (same :func:`bench.cell.config_hash`); failed and diverged cells are
re-run only when asked (``+rerun_failed=true``), except failures whose cause was the
machine rather than the cell (a full disk, memory: ``retryable`` in the result), which are
retried unless ``+rerun_environmental=false``; everything else (no result, a result
that cannot be read, an ``ok`` result whose predictions are gone, so that collect cannot
re-score it, a result for a different configuration) is trained again.

Before a cell is trained again its earlier outputs are cleared, with one exception: the
finished result of a *different* configuration (``stale``), or one this version cannot
read (``corrupt``), is never deleted: its outputs move to
``<run_dir>/superseded/<config_hash[:12]>/`` (:func:`supersede`), where collect does not
look. ``+force=true`` is the explicit overwrite of a cell's own result.

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
from typing import Any

from filelock import FileLock, Timeout

from bench.cell import RESULT_FILE, SUPERSEDED_DIR
from bench.results.predictions import PREDICTIONS_SCHEMA, missing_predictions

#: Status of a cell as seen from its run directory.
STATES = ("done", "failed", "diverged", "stale", "corrupt", "pending", "running")
RUNNING_LOCK = ".running.lock"
#: The state of a cell another process is training now: never started twice, not even by force.
RUNNING = "running"
#: States whose result file is kept (moved to ``superseded/``) before the cell trains again:
#: a finished result (``done`` re-trained with ``+force=true``, or ``stale``) and one that
#: cannot be read (``corrupt``) are never deleted.
KEPT_STATES = frozenset({"done", "stale", "corrupt"})
FAILED_STATES = frozenset({"failed", "diverged"})
# What a run leaves in its directory: its config (`.hydra/`, written when the cell starts
# training, bench/run/cli.py), Hydra's job log, the loggers' folders, predictions, the result.
_RUN_OUTPUTS = (".hydra", "*.log", "logs", "tb", "predictions_*", RESULT_FILE)
_TEMP_FILES = ".*.tmp"


@dataclass(frozen=True)
class CellState:
    """What a run directory holds.

    Attributes:
        state: One of :data:`STATES`: ``done`` (``ok`` for this config), ``failed``,
            ``diverged``, ``stale`` (a result for another config), ``corrupt``
            (unreadable result file, or an ``ok`` one whose predictions are gone),
            ``pending`` (no result) or ``running`` (another process is training it: see
            :func:`cell_lock`).
        reason: The stored failure reason, or why the file is stale or corrupt.
        retryable: For ``failed``: the cause was the machine (disk, memory), not the cell.
    """

    state: str
    reason: str | None = None
    retryable: bool = False


@dataclass(frozen=True)
class ResumePolicy:
    """Which stored results a launch trains again (the ``+`` keys of the command line).

    Attributes:
        rerun_failed: ``+rerun_failed=true``: re-run ``failed`` and ``diverged`` cells.
        force: ``+force=true``: re-run every cell, overwriting its own ``ok`` result.
        rerun_environmental: ``+rerun_environmental=false`` turns off the default retry of
            cells that failed for a reason of the machine (full disk, out of memory).
    """

    rerun_failed: bool = False
    force: bool = False
    rerun_environmental: bool = True

    @classmethod
    def of(cls, cfg: Any) -> ResumePolicy:
        """The policy a composed config asks for (missing keys keep the defaults)."""
        return cls(
            rerun_failed=bool(cfg.get("rerun_failed", False)),
            force=bool(cfg.get("force", False)),
            rerun_environmental=bool(cfg.get("rerun_environmental", True)),
        )


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
        result = json.loads(path.read_text(encoding="utf-8-sig"))  # as collect reads it
        status = result["status"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return CellState("corrupt", f"{type(err).__name__}: {err}")
    stored_hash = result.get("config_hash")
    if stored_hash != config_hash:
        return CellState("stale", f"stored config {str(stored_hash)[:12]} != {config_hash[:12]}")
    if status == "ok":
        return _without_predictions(Path(run_dir), result) or CellState("done")
    if status in FAILED_STATES:
        return CellState(status, result.get("reason"), bool(result.get("retryable", False)))
    return CellState("corrupt", f"unexpected status {status!r}")


def _without_predictions(run_dir: Path, result: dict[str, Any]) -> CellState | None:
    """``corrupt`` for an ``ok`` result whose scored splits' predictions are gone, else None.

    From :data:`~bench.results.predictions.PREDICTIONS_SCHEMA` on a result always has them:
    without them collect cannot re-score it and refuses it, so the cell is trained again.
    """
    try:
        if int(result.get("schema", 1)) < PREDICTIONS_SCHEMA:
            return None
        gone = missing_predictions(result, run_dir)
    except (AttributeError, KeyError, TypeError, ValueError) as err:  # a hand-edited result
        return CellState("corrupt", f"{type(err).__name__}: {err}")
    if not gone:
        return None
    return CellState("corrupt", f"{', '.join(gone.values())} missing: it cannot be re-scored")


def should_run(state: CellState, policy: ResumePolicy | None = None) -> bool:
    """Whether a cell in ``state`` is trained (again).

    Args:
        state: From :func:`cell_state`.
        policy: What the command line asks for (default: a plain re-run).

    Returns:
        True when the cell must be trained.
    """
    policy = policy or ResumePolicy()
    if state.state == RUNNING:
        return False
    if policy.force:
        return True
    if state.state == "done":
        return False
    if state.state in FAILED_STATES:
        return policy.rerun_failed or (state.retryable and policy.rerun_environmental)
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


def _outputs(run_dir: Path) -> list[Path]:
    return [path for pattern in _RUN_OUTPUTS for path in sorted(run_dir.glob(pattern))]


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def clear_run_outputs(run_dir: str | Path) -> list[Path]:
    """Remove what an earlier attempt left in ``run_dir``; ``superseded/`` is kept.

    That is its config, result, predictions, logs and temp files.

    Args:
        run_dir: The cell's run directory.

    Returns:
        The removed paths.
    """
    run_dir = Path(run_dir)
    removed = _outputs(run_dir) + sorted(run_dir.glob(_TEMP_FILES))
    _remove(removed)
    return removed


def supersede(run_dir: str | Path) -> Path | None:
    """Keep the outputs of an earlier configuration: move them to ``superseded/``.

    For a ``done`` cell re-trained by force, a ``stale`` one (a finished result of another
    configuration) and a ``corrupt`` one
    (a result file this version cannot read: hand-edited, or from a newer headbench): such a
    file is never deleted. The target is ``<run_dir>/superseded/<stored config_hash[:12]>/``
    (``unreadable`` when the file cannot be read; ``-2``, ``-3`` ... when that name is
    taken). Temp files of an interrupted write are removed.

    Args:
        run_dir: The cell's run directory.

    Returns:
        The folder the outputs moved to, or None when there was no result file to keep.
    """
    run_dir = Path(run_dir)
    path = run_dir / RESULT_FILE
    if not path.exists():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8-sig"))
        name = str(stored["config_hash"])[:12]
    except (OSError, ValueError, KeyError, TypeError):
        name = "unreadable"
    target = run_dir / SUPERSEDED_DIR / name
    number = 1
    while target.exists():
        number += 1
        target = run_dir / SUPERSEDED_DIR / f"{name}-{number}"
    target.mkdir(parents=True)
    for output in _outputs(run_dir):
        output.rename(target / output.name)
    _remove(sorted(run_dir.glob(_TEMP_FILES)))
    return target
