"""One ``result.json``, read and checked before collect or the report use any of it.

:func:`bench.run.train.run` writes the file (layout :data:`bench.cell.RESULT_SCHEMA`); people
copy, edit and hand-make them too. :func:`load_result` checks the fields that the tables,
``history.csv``, ``cells.json`` and the report read, with their types, so that a wrong one
is reported with its file, field and what was expected, instead of crashing a collect
halfway. Fields nobody reads (``throughput``, ``cache``, ...) are not checked.

A small hand validator rather than a schema library: headbench does not depend on pydantic
or jsonschema, and the messages here say exactly which dotted field is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.axes.optional import AXIS_COLUMNS
from bench.cell import CELL_COLUMNS, RESULT_SCHEMA
from bench.errors import DataError

#: The statuses a finished cell records (``train.run``).
RESULT_STATUSES = ("ok", "failed", "diverged")
_INT64 = 2**63  # tables store integers as int64 (Parquet)
_SHOWN = 40  # characters of a wrong value shown in a message


class _Invalid(ValueError):
    """One field of a result has the wrong type or value.

    Attributes:
        field: The dotted field (``best.metrics.dev.accuracy``).
        expected: What the field must be.
    """

    def __init__(self, field: str, expected: str, value: object) -> None:
        shown = repr(value)
        if len(shown) > _SHOWN:
            shown = shown[: _SHOWN - 3] + "..."
        super().__init__(f"'{field}' is {shown} ({type(value).__name__}), expected {expected}")
        self.field = field
        self.expected = expected


Check = Callable[[str, Any], None]


def _text(field: str, value: Any) -> None:
    if not isinstance(value, str):
        raise _Invalid(field, "a string", value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (\ud800): cannot be written to a CSV
        raise _Invalid(field, "a string of UTF-8 text", value) from None


def _integer(field: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(field, "an integer", value)
    if not -_INT64 <= value < _INT64:
        raise _Invalid(field, "a 64-bit integer", value)


def _number(field: str, value: Any) -> None:
    if isinstance(value, float):
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(field, "a number", value)
    if not -_INT64 <= value < _INT64:
        raise _Invalid(field, "a 64-bit integer or a float", value)


def _boolean(field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise _Invalid(field, "true or false", value)


def _obj(field: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise _Invalid(field, "an object", value)


def _optional(check: Check) -> Check:
    """``check``, or null."""

    def run(field: str, value: Any) -> None:
        if value is None:
            return
        try:
            check(field, value)
        except _Invalid as err:
            if err.field != field:  # a wrong field inside it
                raise
            raise _Invalid(field, f"{err.expected} or null", value) from None

    return run


def _metrics(field: str, value: Any) -> None:
    """``{metric name: number or null}``."""
    _obj(field, value)
    for name, score in value.items():
        _text(f"{field} (a metric name)", name)
        _optional(_number)(f"{field}.{name}", score)


def _splits(field: str, value: Any) -> None:
    """``{split name: {metric name: number or null}}``."""
    _obj(field, value)
    for split, metrics in value.items():
        _text(f"{field} (a split name)", split)
        _metrics(f"{field}.{split}", metrics)


def _fields(field: str, value: dict[str, Any], checks: dict[str, Check]) -> None:
    for key, check in checks.items():
        if key in value:
            check(f"{field}.{key}" if field else key, value[key])


def _cell(field: str, value: Any) -> None:
    _obj(field, value)
    for key in CELL_COLUMNS:
        if key not in value:
            continue
        if key == "seed":
            _integer(f"{field}.seed", value[key])
        elif key == "layers":  # older and hand-made results: null
            _optional(_text)(f"{field}.layers", value[key])
        else:
            _text(f"{field}.{key}", value[key])
    missing = [key for key in CELL_COLUMNS if key not in value]
    if missing:
        raise ValueError(
            f"'{field}' has no {', '.join(map(repr, missing))} (a cell has "
            f"{', '.join(CELL_COLUMNS)})"
        )
    for key in AXIS_COLUMNS:  # optional axes: absent, null or a whole number
        if value.get(key) is not None:
            _integer(f"{field}.{key}", value[key])


def with_axes(data: dict[str, Any]) -> dict[str, Any]:
    """A checked result whose ``cell`` carries every optional axis (:data:`AXIS_COLUMNS`).

    Results written before an axis existed lack it in their ``cell``: it is taken from the
    stored config (``data.train_size``, ``order_seed``), else None.
    """
    cell = data["cell"]
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    assert isinstance(config, dict)
    data_config = config.get("data") if isinstance(config.get("data"), dict) else {}
    assert isinstance(data_config, dict)
    stored = {"train_size": data_config.get("train_size"), "order_seed": config.get("order_seed")}
    for key in AXIS_COLUMNS:
        if key not in cell:
            value = stored.get(key)
            cell[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
    return data


def _status(field: str, value: Any) -> None:
    if value not in RESULT_STATUSES:
        raise _Invalid(field, f"one of {', '.join(RESULT_STATUSES)}", value)


def _best(field: str, value: Any) -> None:
    _obj(field, value)
    _fields(field, value, {"epoch": _optional(_integer), "metrics": _optional(_splits)})


def _baseline(field: str, value: Any) -> None:
    """``{split: {"metrics": {...}, ...}}`` (``strategy`` and ``prediction`` unchecked)."""
    _obj(field, value)
    for split, entry in value.items():
        _text(f"{field} (a split name)", split)
        _optional(_obj)(f"{field}.{split}", entry)
        if entry is not None:
            _fields(f"{field}.{split}", entry, {"metrics": _optional(_metrics)})


def _history(field: str, value: Any) -> None:
    """A list of epochs: ``epoch``, ``step``, ``train_loss`` and per split its metrics."""
    if not isinstance(value, list):
        raise _Invalid(field, "a list", value)
    scalars = {"epoch": _optional(_integer), "step": _optional(_integer)}
    for i, entry in enumerate(value):
        _obj(f"{field}.{i}", entry)
        _fields(f"{field}.{i}", entry, {**scalars, "train_loss": _optional(_number)})
        for split, metrics in entry.items():
            if isinstance(metrics, dict):  # a split; other values are not read
                _text(f"{field}.{i} (a split name)", split)
                _metrics(f"{field}.{i}.{split}", metrics)


def _params(field: str, value: Any) -> None:
    _obj(field, value)
    _fields(field, value, {"trainable": _optional(_integer)})


#: The top-level fields that collect and the report read, and their checks (a missing
#: field reads as null; ``cell`` and ``status`` are required).
FIELDS: dict[str, Check] = {
    "cell": _cell,
    "status": _status,
    "reason": _optional(_text),
    "main_metric": _optional(_text),
    "config_hash": _optional(_text),
    "best": _optional(_best),
    "baseline": _optional(_baseline),
    "history": _optional(_history),
    "params": _optional(_params),
    "train_time_s": _optional(_number),
    "wall_time_s": _optional(_number),
    "finished_at": _optional(_text),
    "degenerate": _optional(_boolean),
    "config": _optional(_obj),
    "git": _optional(_obj),
    "versions": _optional(_obj),
    "hardware": _optional(_obj),
    "peak_memory": _optional(_obj),
}
REQUIRED = ("cell", "status")


def check_result(data: Any) -> None:
    """Check a parsed result against :data:`FIELDS` and its schema version.

    Args:
        data: The parsed JSON.

    Raises:
        ValueError: Naming the first wrong field and what was expected, or saying that a
            newer headbench wrote the result.
    """
    if not isinstance(data, dict):
        raise _Invalid("(top level)", "an object", data)
    schema = data.get("schema", 1)  # results written before the field existed: layout 1
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > RESULT_SCHEMA:
        raise ValueError(
            f"written by a newer headbench: schema {schema}, this version reads ≤ {RESULT_SCHEMA}"
        )
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise _Invalid("schema", f"an integer from 1 to {RESULT_SCHEMA}", schema)
    for key in REQUIRED:
        if key not in data:
            raise ValueError(f"no '{key}' (every result has {' and '.join(REQUIRED)})")
    _fields("", data, FIELDS)


def parse_result(raw: bytes, path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """Decode and check the bytes of one result file.

    Args:
        raw: The file's content.
        path: The file (for the messages).

    Returns:
        The result and its warnings: one line naming the file when it has no
        ``config_hash`` (an older or hand-made result, which resume cannot match).

    Raises:
        DataError: ``<path>: skipped: <why>`` for content that is not UTF-8 JSON, of a
            newer or unknown schema, or with a field of the wrong type.
    """
    try:
        data = json.loads(raw.decode("utf-8-sig"))  # a BOM (a Windows editor) is harmless
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path}: skipped: unreadable result (not UTF-8 text: byte {err.start})"
        ) from None
    except (ValueError, RecursionError) as err:
        raise DataError(
            f"{path}: skipped: unreadable result (not JSON: {type(err).__name__}: {err})"
        ) from None
    try:
        check_result(data)
    except ValueError as err:
        raise DataError(f"{path}: skipped: {err}") from None
    with_axes(data)
    warnings = []
    if data.get("config_hash") is None:
        warnings.append(
            f"{path}: no 'config_hash' (an older or hand-made result): kept, but resume "
            "cannot tell whether it matches the current config"
        )
    return data, warnings


def load_result(path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """Read and check one ``result.json``.

    Args:
        path: The file.

    Returns:
        The result and its warnings (see :func:`parse_result`).

    Raises:
        DataError: ``<path>: skipped: <why>``: the file cannot be read, or see
            :func:`parse_result`.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise DataError(
            f"{path}: skipped: unreadable result ({type(err).__name__}: {err})"
        ) from None
    return parse_result(raw, path)
