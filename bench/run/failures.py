"""Why a cell failed: its own fault, or the machine's (retried by the next launch).

A cell that fails because the disk is full, a quota is exceeded, memory ran out or its
input data could not be found (:class:`~bench.errors.MissingDataError`: a missing data
directory or task file, the Hub off or unreachable; ``data.dir`` is not hashed, so fixing
it changes no cell) says nothing about the cell: its result records ``retryable: true``
and a re-run of the sweep trains it again (:mod:`bench.run.resume`, unless
``+rerun_environmental=false``). A disk error names the path being written; when the
library that failed did not say (PyTorch's writers, a logger), the reason names the
directories the cell writes and their free space.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch

from bench.errors import MissingDataError

#: ``errno`` values of the machine, not the cell: full disk, quota, memory, I/O, stale NFS.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
ENVIRONMENTAL_ERRNOS = DISK_ERRNOS | {errno.ENOMEM, errno.EIO, errno.ESTALE}
# The same causes as libraries word them when they wrap the OSError in their own exception.
_DISK_TEXT = ("No space left on device", "Disk quota exceeded", "file write failed")
_MEMORY_TEXT = ("out of memory", "Cannot allocate memory")


def _chain(err: BaseException) -> Iterator[BaseException]:
    """The exception and its causes (``raise ... from``, or raised while handling)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_disk_error(err: BaseException) -> bool:
    """Whether ``err`` (or its cause) is a full disk or an exceeded quota."""
    return any(
        (isinstance(e, OSError) and e.errno in DISK_ERRNOS) or any(t in str(e) for t in _DISK_TEXT)
        for e in _chain(err)
    )


def is_environmental(err: BaseException) -> bool:
    """Whether ``err`` says more about the machine than the cell (disk, memory, I/O, data).

    Missing input data counts only as :class:`~bench.errors.MissingDataError`, which the
    data location code raises naming ``data.dir``: a cell's own ``FileNotFoundError`` is not
    retried.
    """
    for e in _chain(err):
        if isinstance(e, (MemoryError, torch.OutOfMemoryError, MissingDataError)):
            return True
        if isinstance(e, OSError) and e.errno in ENVIRONMENTAL_ERRNOS:
            return True
        if any(t in str(e) for t in _DISK_TEXT + _MEMORY_TEXT):
            return True
    return False


def _free(path: Path) -> str:
    probe = path.absolute()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return "free space unknown"
    return f"{free / 2**20:,.0f} MiB free"


def failure_reason(err: BaseException, writes: Mapping[str, Path | None]) -> str:
    """The reason a failed cell records: the exception, and for a disk error the path.

    Args:
        err: What the cell raised.
        writes: The directories the cell writes, by name (``run_dir``, ``cache``), named
            with their free space when a disk error does not carry its own path.

    Returns:
        ``"<ExceptionType>: <message>"``, plus ``" (while writing under ...)"`` for a disk
        error without a file name.
    """
    reason = f"{type(err).__name__}: {err}"
    if not is_disk_error(err):
        return reason
    named = [e.filename for e in _chain(err) if isinstance(e, OSError) and e.filename]
    if named:
        return reason if str(named[0]) in reason else f"{reason} (writing {named[0]})"
    places = "; ".join(
        f"{name} {path} ({_free(path)})" for name, path in writes.items() if path is not None
    )
    return f"{reason} (while writing under {places})"
