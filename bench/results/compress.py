"""Store a results tree's prediction files gzip-compressed, for committing.

``python -m bench.results.compress results/fair_heads/runs`` replaces every cell's
``predictions_<split>.csv``/``.txt`` by ``<name>.gz``, about tenfold smaller (the readers take
either form). The same text always gives the same bytes; the ``.gz`` is checked before the
plain file goes, so either form stays whole; a plain file beside a ``.gz`` is the newer copy.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from collections.abc import Iterable
from pathlib import Path

from bench.atomic import atomic_write
from bench.data.text_lines import GZIP_SUFFIX


def compress_file(path: Path) -> Path:
    """Replace ``path`` by ``path.gz`` (deterministic gzip, level 9), atomically; the new path."""
    data = path.read_bytes()
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    if gzip.decompress(packed) != data:  # pragma: no cover - zlib round trip
        raise OSError(f"{path}: the compressed copy does not decompress to the same bytes")
    target = path.with_name(path.name + GZIP_SUFFIX)
    atomic_write(target, lambda handle: handle.write(packed), binary=True)
    path.unlink()
    return target


def plain_files(roots: Iterable[Path]) -> list[Path]:
    """Every plain prediction file (GLUE ``.csv``, CoNLL ``.txt``) under ``roots``, sorted.

    Raises:
        FileNotFoundError: If a root is not a directory (names it).
    """
    roots = list(roots)
    if missing := [root for root in roots if not root.is_dir()]:
        hint = "give a results tree, e.g. results/fair_heads/runs"
        raise FileNotFoundError(f"{missing[0]}: not a directory ({hint})")
    found = {
        p for root in roots for p in root.rglob("predictions_*") if p.suffix in (".csv", ".txt")
    }
    return sorted(p for p in found if p.is_file())


def compress_tree(roots: Iterable[Path]) -> tuple[int, int, int]:
    """Compress every plain prediction file under ``roots``: ``(files, bytes before, after)``."""
    files = plain_files(roots)
    before = sum(path.stat().st_size for path in files)
    return len(files), before, sum(compress_file(path).stat().st_size for path in files)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m bench.results.compress DIR [DIR ...]``."""
    summary = (__doc__ or "").split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.results.compress", description=summary)
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
