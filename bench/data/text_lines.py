r"""Read text files as UTF-8: the one place every headbench text reader decodes a file.

A byte-order mark at the start of a file (Windows editors write one) is dropped, so it is
never glued to the first token, header or JSON value. :func:`read_lines` serves the data
files (GLUE TSV, CoNLL): line ends are ``\n`` or ``\r\n``; a byte that is not UTF-8, or a
carriage return inside a line (CR-only line ends), is a :class:`~bench.errors.DataError`
naming the file and line (:func:`excerpt` quotes a line's start in such messages).
:func:`read_text` serves the records beside the results (``cells.json``, ``launches.jsonl``)
and the prediction files, decompressing a file named ``*.gz``. CSV tables are read by
pandas, whose parser drops a leading BOM itself. Torch-free: ``results`` imports it.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

from bench.errors import DataError

BOM = "\ufeff"
#: A file named ``*.gz`` is gzip-compressed UTF-8 text (committed prediction files are).
GZIP_SUFFIX = ".gz"
#: How much of a file's text a message quotes.
QUOTED = 80


def drop_bom(text: str) -> str:
    """``text`` without a leading byte-order mark (U+FEFF)."""
    return text.removeprefix(BOM)


def excerpt(value: object, limit: int = QUOTED) -> str:
    """``repr(value)`` for a message, its first ``limit`` characters and ``…`` if it goes on."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit] + "…"


def read_text(path: Path, errors: str = "strict") -> str:
    """The whole of a UTF-8 text file, without a leading byte-order mark.

    Args:
        path: The file; one named ``*.gz`` is decompressed first.
        errors: How to treat a byte that is not UTF-8: ``"strict"`` raises, ``"replace"``
            puts U+FFFD in its place (for logs whose damaged lines are skipped anyway).

    Returns:
        The file's text.

    Raises:
        DataError: With ``errors="strict"``, if the file is not valid UTF-8 (names the file
            and byte); for a ``*.gz`` file that is not gzip (names the file).
    """
    data = path.read_bytes()
    if path.suffix == GZIP_SUFFIX:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise DataError(f"{path}: not a readable gzip file ({err})") from None
    try:
        return drop_bom(data.decode("utf-8", errors=errors))
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not valid UTF-8 ({err.reason} at byte {err.start})") from None


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` of a UTF-8 file, without line ends or a leading BOM.

    Args:
        path: The file.

    Yields:
        The 1-based line number and the line's text.

    Raises:
        DataError: If a line is not valid UTF-8 (names the file, line and byte), or holds a
            carriage return inside it: line ends of old Macs (CR only) make a file one line.
    """
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}:{number}: not valid UTF-8 ({err.reason} at byte {err.start})"
                ) from None
            if number == 1:
                text = drop_bom(text)
            text = text.removesuffix("\n").removesuffix("\r")
            if "\r" in text:
                raise DataError(
                    f"{path}:{number}: a carriage return inside the line: the file has CR-only "
                    "(old Mac) line ends; save it with \\n or \\r\\n line ends"
                )
            yield number, text
