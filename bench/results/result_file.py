"""One ``result.json``, checked: a wrong field that collect reads (:data:`FIELDS`) is named."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypeAlias

from bench.axes.optional import AXIS_COLUMNS
from bench.cell import CELL_COLUMNS, RESULT_SCHEMA
from bench.errors import DataError

#: The statuses a finished cell records (``train.run``).
RESULT_STATUSES = ("ok", "failed", "diverged")
_INT64 = 2**63  # tables store integers as int64 (Parquet)
_SHOWN = 40  # characters of a wrong value shown in a message
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone one is not UTF-8: cannot go in a CSV

#: Type name -> (what a value must be, its test).
_TYPES = {
    "text": ("a string", lambda v: isinstance(v, str)),
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "number": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "object": ("an object", lambda v: isinstance(v, dict)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "status": (f"one of {', '.join(RESULT_STATUSES)}", lambda v: v in RESULT_STATUSES),
    "any": ("anything", lambda v: True),
}

#: A field's spec: ``"<type>"`` (``?``: null allowed, ``!``: required), or ``(that, children)``
#: whose children are checked by key (``*``: every other key, or every list item).
Spec: TypeAlias = "str | tuple[str, dict[str, Spec]]"
_METRICS: Spec = ("object", {"*": "number?"})
_CELL: Spec = (
    "object!",
    {
        **dict.fromkeys(CELL_COLUMNS, "text!"),
        "seed": "int!",
        "layers": "text?!",  # older and hand-made results: null
        **dict.fromkeys(AXIS_COLUMNS, "int?"),
    },
)
_EPOCH: Spec = (  # one epoch of the history: its scalars and, per split, its metrics
    "object",
    {"epoch": "int?", "step": "int?", "train_loss": "number?", "*": ("any", {"*": "number?"})},
)
#: The top-level fields that collect and the report read (a missing one reads as null).
FIELDS: dict[str, Spec] = {
    "cell": _CELL,
    "status": "status!",
    **dict.fromkeys(["reason", "main_metric", "config_hash", "finished_at"], "text?"),
    "best": ("object?", {"epoch": "int?", "metrics": ("object?", {"*": _METRICS})}),
    "baseline": ("object?", {"*": ("object?", {"metrics": ("object?", {"*": "number?"})})}),
    "history": ("list?", {"*": _EPOCH}),
    "params": ("object?", {"trainable": "int?"}),
    **dict.fromkeys(["train_time_s", "wall_time_s"], "number?"),
    "degenerate": "bool?",
    **dict.fromkeys(["config", "git", "versions", "hardware", "peak_memory"], "object?"),
}


def _invalid(field: str, expected: str, value: object) -> ValueError:
    shown = repr(value)
    shown = shown[: _SHOWN - 3] + "..." if len(shown) > _SHOWN else shown
    return ValueError(f"'{field}' is {shown} ({type(value).__name__}), expected {expected}")


def _check(field: str, value: Any, spec: Spec) -> None:
    """Check ``value`` against ``spec``; ValueError names the first wrong dotted field."""
    kind, children = (spec, {}) if isinstance(spec, str) else spec
    name, nullable = kind.rstrip("?!"), "?" in kind
    if value is None and nullable:
        return
    expected, test = _TYPES[name]
    also = " or null" if nullable else ""
    if not test(value):
        raise _invalid(field, expected + also, value)
    if name != "any" and isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise _invalid(field, "a 64-bit integer" + also, value)
    if name != "any" and isinstance(value, str) and _SURROGATE.search(value):
        raise _invalid(field, "a string of UTF-8 text" + also, value)
    if not isinstance(value, dict) and name != "list":  # "any": only an object is read
        return
    for key, item in value.items() if isinstance(value, dict) else enumerate(value):
        sub = children.get(str(key), children.get("*"))
        if sub is not None and key not in children and isinstance(key, str):
            _check(f"{field} (a name)", key, "text")
        if sub is not None:
            _check(f"{field}.{key}" if field else str(key), item, sub)
    required = [k for k, s in children.items() if "!" in (s if isinstance(s, str) else s[0])]
    if missing := [k for k in required if k not in value]:
        where = f"'{field}' has no" if field else "no"
        names = ", ".join(map(repr, missing))
        raise ValueError(f"{where} {names} (required: {', '.join(required)})")


def with_axes(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every optional axis in its ``cell``: from the config for an older result."""
    config: dict[str, Any] = data.get("config") or {}
    sizes = found if isinstance(found := config.get("data"), dict) else {}
    stored = {"train_size": sizes.get("train_size"), "order_seed": config.get("order_seed")}
    for key in AXIS_COLUMNS:
        data["cell"].setdefault(key, stored[key] if type(stored[key]) is int else None)
    return data


def parse_result(raw: bytes, path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """Decode and check one result file's bytes: the result (:func:`with_axes`), its warnings.

    Raises:
        DataError: ``<path>: skipped: <why>``: not UTF-8 JSON, a newer schema, a wrong field.
    """
    try:
        data = json.loads(raw.decode("utf-8-sig"))  # a BOM (a Windows editor) is harmless
    except UnicodeDecodeError as err:
        why = f"not UTF-8 text: byte {err.start}"
        raise DataError(f"{path}: skipped: unreadable result ({why})") from None
    except (ValueError, RecursionError) as err:
        why = f"not JSON: {type(err).__name__}: {err}"
        raise DataError(f"{path}: skipped: unreadable result ({why})") from None
    schema = data.get("schema", 1) if isinstance(data, dict) else 1  # absent: layout 1
    integer = isinstance(schema, int) and not isinstance(schema, bool)
    try:
        if integer and schema > RESULT_SCHEMA:
            newer = f"schema {schema}, this version reads ≤ {RESULT_SCHEMA}"
            raise ValueError(f"written by a newer headbench: {newer}")
        if not integer or schema < 1:
            raise _invalid("schema", f"an integer from 1 to {RESULT_SCHEMA}", schema)
        _check("" if isinstance(data, dict) else "(top level)", data, ("object", FIELDS))
    except ValueError as err:
        raise DataError(f"{path}: skipped: {err}") from None
    warnings = []
    if with_axes(data).get("config_hash") is None:
        warnings.append(
            f"{path}: no 'config_hash' (an older or hand-made result): kept, but resume "
            "cannot tell whether it matches the current config"
        )
    return data, warnings


def load_result(path: str | Path) -> tuple[dict[str, Any], list[str]]:
    """Read and check one ``result.json`` (:func:`parse_result`; DataError if unreadable)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        why = f"{type(err).__name__}: {err}"
        raise DataError(f"{path}: skipped: unreadable result ({why})") from None
    return parse_result(raw, path)
