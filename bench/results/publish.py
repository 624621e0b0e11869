"""Publish several files of one directory together: all of them, or none."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from bench.atomic import FILE_MODE
from bench.errors import CollectError


def publish(out_dir: str | Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write ``files`` (name → bytes) into ``out_dir``: every fsynced copy before any rename.

    Raises:
        CollectError: If a name is taken by a directory (before anything is written).
        OSError: If a temporary copy cannot be written; no file has changed then.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = [out_dir / name for name in files]
    if taken := [str(path) for path in targets if path.is_dir()]:
        raise CollectError(
            f"{', '.join(taken)} is a directory, not a file; nothing written to {out_dir}"
        )
    temps: list[str] = []
    try:
        for path, content in zip(targets, files.values(), strict=True):
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=out_dir)
            temps.append(tmp)
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600; give the usual file mode
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
        for path, tmp in zip(targets, temps, strict=True):
            os.replace(tmp, path)
    finally:
        for tmp in temps:
            Path(tmp).unlink(missing_ok=True)
    return targets
