"""Store a results tree's prediction files gzip-compressed, for committing.

``python -m bench.results.compress results/fair_heads/runs`` turns every cell's
``predictions_<split>.csv`` and ``predictions_<split>.txt`` under the given directories into
``<name>.gz``. Prediction files are most of a committed experiment's bytes (a CoNLL cell's
two files are 1 MB of ``word gold pred`` lines) and compress about tenfold; the readers
(:func:`bench.results.predictions.stored_file`, :func:`bench.data.text_lines.read_text`)
take either form, so collect, re-scoring and the self-check read them unchanged.

Each file is compressed at level 9 with no name or time in the gzip header, so the same
text always gives the same bytes (a re-run of the snapshot changes nothing in git). The
compressed file is written beside the plain one under a temporary name, checked to
decompress to the same bytes, renamed into place, and only then is the plain file removed:
an interrupted run leaves either form whole, never neither. A plain file beside an
existing ``.gz`` is the newer copy (a later snapshot of the same run directory) and
replaces it.

Run directories of experiments still running keep plain files: a cell writes plain text,
and the code of an older commit (a reference experiment re-launched at its own commit)
reads only plain files.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from collections.abc import Iterable
from pathlib import Path

from bench.atomic import atomic_write
from bench.data.text_lines import GZIP_SUFFIX

#: The files compressed: every cell's prediction files (GLUE ``.csv``, CoNLL ``.txt``).
PATTERNS = ("predictions_*.csv", "predictions_*.txt")


def compress_file(path: Path) -> Path:
    """Replace ``path`` by ``path.gz`` (deterministic gzip, level 9), atomically.

    Args:
        path: A plain prediction file.

    Returns:
        The compressed file.

    Raises:
        OSError: If the compressed copy does not read back as the original bytes (the
            plain file is then left in place).
    """
    data = path.read_bytes()
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    if gzip.decompress(packed) != data:  # pragma: no cover - zlib round trip
        raise OSError(f"{path}: the compressed copy does not decompress to the same bytes")
    target = path.with_name(path.name + GZIP_SUFFIX)
    atomic_write(target, lambda handle: handle.write(packed), binary=True)
    path.unlink()
    return target


def plain_files(roots: Iterable[Path]) -> list[Path]:
    """Every plain prediction file under ``roots``, sorted.

    Args:
        roots: Directories to search (recursively).

    Raises:
        FileNotFoundError: If a root is not a directory (names it).
    """
    found: set[Path] = set()
    for root in roots:
        if not root.is_dir():
            raise FileNotFoundError(
                f"{root}: not a directory (give a results tree, e.g. results/fair_heads/runs)"
            )
        for pattern in PATTERNS:
            found.update(p for p in root.rglob(pattern) if p.is_file())
    return sorted(found)


def compress_tree(roots: Iterable[Path]) -> tuple[int, int, int]:
    """Compress every plain prediction file under ``roots``.

    Args:
        roots: Directories to search (recursively).

    Returns:
        ``(files, bytes before, bytes after)``.
    """
    files = before = after = 0
    for path in plain_files(roots):
        before += path.stat().st_size
        after += compress_file(path).stat().st_size
        files += 1
    return files, before, after


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m bench.results.compress DIR [DIR ...]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.results.compress",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("roots", nargs="+", type=Path, help="results trees, e.g. results/X/runs")
    args = parser.parse_args(argv)
    try:
        files, before, after = compress_tree(args.roots)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    ratio = f" ({before / after:.1f}x smaller)" if after else ""
    print(f"compressed {files} prediction files: {before:,} -> {after:,} bytes{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
