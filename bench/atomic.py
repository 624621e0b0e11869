"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_read_umask()  # read once, at import: os.umask is process-wide


def atomic_write(
    path: str | Path, write: Callable[[IO[Any]], object], binary: bool = False
) -> Path:
    """Write a file atomically: write a temp file beside it, fsync, then rename.

    Args:
        path: Destination file.
        write: Called with the open temporary file; writes the content.
        binary: Open the temporary file in binary mode (default: UTF-8 text).

    Returns:
        The destination path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600; give the usual file mode
        handle: IO[Any] = (
            os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")
        )
        with handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename is not None or err.errno is None:
            raise
        # A failed write or fsync names no file (ENOSPC, EDQUOT): name the destination.
        raise OSError(err.errno, err.strerror, str(path)) from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, atomically.

    Args:
        path: Destination file.
        obj: A JSON-serialisable object.

    Returns:
        The destination path.
    """
    text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=True, default=str) + "\n"
    return atomic_write(path, lambda handle: handle.write(text))


def append_json_line(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON record as a line, in a single ``O_APPEND`` write.

    Concurrent writers (the cells of a sweep, launcher jobs on several nodes) never
    interleave their records on a local or POSIX shared filesystem.

    Args:
        path: The ``.jsonl`` file (created with its directory if missing).
        record: A JSON-serialisable dict.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def unwritable_reason(path: str | Path) -> str | None:
    """Why files could not be written at ``path`` (a directory, made when missing), or None.

    Nothing is created: the nearest existing ancestor must be a writable directory (so
    ``--dry-run`` can ask too). Read-only file systems count as unwritable, for root too.

    Args:
        path: A directory that will be written (it may not exist yet).

    Returns:
        A short reason naming the path that is in the way, or None when it is writable.
    """
    probe = Path(path).absolute()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None
