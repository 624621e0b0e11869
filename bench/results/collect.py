"""Result files → one tidy table (one row per cell × split × metric).

``python -m bench.results.collect runs/quick -o results/quick`` writes ``results.csv`` and
``results.parquet`` (plus ``history.csv``, ``cells.json`` and ``launches.jsonl``, see
:mod:`bench.results.run_records`; ``predictions.parquet``, every cell's reporting-split
predictions, :mod:`bench.results.predictions`; and ``trials.csv`` when the sweep ran a
search, :mod:`bench.results.trials`) and prints a wide summary. Every cell is re-scored
from its predictions first and refused, named, when a recorded metric does not re-score
(:mod:`bench.results.rescore`). Each result file is checked first
(:mod:`bench.results.result_file`): an unreadable or malformed one, or one of a newer schema,
is skipped and named, never fatal; when one cell has several results (the same cell found
under two roots), the latest is kept and the others are reported. Results below a
``superseded/`` folder (an earlier configuration kept by resume) are not read.

Nothing is lost on bad input: a root that does not exist or holds no result file, or roots
whose result files all fail their check, raise :class:`bench.errors.CollectError` (the
command exits 2) and leave the results directory as it was. Nor is a results directory's
content replaced by another sweep's: when its ``cells.json`` lists cells that this collect
would drop (their run directories lie outside the roots collected now, or no longer exist
and are not collected again), collect refuses the same way (:func:`dropped_cells`) and
names the fix: collect every root together, or write to another results directory;
``--replace`` replaces them on purpose. The outputs are built in memory and published
together (:func:`bench.results.publish.publish`): all or none.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

from bench.axes.optional import AXIS_COLUMNS
from bench.cell import CELL_COLUMNS, RESULT_FILE, SUPERSEDED_DIR
from bench.clock import utc_now
from bench.data.text_lines import read_text
from bench.errors import CollectError, DataError
from bench.results.curves import sized_settings
from bench.results.frames import frame_files, from_results
from bench.results.predictions import (
    PREDICTIONS_FILE,
    predictions_bytes,
    predictions_table,
    read_predictions,
)
from bench.results.publish import publish
from bench.results.rescore import verified
from bench.results.result_file import load_result
from bench.results.run_records import (
    HISTORY_COLUMNS,
    history_table,
    last_launch,
    provenance_records,
    read_launch_log,
)
from bench.results.trials import TRIALS_FILE, trials_bytes, trials_table

log = logging.getLogger(__name__)
#: The lock file of a results directory (:func:`results_lock`).
COLLECT_LOCK = ".collect.lock"
#: The per-cell record of a results directory: which cells its tables hold, from where.
CELLS_FILE = "cells.json"

TABLE_COLUMNS = [
    *CELL_COLUMNS,
    "status",
    "main_metric",
    "split",
    "metric",
    "value",
    "baseline",
    "best_epoch",
    "trainable_params",
    "train_time_s",
    "reason",
    "run_dir",
    "best_constant",
    "selection",
    "trial",
    "selection_score",
    "git_commit",
    "summary_token",
    *AXIS_COLUMNS,
]

_NUMERIC_COLUMNS = (
    "seed",
    *AXIS_COLUMNS,
    "value",
    "baseline",
    "best_epoch",
    "trainable_params",
    "train_time_s",
    "best_constant",
    "trial",
    "selection_score",
)


def find_result_files(roots: Iterable[str | Path]) -> list[Path]:
    """All ``result.json`` files under the given directories (or the files themselves).

    Folders named :data:`bench.cell.SUPERSEDED_DIR` below a root are not searched: they
    hold the outputs of an earlier configuration of a cell, which are not its result.

    Args:
        roots: Directories to search, or result files.

    Returns:
        The files, sorted within each root.
    """
    found: list[Path] = []
    for root in map(Path, roots):
        if root.is_file():
            found.append(root)
            continue
        files = []
        for folder, subdirs, names in os.walk(root):
            subdirs[:] = [d for d in subdirs if d != SUPERSEDED_DIR]
            if RESULT_FILE in names:
                files.append(Path(folder) / RESULT_FILE)
        found.extend(sorted(files))
    return found


def read_results(roots: Iterable[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """Read and check every result file under ``roots``.

    Args:
        roots: Directories to search, or result files.

    Returns:
        The results (one per cell, the latest) and one message per file skipped (unreadable,
        malformed, of a newer schema), per duplicate, and per result kept with a warning
        (no ``config_hash``).
    """
    results, problems = [], []
    for path in find_result_files(roots):
        try:
            data, warnings = load_result(path)
            data["run_dir"] = _run_dir(path)
            if data.get("finished_at") is None:  # results written before the field existed
                data["finished_at"] = utc_now(path.stat().st_mtime)
        except DataError as err:
            problems.append(str(err))
            continue
        except OSError as err:  # removed while we read it
            problems.append(f"{path}: skipped: unreadable result ({type(err).__name__}: {err})")
            continue
        problems += warnings
        results.append(data)
    return _latest_per_cell(results, problems), problems


def _run_dir(path: Path) -> str:
    """The result's folder relative to the working directory, as it goes into the tables."""
    run_dir = os.path.relpath(path.parent)
    try:
        run_dir.encode("utf-8")
    except UnicodeEncodeError:  # a folder name of non-UTF-8 bytes cannot go into a CSV
        raise DataError(f"{path}: skipped: its folder name is not UTF-8 text") from None
    return run_dir


def cell_key(result: dict[str, Any]) -> tuple[Any, ...]:
    """The identity of a cell: its coordinates and optional axes (training size, order seed)."""
    return tuple(result["cell"].get(k) for k in [*CELL_COLUMNS, *AXIS_COLUMNS])


def _latest_per_cell(results: list[dict[str, Any]], problems: list[str]) -> list[dict[str, Any]]:
    """Keep one result per cell (the latest finished); report the others as duplicates."""
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for res in sorted(results, key=lambda r: str(r["finished_at"])):
        key = cell_key(res)
        if key in latest:
            problems.append(
                f"{latest[key]['run_dir']}: duplicate of cell {'/'.join(map(str, key))}; "
                f"kept the later result in {res['run_dir']}"
            )
        latest[key] = res
    return list(latest.values())


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    """An optional provenance string as stored, or None when it is not writable text."""
    if not isinstance(value, str):
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON allows it, Parquet does not
        return None
    return value


def _number(value: Any) -> int | float | None:
    """An optional number as stored, or None when it is not one (booleans are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def tidy(results: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per cell × split × metric at the best epoch (failed cells: one row, no value)."""
    rows = []
    for res in results:
        base = {k: res["cell"].get(k) for k in [*CELL_COLUMNS, *AXIS_COLUMNS]}
        selection: dict[str, Any] = _mapping(res.get("selection"))
        search: dict[str, Any] = _mapping(res.get("search"))
        base.update(
            status=res.get("status"),
            main_metric=res.get("main_metric"),
            reason=res.get("reason"),
            best_epoch=(res.get("best") or {}).get("epoch"),
            trainable_params=(res.get("params") or {}).get("trainable"),
            train_time_s=res.get("train_time_s"),
            run_dir=res.get("run_dir"),
            # Results made before the evaluation protocol chose their epoch on dev.
            selection=_text(selection.get("mode", "dev")),
            trial=_number(search.get("selected")),
            selection_score=_number(
                _mapping(selection.get("metrics")).get(str(res.get("main_metric")))
            ),
            git_commit=_text(_mapping(res.get("git")).get("commit")),
            # The token one-token heads read: results before decoders were all first-token.
            summary_token=_text(_mapping(res.get("encoder_info")).get("summary", "first")),
        )
        best = (res.get("best") or {}).get("metrics") or {}
        if res.get("status") != "ok" or not best:
            rows.append(
                {
                    **base,
                    "split": None,
                    "metric": None,
                    "value": None,
                    "baseline": None,
                    "best_constant": None,
                }
            )
            continue
        for split, metrics in best.items():
            baseline = ((res.get("baseline") or {}).get(split) or {}).get("metrics") or {}
            constant = ((res.get("best_constant") or {}).get(split) or {}).get("metrics") or {}
            for metric, value in metrics.items():
                rows.append(
                    {
                        **base,
                        "split": split,
                        "metric": metric,
                        "value": value,
                        "baseline": baseline.get(metric),
                        "best_constant": constant.get(metric),
                    }
                )
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Wide view: one row per task × encoder × head × freeze, one column per dev metric (mean).

    A learning curve (a setting at several training sizes) has one row per size.
    """
    ok = table[(table["status"] == "ok") & (table["split"] == "dev")]
    if ok.empty:
        return pd.DataFrame()
    keys = ["task", "encoder", "head_label", "freeze_label"]
    if sized_settings(ok):
        keys.append("train_size")
    wide = ok.pivot_table(index=keys, columns="metric", values="value", aggfunc="mean")
    main = ok.drop_duplicates(subset=[*keys, "seed"])  # one row per run for run-level columns
    base = ok.pivot_table(index=keys, columns="metric", values="baseline", aggfunc="mean")
    wide = wide.join(base.rename(columns=lambda m: f"{m} (majority)"))
    wide["seeds"] = main.groupby(keys)["seed"].nunique()
    wide["train_s"] = main.groupby(keys)["train_time_s"].mean()
    return wide


def table_files(table: pd.DataFrame) -> dict[str, bytes]:
    """The tidy table as the contents of ``results.csv`` and ``results.parquet``.

    Args:
        table: The tidy table (:func:`tidy`).

    Returns:
        File name → content.
    """
    parquet = io.BytesIO()
    table.astype({"layers": "str", "reason": "str", "seed": "Int64"}).to_parquet(
        parquet, index=False
    )
    return {
        "results.csv": _csv(table),
        "results.parquet": parquet.getvalue(),
    }


def _csv(table: pd.DataFrame) -> bytes:
    text = io.StringIO(newline="")
    table.to_csv(text, index=False)
    return text.getvalue().encode("utf-8")


def write_table(table: pd.DataFrame, out_dir: str | Path) -> Path:
    """Write the tidy table as ``<out_dir>/results.csv`` and ``results.parquet``, atomically.

    Args:
        table: The tidy table.
        out_dir: The results directory.

    Returns:
        The CSV path.
    """
    return publish(out_dir, table_files(table))[0]


#: The files a results directory holds its tidy table in (:func:`read_table` prefers the first).
TABLE_FILES = ("results.parquet", "results.csv")


def has_table(folder: str | Path) -> bool:
    """Whether ``folder`` holds a tidy table (``results.parquet`` or ``results.csv``)."""
    return any((Path(folder) / name).is_file() for name in TABLE_FILES)


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a tidy table back: ``results.parquet`` or ``results.csv``, or a directory with one.

    Text columns stay text (``layers="-1"`` is a name, not a number) and ``seed`` is a
    nullable integer. Columns are returned as stored; :func:`bench.results.stats.normalize_table`
    fills the ones older tables lack.

    Args:
        path: A table file or the directory that holds it (Parquet preferred).

    Returns:
        The tidy table.

    Raises:
        FileNotFoundError: If there is no table at ``path``.
    """
    path = Path(path)
    if path.is_dir():
        parquet, csv = (path / name for name in TABLE_FILES)
        path = parquet if parquet.exists() else csv
    if not path.is_file():
        raise FileNotFoundError(f"no results table at {path}")
    if path.suffix == ".parquet":
        table = pd.read_parquet(path)
    else:
        text = [c for c in TABLE_COLUMNS if c not in _NUMERIC_COLUMNS]
        table = pd.read_csv(path, dtype={**dict.fromkeys(text, "str"), "seed": "Int64"})
    return table


def record_files(results: list[dict[str, Any]], roots: Iterable[str | Path]) -> dict[str, bytes]:
    """The contents of ``history.csv``, ``cells.json`` and ``launches.jsonl``.

    Args:
        results: The results (:func:`read_results`).
        roots: The directories they were read from (their launch logs are copied).

    Returns:
        File name → content.
    """
    cells = json.dumps(provenance_records(results), indent=2, allow_nan=True, default=str)
    lines = "".join(json.dumps(r, default=str) + "\n" for r in read_launch_log(roots))
    return {
        "history.csv": _csv(history_table(results)),
        CELLS_FILE: (cells + "\n").encode("utf-8"),
        "launches.jsonl": lines.encode("utf-8"),
    }


def write_records(
    results: list[dict[str, Any]], roots: Iterable[str | Path], out_dir: str | Path
) -> None:
    """Write ``history.csv``, ``cells.json`` and ``launches.jsonl`` beside the table, atomically.

    Args:
        results: The results (:func:`read_results`).
        roots: The directories they were read from.
        out_dir: The results directory.
    """
    publish(out_dir, record_files(results, roots))


def read_history(out_dir: str | Path) -> pd.DataFrame:
    """Read ``history.csv`` of a results directory (empty table if there is none)."""
    path = Path(out_dir) / "history.csv"
    if not path.is_file():
        return pd.DataFrame(columns=HISTORY_COLUMNS)
    text = [c for c in CELL_COLUMNS if c != "seed"] + ["split", "metric"]
    numbers = dict.fromkeys(["seed", *AXIS_COLUMNS], "Int64")
    table = pd.read_csv(path, dtype={**dict.fromkeys(text, "str"), **numbers})
    for column in AXIS_COLUMNS:  # written before the optional axes
        if column not in table:
            table[column] = pd.Series(pd.NA, index=table.index, dtype="Int64")
    return table


def dropped_cells(
    out_dir: str | Path, roots: Iterable[str | Path], results: Iterable[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """The cells of a results directory that publishing ``results`` there would drop.

    The results directory's ``cells.json`` (written by the last collect into it) lists each
    cell it holds with its run directory, as :func:`read_results` wrote it: relative to the
    working directory of that collect. It is found relative to the working directory now or,
    failing that, to the results directory or one of its parents (the checkout a committed
    experiment lives in). A cell is dropped when its run directory

    * exists but lies under none of ``roots``: another sweep's cell, which this collect
      does not read;
    * no longer exists (deleted, moved, or never in this clone) and no result of
      ``results`` is the same cell (:func:`cell_key`): the tables are its last record.

    A cell whose run directory lies under a root is kept by collecting that root, or is
    dropped on purpose (a result that fails its check is skipped with a warning).

    Args:
        out_dir: The results directory.
        roots: The run or sweep directories (or result files) collected now.
        results: The results read from them (:func:`read_results`).

    Returns:
        The recorded run directories of the dropped cells: those outside every root, and
        those that no longer exist. Both empty when ``out_dir`` has no ``cells.json``.

    Raises:
        CollectError: If ``cells.json`` exists but cannot be read as a list of cells (which
            cells it holds cannot be told then).
    """
    collected = {_key(res) for res in results}

    def comes_back(record: dict[str, Any], run_dir: str) -> bool:
        key = _key(record)
        return key is not None and key in collected

    return _dropped(Path(out_dir), roots, comes_back)


def _dropped(
    out_dir: Path,
    roots: Iterable[str | Path],
    comes_back: Callable[[dict[str, Any], str], bool],
) -> tuple[list[str], list[str]]:
    """The recorded cells that exist outside every root, and those gone that do not come back.

    The rule of :func:`dropped_cells` and :func:`dropped_at_launch`; ``comes_back(record,
    run_dir)`` says whether a cell whose run directory exists nowhere is written again.
    """
    within = [_root_dir(Path(root)) for root in roots]
    outside, missing = [], []
    for record in _recorded_cells(out_dir / CELLS_FILE):
        run_dir = record.get("run_dir")
        if not isinstance(run_dir, str) or not run_dir:
            continue  # a hand-made record without a place: nothing to compare
        found = _find_run_dir(run_dir, out_dir)
        if found is None:
            if not comes_back(record, run_dir):
                missing.append(run_dir)
        elif not any(found.is_relative_to(root) for root in within):
            outside.append(run_dir)
    return outside, missing


def dropped_at_launch(
    out_dir: str | Path, sweep_dir: str | Path, planned: Iterable[str | Path]
) -> tuple[list[str], list[str]]:
    """The cells of a results directory that a sweep's end would drop, known before it trains.

    A sweep's end collects its sweep directory alone into ``results_dir``
    (:class:`bench.run.callbacks.CollectResults`), so :func:`dropped_cells` would refuse it
    there, after the training. This is the same rule with the planned cells standing for the
    results: a recorded cell is dropped when its run directory exists outside the sweep
    directory, or exists nowhere and is not one of the planned run directories.

    Args:
        out_dir: The sweep's ``results_dir``.
        sweep_dir: ``hydra.sweep.dir``, the root its end collects.
        planned: Every planned cell's run directory.

    Returns:
        The recorded run directories of the dropped cells: outside, and gone.

    Raises:
        CollectError: If ``cells.json`` exists but cannot be read as a list of cells.
    """
    out_dir = Path(out_dir)
    will_exist = {Path(run_dir).resolve() for run_dir in planned}

    def comes_back(record: dict[str, Any], run_dir: str) -> bool:
        try:
            return any(place.resolve() in will_exist for place in _places(run_dir, out_dir))
        except (OSError, ValueError):  # a hand-edited name too long, or with a NUL
            return False

    return _dropped(out_dir, [sweep_dir], comes_back)


def launch_refusal(
    out_dir: str | Path, sweep_dir: str | Path, outside: list[str], missing: list[str]
) -> str:
    """Why a sweep is refused before training (:func:`dropped_at_launch`), and the ways out."""
    found = []
    if outside:
        found.append(
            f"{len(outside)} from run directories outside {sweep_dir} (e.g. "
            f"{_shown(outside[0], out_dir)})"
        )
    if missing:
        found.append(
            f"{len(missing)} whose run directories no longer exist and that this sweep does "
            f"not plan (e.g. {missing[0]})"
        )
    return (
        f"{out_dir} holds {len(outside) + len(missing)} cells that this sweep's end would drop "
        f"from its tables, since it collects {sweep_dir} alone: {'; '.join(found)}; to keep "
        f"them, write this sweep's tables elsewhere (results_dir=...) and collect both sweeps "
        f"into one afterwards (python -m bench.results.collect <their runs> {sweep_dir} -o "
        f"{out_dir}), or run this sweep into the runs directory they come from "
        f"(hydra.sweep.dir=...); nothing trained"
    )


def _places(run_dir: str, out_dir: Path) -> list[Path]:
    """Where a recorded run directory may be, in the order it is looked for.

    As written when absolute; else below the working directory, the results directory or
    one of its parents (the checkout a committed experiment lives in).
    """
    path = Path(run_dir)
    if path.is_absolute():
        return [path]
    folder = out_dir.resolve()
    return [base / path for base in [Path.cwd(), folder, *folder.parents]]


def _recorded_cells(path: Path) -> list[dict[str, Any]]:
    """The cell records of a ``cells.json`` (none when there is no such file)."""
    if not path.exists():
        return []
    unreadable = (
        f"which cells {path.parent} holds cannot be told, so collecting into it could drop "
        f"them; restore the file, collect into another results directory, or replace its "
        f"tables on purpose with --replace; nothing written to {path.parent}"
    )
    try:
        records = json.loads(read_text(path))
    except (OSError, ValueError) as err:  # DataError and JSONDecodeError are ValueErrors
        raise CollectError(f"{path} cannot be read ({err}): {unreadable}") from None
    if not isinstance(records, list):
        raise CollectError(f"{path} is not a list of cells: {unreadable}")
    return [record for record in records if isinstance(record, dict)]


def _root_dir(root: Path) -> Path:
    """The folder a root collects, resolved: a result file stands for its run directory."""
    root = root.resolve()
    return root.parent if root.is_file() else root


def _find_run_dir(run_dir: str, out_dir: Path) -> Path | None:
    """A recorded run directory on disk, resolved; None when it exists nowhere it could be."""
    for place in _places(run_dir, out_dir):
        try:
            if place.exists():
                return place.resolve()
        except (OSError, ValueError):  # a hand-edited name too long, or with a NUL
            return None
    return None


def _key(record: dict[str, Any]) -> tuple[Any, ...] | None:
    """The cell's identity (:func:`cell_key`), or None for a record without a usable cell."""
    if not isinstance(record.get("cell"), dict):
        return None
    key = cell_key(record)
    try:
        hash(key)
    except TypeError:  # a hand-edited cell with a list or object for a coordinate
        return None
    return key


def _refuse_dropping(
    out_dir: str | Path, roots: list[str | Path], results: list[dict[str, Any]]
) -> None:
    """Raise :class:`CollectError` when publishing ``results`` would drop recorded cells."""
    outside, missing = dropped_cells(out_dir, roots, results)
    if not outside and not missing:
        return
    found, fixes = [], []
    if outside:
        found.append(
            f"{len(outside)} collected from run directories outside "
            f"{', '.join(map(str, roots))} (e.g. {_shown(outside[0], out_dir)})"
        )
        old = _old_root(outside, out_dir, roots)
        command = " ".join(
            [
                "python -m bench.results.collect",
                shlex.quote(old) if old is not None else "<their run or sweep directory>",
                *(shlex.quote(str(root)) for root in roots),
                "-o",
                shlex.quote(str(out_dir)),
            ]
        )
        fixes.append(f"collect all roots together ({command})")
    if missing:
        found.append(
            f"{len(missing)} whose run directories no longer exist and that are not "
            f"collected again (e.g. {missing[0]})"
        )
        fixes.append("restore their run directories")
    fixes.append("collect into another results directory (results_dir=... for a sweep)")
    raise CollectError(
        f"{out_dir} holds {len(outside) + len(missing)} cells that this collect would drop "
        f"from its tables: {'; '.join(found)}; to keep them, {', or '.join(fixes)}; to "
        f"replace its tables on purpose, collect with --replace; nothing written to {out_dir}"
    )


def _old_root(run_dirs: list[str], out_dir: str | Path, roots: list[str | Path]) -> str | None:
    """The folder that holds the given run directories, to name in the suggested command.

    Their common folder, or None when collecting it would also read the results directory,
    the working directory or a root collected now (a folder too wide to suggest).
    """
    out_dir = Path(out_dir)
    found = [str(p) for d in run_dirs if (p := _find_run_dir(d, out_dir)) is not None]
    if not found:  # removed meanwhile
        return None
    common = Path(os.path.commonpath(found))
    wide = [out_dir.resolve(), Path.cwd(), *(_root_dir(Path(root)) for root in roots)]
    if any(place.is_relative_to(common) for place in wide):
        return None
    return _relative(common)


def _shown(run_dir: str, out_dir: str | Path) -> str:
    """A recorded run directory as found now, relative to the working directory if below it."""
    found = _find_run_dir(run_dir, Path(out_dir))
    return _relative(found) if found is not None else run_dir


def _relative(path: Path) -> str:
    return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)


@contextlib.contextmanager
def results_lock(out_dir: str | Path) -> Iterator[None]:
    """Hold the lock of a results directory: one collect (and its report) at a time.

    Two sweeps sharing a results directory, or many launcher jobs, collect in turn; each
    reads the run directories under the lock, so the last one to publish also read last,
    and the tables never go back to an earlier view. The lock is re-entrant within a
    process (a sweep's end holds it while collecting and building the report). A results
    directory this call had to create is removed again if the block fails: a collect that
    writes nothing leaves nothing behind.

    Args:
        out_dir: The results directory (created if missing).

    Yields:
        Nothing; the lock is held inside the ``with`` block.
    """
    folder = Path(out_dir).resolve()
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / COLLECT_LOCK), is_singleton=True)
    with lock:
        try:
            yield
        except BaseException:
            if created:
                Path(lock.lock_file).unlink(missing_ok=True)
                with contextlib.suppress(OSError):  # not empty: another writer came meanwhile
                    folder.rmdir()
            raise


def collect(
    roots: Iterable[str | Path], out_dir: str | Path | None, *, replace: bool = False
) -> pd.DataFrame:
    """Read results under ``roots``, report problems, optionally write the outputs.

    The outputs (``results.csv``, ``results.parquet``, ``history.csv``, ``cells.json``,
    ``launches.jsonl``) are built in memory and published together: all or none. They hold
    the cells under ``roots`` only, so a results directory that already holds other cells
    (another sweep's, listed in its ``cells.json``) is refused unless ``replace`` is set:
    collect every root into it together instead (:func:`dropped_cells`).

    Args:
        roots: Run or sweep directories (or result files).
        out_dir: The results directory to write, or None to only return the table.
        replace: Write ``out_dir`` even when that drops cells it holds now (their run
            directories lie outside ``roots``, or no longer exist): its tables then hold the
            cells under ``roots`` alone. Off by default.

    Returns:
        The tidy table.

    Raises:
        CollectError: If a root does not exist or holds no result file, if none of the
            result files passes its check, or (without ``replace``) if the outputs would
            drop cells that ``out_dir`` holds now; ``out_dir`` is left as it was.
    """
    if out_dir is None:
        return _collect(list(roots), None)
    with results_lock(out_dir):
        return _collect(list(roots), out_dir, replace=replace)


def _collect(
    roots: list[str | Path], out_dir: str | Path | None, *, replace: bool = False
) -> pd.DataFrame:
    """:func:`collect`, with the results directory's lock held when it is written."""
    unchanged = f"nothing written to {out_dir}" if out_dir is not None else "nothing collected"
    missing = [f"{root} does not exist" for root in roots if not Path(root).exists()]
    missing += [
        f"{root} holds no {RESULT_FILE}"
        for root in roots
        if Path(root).exists() and not find_result_files([root])
    ]
    if missing or not roots:
        raise CollectError("; ".join([*missing, unchanged] if roots else ["no roots", unchanged]))
    results, problems = read_results(roots)
    results, predictions, refused = verified(results)
    problems += refused
    for problem in problems:
        log.warning(problem)
        print(f"warning: {problem}")
    if not results:
        count = len(find_result_files(roots))
        raise CollectError(
            f"none of the {count} result files under {', '.join(map(str, roots))} could be "
            f"read (warnings above); {unchanged}"
        )
    if out_dir is not None and not replace:
        _refuse_dropping(out_dir, roots, results)
    table = tidy(results)
    if out_dir is not None:
        files = {**record_files(results, roots), **table_files(table)}
        if predictions:
            files[PREDICTIONS_FILE] = predictions_bytes(predictions_table(predictions))
        trials = trials_table(results)
        if not trials.empty:
            files[TRIALS_FILE] = trials_bytes(trials)
        command = last_launch(read_launch_log([*roots, out_dir])).get("command") or ""
        files.update(
            frame_files(
                *from_results(
                    table,
                    predictions_table(predictions) if predictions else pd.DataFrame(),
                    provenance_records(results),
                    str(command),
                )
            )
        )
        publish(out_dir, files)
        path = Path(out_dir) / "results.csv"
        print(f"wrote {path} ({len(results)} cells, {len(table)} rows) and history, cells")
    return table


def write_frames(folder: str | Path) -> list[Path]:
    """(Re)write ``scores`` and ``comparisons`` beside a results directory's table.

    For results collected before the frames existed, or after an experiment file's margins
    or studies changed (they change no cell, only the verdicts).
    """
    folder = Path(folder)
    cells_file = folder / CELLS_FILE
    cells = json.loads(read_text(cells_file)) if cells_file.is_file() else []
    command = str(last_launch(read_launch_log([folder])).get("command") or "")
    found = from_results(read_table(folder), read_predictions(folder), cells, command)
    return publish(folder, frame_files(*found))


def print_summary(table: pd.DataFrame) -> None:
    """Print the wide summary and any failed cells."""
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        wide = summary(table)
        print(wide.round(4).to_string() if not wide.empty else "no successful cells")
        keys = [*CELL_COLUMNS, *AXIS_COLUMNS]
        cells = table.drop_duplicates(subset=[k for k in keys if k in table])
        counts = cells["status"].value_counts()
        print(f"{len(cells)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        failed = cells[cells["status"] != "ok"]
        sized = bool(sized_settings(cells))
        for _, row in failed.iterrows():
            where = "/".join(str(row[c]) for c in CELL_COLUMNS)
            size = f" (train_size={row['train_size']})" if sized else ""
            print(f"{row['status']}: {where}{size}: {row['reason']}")


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.results.collect <dirs...> [-o OUT_DIR] [--replace]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.results.collect", description=__doc__)
    parser.add_argument("roots", nargs="+", help="run or sweep directories holding result.json")
    parser.add_argument(
        "--frames",
        action="store_true",
        help="the roots are results directories: rewrite their scores and comparisons only",
    )
    parser.add_argument("-o", "--out", default=None, help="where to write results.csv/.parquet")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="write OUT even when that drops cells it holds now (collected from other roots, "
        "or whose run directories no longer exist); without it such a collect is refused",
    )
    args = parser.parse_args(argv)
    if args.frames:
        for root in args.roots:
            for path in write_frames(root):
                print(f"wrote {path}")
        return
    try:
        table = collect(args.roots, args.out, replace=args.replace)
    except CollectError as err:  # a bad argument: nothing was written
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:
        print(f"error: cannot write the results to {args.out}: {err}", file=sys.stderr)
        sys.exit(1)
    print_summary(table)


if __name__ == "__main__":
    main()
