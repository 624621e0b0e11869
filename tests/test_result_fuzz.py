"""Fuzz the result.json reader: any file is accepted and collected, or skipped and named.

And the results table reader: a mutated ``results.csv`` is read (each cell once) or refused in
one line that names the file (and the row), or the cells held twice.

Inputs are hypothesis-generated result files built from real ones (the report tests' synthetic
sweep, laid out as train.run writes them): a field replaced by arbitrary JSON, deleted or
added, the text cut or given junk bytes (not UTF-8, NUL, BOM), or bytes from scratch. An
accepted file must then go through everything collect builds (the tables, history,
provenance, the Parquet file) without an error; a refused one is a one-line problem that
names the file. Nothing else may be raised.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_report import write_synthetic_sweep

from bench.axes.optional import AXIS_COLUMNS
from bench.errors import CollectError, DataError
from bench.results.collect import (
    collect,
    read_results,
    read_table,
    record_files,
    table_files,
    tidy,
)
from bench.results.rescore import verified
from bench.results.result_file import parse_result
from bench.results.stats import RUN_KEYS, normalize_table
from conftest import ROOT

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _real_results() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        return write_synthetic_sweep(Path(tmp) / "runs")


REAL = _real_results()  # ok, failed and diverged cells of two tasks
KEYS = st.sampled_from(
    [
        "cell",
        "seed",
        "task",
        "layers",
        "status",
        "best",
        "metrics",
        "dev",
        "accuracy",
        "history",
        "epoch",
        "baseline",
        "params",
        "trainable",
        "schema",
        "config_hash",
        "\ud800",
        "",
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(["ok", "failed", "diverged", "sst2", "-1", "\ud800", "1"])
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS | st.text(max_size=4), inner),
    max_leaves=8,
)
RAW = st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xef\xbb\xbf", b"{", b"]", b"\xe2\x80"])


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a parsed result: dict keys and list indices, nested."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


@st.composite
def result_bytes(draw: st.DrawFn) -> bytes:
    """A real result, mutated a few times, serialised; now and then bytes from scratch."""
    start = draw(st.integers(0, 9))
    if start == 0:
        return draw(st.binary(max_size=64))
    if start == 1:  # any JSON document at all
        return json.dumps(draw(JSONISH)).encode("utf-8", errors="surrogatepass")
    result = json.loads(json.dumps(draw(st.sampled_from(REAL))))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(result)
        where = draw(st.sampled_from(paths))
        parent = result
        for step in where[:-1]:
            parent = parent[step]
        op = draw(st.integers(0, 3))
        if op == 0 and isinstance(parent, dict):
            del parent[where[-1]]
        elif op == 1 and isinstance(parent, dict):
            parent[draw(KEYS)] = draw(JSONISH)
        else:
            parent[where[-1]] = draw(JSONISH)
    text = json.dumps(result, allow_nan=True, ensure_ascii=draw(st.booleans()))
    data = text.encode("utf-8", errors="surrogatepass")  # a lone surrogate: invalid UTF-8
    if draw(st.integers(0, 4)) == 0:
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(RAW) + data[at:] if draw(st.booleans()) else data[:at]
    return data


def _check_accepted_or_named(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        path = runs / "sst2" / "x" / "seed=1" / "result.json"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        results, problems = read_results([runs])
        assert len(results) + sum(": skipped: " in p for p in problems) == 1
        for problem in problems:
            assert problem.startswith(f"{path}: ") and "\n" not in problem, problem
        # an ok result of schema 2 or later without its predictions is refused, and named
        results, _, refused = verified(results)
        for problem in refused:
            where, _, why = problem.partition(": ")
            assert Path(where).resolve() == path.parent.resolve() and "\n" not in why, problem
        if results:  # accepted: everything collect builds from it works
            table = tidy(results)
            files = {**table_files(table), **record_files(results, [runs])}
            assert len(files) == 5 and all(isinstance(v, bytes) for v in files.values())
            assert collect([runs], Path(tmp) / "results").equals(table)
        else:
            try:
                collect([runs], Path(tmp) / "results")
            except CollectError as err:
                assert "none of the 1 result files" in str(err)
            else:
                raise AssertionError("a skipped file was collected")
            assert not (Path(tmp) / "results").exists()


#: A collect per example (about 0.7 s on two cores): fewer in the fast suite, many under slow.
COLLECT_FUZZ = settings(FUZZ, max_examples=100)


@COLLECT_FUZZ
@given(data=result_bytes())
def test_a_result_file_is_collected_or_skipped_and_named(data):
    _check_accepted_or_named(data)


@pytest.mark.slow
@settings(FUZZ, max_examples=1000)
@given(data=result_bytes())
def test_a_result_file_is_collected_or_skipped_and_named_deeply(data):
    _check_accepted_or_named(data)


@FUZZ
@given(data=result_bytes())
def test_parse_result_raises_only_data_error(data):
    from bench.errors import DataError

    try:
        result, warnings = parse_result(data, "x/result.json")
    except DataError as err:
        assert str(err).startswith("x/result.json: skipped: ")
    else:
        assert isinstance(result, dict) and "cell" in result and "status" in result
        assert all(w.startswith("x/result.json: ") for w in warnings)


def test_every_real_result_is_accepted():
    """The mutations start from results that are valid as they are."""
    for result in REAL:
        parsed, warnings = parse_result(json.dumps(result).encode(), "r.json")
        assert warnings == []
        # Reading fills the optional axes from the stored config when the cell predates them.
        axes = {k: parsed["cell"].pop(k) for k in AXIS_COLUMNS}
        config = result.get("config") or {}
        assert axes == {
            "train_size": (config.get("data") or {}).get("train_size"),
            "order_seed": config.get("order_seed"),
        }
        assert parsed == result


#: A real results table: its header and 8 rows (``results/quick``).
TABLE_LINES = (ROOT / "results" / "quick" / "results.csv").read_bytes().splitlines(keepends=True)
FIELDS = st.sampled_from(["", "nan", "inf", "-1", "1.5", "1e400", "2" * 20, "seed", "ok", '"'])


@st.composite
def table_bytes(draw: st.DrawFn) -> bytes:
    """The table with lines dropped, repeated (the header too: ``cat``), fields replaced, junk."""
    lines = list(TABLE_LINES)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(lines) - 1))
        change = draw(st.sampled_from(["drop", "repeat", "field", "junk"]))
        if change == "drop" and len(lines) > 1:
            del lines[at]
        elif change == "repeat":
            lines.insert(at, lines[draw(st.integers(0, len(lines) - 1))])
        elif change == "field":
            fields = lines[at].decode("utf-8", "replace").split(",")
            fields[draw(st.integers(0, len(fields) - 1))] = draw(FIELDS | st.text(max_size=4))
            lines[at] = ",".join(fields).encode("utf-8", "surrogatepass")
        else:
            cut = draw(st.integers(0, len(lines[at])))
            lines[at] = lines[at][:cut] + draw(RAW) + lines[at][cut:]
    return b"".join(lines)


@FUZZ
@given(data=table_bytes())
def test_a_results_csv_is_read_or_refused_naming_its_file(data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.csv"
        path.write_bytes(data)
        try:
            table = normalize_table(read_table(path))
        except DataError as err:
            said = str(err)
            assert "\n" not in said and (f"{path}: " in said or "more than once" in said), said
        except ValueError as err:  # not a results table at all: the columns it lacks
            assert "required columns" in str(err) or "unknown task" in str(err), str(err)
        else:
            assert not table.duplicated([*RUN_KEYS, "split", "metric"]).any()
