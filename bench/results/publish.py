"""Publish several files of one directory together: all of them, or none.

:func:`bench.atomic.atomic_write` makes one file appear whole or not at all. A results
directory is several files that belong together (the table, its history, its provenance),
so :func:`publish` first writes every file's temporary copy (same folder, same
``.<name>.<random>.tmp`` naming, fsynced) and renames them only when all were written. A
failure before the renames (disk full, a name taken by a folder) changes no file; the
renames themselves are quick and happen one after the other.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from bench.atomic import FILE_MODE
from bench.errors import CollectError


def publish(out_dir: str | Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write ``files`` into ``out_dir``, each atomically, and all only when all could be written.

    Args:
        out_dir: The directory (created if missing).
        files: File name → content, in the order they are renamed into place.

    Returns:
        The published paths.

    Raises:
        CollectError: If a name is taken by a directory (before anything is written).
        OSError: If a temporary copy cannot be written; no file has changed then.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = [out_dir / name for name in files]
    taken = [str(path) for path in targets if path.is_dir()]
    if taken:
        raise CollectError(
            f"{', '.join(taken)} is a directory, not a file; nothing written to {out_dir}"
        )
    temps: dict[Path, str] = {}
    try:
        for path, content in zip(targets, files.values(), strict=True):
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=out_dir)
            temps[path] = tmp
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600; give the usual file mode
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
        for path, tmp in temps.items():
            os.replace(tmp, path)
    finally:
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)
    return targets
