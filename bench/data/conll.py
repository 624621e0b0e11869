"""Strict reader for CoNLL-2003 files: 4 space-separated columns, IOB2 tags.

Every line is checked: a data line has exactly four columns (token, POS, chunk, NER
tag), the tag is a known IOB2 tag and an ``I-X`` only continues a ``B-X`` or ``I-X``
(an IOB1 file, such as the original ``eng.train``, fails on its first such line).
``-DOCSTART-`` lines are skipped; blank lines end a sentence. Any violation raises
:class:`~bench.errors.DataError` naming the file and the line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.data.tasks import TokenTaskSpec
from bench.data.text_lines import excerpt, read_lines
from bench.errors import DataError, MissingDataError

N_COLUMNS = 4  # token, POS tag, chunk tag, NER tag
DOCSTART = "-DOCSTART-"


def conll_file(data_dir: str | Path, spec: TokenTaskSpec, filename: str) -> Path:
    """Path of one split file in the local layout, checked to exist.

    Args:
        data_dir: Root data directory (holding ``conll2003/``).
        spec: The task.
        filename: File name such as ``train.txt``.

    Returns:
        The path ``<data_dir>/<spec.local_dir>/<filename>``.

    Raises:
        MissingDataError: If the directory or the file does not exist (an environmental
            failure: the next launch retries the cell once the path is fixed).
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise MissingDataError(f"data directory {root} (data.dir / HEADBENCH_DATA) does not exist")
    path = root / spec.local_dir / filename
    if not path.is_file():
        raise MissingDataError(
            f"{path} not found: task {spec.name!r} expects "
            f"<data.dir>/{spec.local_dir}/{{train,dev,test}}.txt (4 columns, IOB2)"
        )
    return path


def iob2_error(previous: str, tag: str) -> str | None:
    """Why ``tag`` may not follow ``previous`` in IOB2, or None if it may.

    Args:
        previous: The previous tag in the sentence (``O`` at the start).
        tag: The current tag.

    Returns:
        A short explanation, or None for a valid transition.
    """
    if not tag.startswith("I-"):
        return None
    if previous[2:] == tag[2:] and previous[:2] in ("B-", "I-"):
        return None
    where = "at the start of a sentence" if previous == "O" else f"after {previous!r}"
    return f"tag {tag!r} {where} is not IOB2 (an entity starts with B-; IOB1 file?)"


def is_valid_iob2(tags: Sequence[str]) -> bool:
    """True if every ``I-X`` in the sentence continues a ``B-X`` or ``I-X``."""
    previous = "O"
    for tag in tags:
        if iob2_error(previous, tag) is not None:
            return False
        previous = tag
    return True


def read_conll(path: str | Path, spec: TokenTaskSpec) -> dict[str, list[Any]]:
    """Read a CoNLL-2003 file into columns ``idx``, ``tokens``, ``label``.

    Args:
        path: The file (4 space-separated columns, blank line between sentences).
        spec: The task, which gives the tag names.

    Returns:
        Columns: ``idx`` (sentence number from 0), ``tokens`` (list of words per
        sentence) and ``label`` (list of tag ids per sentence, in ``spec.label_names``
        order).

    Raises:
        DataError: On non-UTF-8 bytes, a wrong column count, an unknown tag, an IOB2
            violation, or an empty file; the message names the file and the line.
    """
    path = Path(path)
    label_ids = {name: i for i, name in enumerate(spec.label_names)}
    columns: dict[str, list[Any]] = {"idx": [], "tokens": [], "label": []}
    tokens: list[str] = []
    tags: list[int] = []
    previous = "O"

    def end_sentence() -> None:
        nonlocal tokens, tags, previous
        if tokens:
            columns["idx"].append(len(columns["idx"]))
            columns["tokens"].append(tokens)
            columns["label"].append(tags)
        tokens, tags, previous = [], [], "O"

    for number, line in read_lines(path):
        if not line.strip():
            end_sentence()
            continue
        cells = line.split(" ")
        if cells[0] == DOCSTART:
            end_sentence()
            continue
        if len(cells) != N_COLUMNS or not all(cells):
            raise DataError(
                f"{path}:{number}: expected {N_COLUMNS} space-separated columns "
                f"(token POS chunk NER), found {excerpt(line)}"
            )
        tag = cells[-1]
        if tag not in label_ids:
            raise DataError(
                f"{path}:{number}: unknown tag {excerpt(tag)}; valid tags: {list(spec.label_names)}"
            )
        problem = iob2_error(previous, tag)
        if problem:
            raise DataError(f"{path}:{number}: {problem}")
        tokens.append(cells[0])
        tags.append(label_ids[tag])
        previous = tag
    end_sentence()
    if not columns["idx"]:
        raise DataError(f"{path}: no sentences")
    return columns
