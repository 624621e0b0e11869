r"""Read a data file's lines as UTF-8 text: the one line reader of every data file format.

A byte-order mark at the start of a file (Windows editors write one) is dropped, so it is
never glued to the first token or header; line ends are ``\n`` or ``\r\n``; a byte that
is not UTF-8 is a :class:`~bench.errors.DataError` naming the file and line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from bench.errors import DataError

BOM = "\ufeff"


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` of a UTF-8 file, without line ends or a leading BOM.

    Args:
        path: The file.

    Yields:
        The 1-based line number and the line's text.

    Raises:
        DataError: If a line is not valid UTF-8 (names the file, line and byte).
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
                text = text.removeprefix(BOM)
            yield number, text.removesuffix("\n").removesuffix("\r")
