"""Result files → one tidy table (one row per cell × split × metric), and its side files.

``python -m bench.results.collect runs/quick -o results/quick``; see docs/usage.md and
docs/faults.md for what is skipped, refused (exit 2) and written.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
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
from bench.results import predictions as stored
from bench.results import run_records as records
from bench.results.curves import sized_settings
from bench.results.frames import frame_files, from_results
from bench.results.publish import publish
from bench.results.rescore import verified
from bench.results.result_file import load_result
from bench.results.stats import MERGE, run_key, setting_name
from bench.results.trials import TRIALS_FILE, trials_bytes, trials_table

COLLECT_LOCK = ".collect.lock"
#: Which cells a results directory's tables hold, and from which run directories.
CELLS_FILE = "cells.json"
#: The files a results directory holds its tidy table in (:func:`read_table` prefers the first).
TABLE_FILES = ("results.parquet", "results.csv")
_RUN_COLUMNS = (
    "status main_metric split metric value baseline best_epoch trainable_params train_time_s "
    "reason run_dir best_constant selection trial selection_score git_commit summary_token"
)
TABLE_COLUMNS = [*CELL_COLUMNS, *_RUN_COLUMNS.split(), *AXIS_COLUMNS]
#: Whether early stopping ended the run (``trainer.early_stopping``): a column of the tables
#: of sweeps that used it, absent from the others (their bytes are unchanged).
STOPPED_EARLY = "stopped_early"
_TAIL = ["split", "metric", "value", "baseline", "best_constant"]  # a row's own columns
_NUMBERS = {"seed", *AXIS_COLUMNS, "value", "baseline", "best_epoch", "trainable_params"}
_NUMBERS |= {"train_time_s", "best_constant", "trial", "selection_score"}
_INTEGERS = {"seed", *AXIS_COLUMNS}  # the columns a table is keyed on, as integers


def find_result_files(roots: Iterable[str | Path]) -> list[Path]:
    """The ``result.json`` files under ``roots`` (or the files given), none in ``superseded/``.

    A file under two roots (``runs/grid runs/grid/sst2``) is listed once, as first found.
    """
    found: dict[str, Path] = {}
    for root in map(Path, roots):
        below = (p for p in root.rglob("*") if p.name == RESULT_FILE)  # "*" keeps broken links
        kept = (p for p in below if SUPERSEDED_DIR not in p.relative_to(root).parts)
        for path in [root] if root.is_file() else sorted(p for p in kept if not p.is_dir()):
            found.setdefault(os.path.realpath(path), path)
    return list(found.values())


def read_results(roots: Iterable[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """The checked results under ``roots`` (the latest per cell), and the problems met.

    A cell is its run directory's identity (:func:`bench.results.stats.run_key`): two results
    of one label, seed and axes are one cell to every table, so only the later is kept.
    """
    results, problems = [], []
    for path in find_result_files(roots):
        try:
            data, warnings = load_result(path)
            data["run_dir"] = _stored(os.path.relpath(path.parent), str)
            if data["run_dir"] is None:  # a non-UTF-8 folder name cannot go into a CSV
                raise DataError(f"{path}: skipped: its folder name is not UTF-8 text")
            if data.get("finished_at") is None:  # results written before the field existed
                data["finished_at"] = utc_now(path.stat().st_mtime)
        except DataError as err:
            problems.append(str(err))
        except OSError as err:  # removed while we read it
            problems.append(f"{path}: skipped: unreadable result ({type(err).__name__}: {err})")
        else:
            problems += warnings
            results.append(data)
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}  # one per run directory's identity
    for res in sorted(results, key=lambda r: str(r["finished_at"])):
        if (key := run_key(res["cell"])) in latest:
            problems.append(
                f"{latest[key]['run_dir']}: duplicate of cell {setting_name(res['cell'], True)}; "
                f"kept the later result in {res['run_dir']}"
            )
        latest[key] = res
    return list(latest.values()), problems


def cell_key(result: dict[str, Any]) -> tuple[Any, ...]:
    """The identity of a cell: its coordinates and optional axes (training size, order seed)."""
    return tuple(result["cell"].get(k) for k in [*CELL_COLUMNS, *AXIS_COLUMNS])


def _dig(node: Any, *keys: Any, default: Any = None) -> Any:
    """``node[k1][k2]...``, or ``default`` where a level is missing or not an object."""
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def _stored(value: Any, kind: type | tuple[type, ...]) -> Any:
    """``value`` if it is a ``kind`` a table can hold (no bool as a number, UTF-8 text)."""
    if isinstance(value, bool) or not isinstance(value, kind):
        return None
    try:
        if isinstance(value, str):
            value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: JSON allows it, Parquet does not
        return None
    return value


def tidy(results: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per cell × split × metric at the best epoch (failed cells: one row, no value)."""
    rows = []
    for res in results:
        main = str(res.get("main_metric"))
        base = {k: res["cell"].get(k) for k in [*CELL_COLUMNS, *AXIS_COLUMNS]}
        base.update(
            status=res.get("status"),
            main_metric=res.get("main_metric"),
            reason=res.get("reason"),
            best_epoch=_dig(res, "best", "epoch"),
            trainable_params=_dig(res, "params", "trainable"),
            train_time_s=res.get("train_time_s"),
            run_dir=res.get("run_dir"),
            # Results made before the evaluation protocol chose their epoch on dev.
            selection=_stored(_dig(res, "selection", "mode", default="dev"), str),
            trial=_stored(_dig(res, "search", "selected"), (int, float)),
            selection_score=_stored(_dig(res, "selection", "metrics", main), (int, float)),
            git_commit=_stored(_dig(res, "git", "commit"), str),
            # The token one-token heads read: results before decoders were all first-token.
            summary_token=_stored(_dig(res, "encoder_info", "summary", default="first"), str),
        )
        stopped = _dig(res, "selection", "stopped_early")  # early stopping on: True or False
        if isinstance(stopped, bool):
            base[STOPPED_EARLY] = stopped
        best = _dig(res, "best", "metrics") or {}
        found = [(s, m, v) for s, values in best.items() for m, v in values.items()]
        for split, metric, value in found if res.get("status") == "ok" and best else [(None,) * 3]:
            extra = [
                _dig(res, key, split, "metrics", metric) for key in ("baseline", "best_constant")
            ]
            rows.append({**base, **dict(zip(_TAIL, [split, metric, value, *extra], strict=True))})
    stopping = any(STOPPED_EARLY in row for row in rows)  # a column only where it was used
    return pd.DataFrame(rows, columns=[*TABLE_COLUMNS, *([STOPPED_EARLY] if stopping else [])])


def table_files(table: pd.DataFrame) -> dict[str, bytes]:
    """The tidy table as the contents of ``results.csv`` and ``results.parquet``."""
    parquet = io.BytesIO()
    typed = table.astype({"layers": "str", "reason": "str", "seed": "Int64"})
    typed.to_parquet(parquet, index=False)
    csv = table.to_csv(index=False).encode("utf-8")
    return {"results.csv": csv, "results.parquet": parquet.getvalue()}


def has_table(folder: str | Path) -> bool:
    """Whether ``folder`` holds a tidy table (``results.parquet`` or ``results.csv``)."""
    return any((Path(folder) / name).is_file() for name in TABLE_FILES)


def read_table(path: str | Path) -> pd.DataFrame:
    """A tidy table file, or the one of a directory (Parquet preferred); text as text, seed Int64.

    Raises:
        FileNotFoundError: If there is no table at ``path``.
        DataError: If the file cannot be read as a table, or a number column of a CSV holds
            text (a repeated header row: two tables joined), naming the file and row.
    """
    path = Path(path)
    if path.is_dir():
        parquet, csv = (path / name for name in TABLE_FILES)
        path = parquet if parquet.exists() else csv
    if not path.is_file():
        raise FileNotFoundError(f"no results table at {path}")
    text = dict.fromkeys([c for c in TABLE_COLUMNS if c not in _NUMBERS], "str")
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        table = pd.read_csv(path, dtype=text)
    except ValueError as err:  # not UTF-8, a row of too many fields, not Parquet: named by pandas
        raise DataError(f"{path}: not a results table ({' '.join(str(err).split())})") from None
    if not isinstance(table.index, pd.RangeIndex):  # pandas made the extra field an index
        raise DataError(f"{path}: row 2 holds more fields than the header ({len(table.columns)})")
    for column in [c for c in _NUMBERS if c in table]:
        number, integer = pd.to_numeric(table[column], errors="coerce"), column in _INTEGERS
        whole = (number % 1 == 0) & (number.abs() < 2**63)  # int64, as the tables store them
        wrong = table[column].notna() & (number.isna() | integer & ~whole)
        if wrong.any():  # a row the reader took as text: name it (its number counts the header)
            row, value = wrong.idxmax() + 2, table.at[wrong.idxmax(), column]
            if value in {*TABLE_COLUMNS, *table.columns}:
                raise DataError(f"{path}: row {row} repeats the header (tables joined?); {MERGE}")
            kind = "a 64-bit integer" if integer else "a number"
            raise DataError(f"{path}: row {row}: {column}={value!r} is not {kind}")
        table[column] = number
    return table.astype({"seed": "Int64"}) if "seed" in table else table


def record_files(results: list[dict[str, Any]], roots: Iterable[str | Path]) -> dict[str, bytes]:
    """File name → content of ``history.csv``, ``cells.json`` and ``launches.jsonl``."""
    cells = json.dumps(records.provenance_records(results), indent=2, allow_nan=True, default=str)
    lines = "".join(json.dumps(r, default=str) + "\n" for r in records.read_launch_log(roots))
    return {
        "history.csv": records.history_table(results).to_csv(index=False).encode("utf-8"),
        CELLS_FILE: (cells + "\n").encode("utf-8"),
        "launches.jsonl": lines.encode("utf-8"),
    }


def read_history(out_dir: str | Path) -> pd.DataFrame:
    """``history.csv`` of a results directory (an empty table when there is none)."""
    path = Path(out_dir) / "history.csv"
    if not path.is_file():
        return pd.DataFrame(columns=records.HISTORY_COLUMNS)
    text = dict.fromkeys([c for c in CELL_COLUMNS if c != "seed"] + ["split", "metric"], "str")
    table = pd.read_csv(path, dtype={**text, **dict.fromkeys(["seed", *AXIS_COLUMNS], "Int64")})
    for column in AXIS_COLUMNS:  # written before the optional axes
        if column not in table:
            table[column] = pd.Series(pd.NA, index=table.index, dtype="Int64")
    return table


def _found(run_dir: str, out_dir: Path, there: Callable[[Path], bool] = Path.exists) -> Path | None:
    """A run directory's first place ``there`` (under the cwd, out_dir or its parents), resolved."""
    folder = out_dir.resolve()
    places = dict.fromkeys(base / run_dir for base in [Path.cwd(), folder, *folder.parents])
    with contextlib.suppress(OSError, ValueError):  # a hand-edited name too long, or with a NUL
        return next((p.resolve() for p in places if there(p)), None)
    return None


def _root_dir(root: str | Path) -> Path:
    """The folder a root collects, resolved: a result file stands for its run directory."""
    root = Path(root).resolve()
    return root.parent if root.is_file() else root


def _relative(path: Path) -> str:
    return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)


def _known(record: dict[str, Any], keys: set[tuple[Any, ...]]) -> bool:
    """Whether a recorded cell is one of ``keys`` (a hand-edited one without a usable cell: no)."""
    try:
        return cell_key(record) in keys
    except (AttributeError, KeyError, TypeError):  # no cell, or a list for a coordinate
        return False


def _dropped(
    out_dir: str | Path, roots: Iterable[str | Path], comes_back: Callable[[dict[str, Any]], bool]
) -> tuple[list[str], list[str]]:
    """Recorded run directories outside every root, and gone ones whose cell not ``comes_back``."""
    out_dir, within = Path(out_dir), [_root_dir(root) for root in roots]
    path, recorded = out_dir / CELLS_FILE, []
    if path.exists():
        fix = (
            f"which cells {out_dir} holds cannot be told, so collecting into it could drop "
            f"them; restore the file, collect into another results directory, or replace its "
            f"tables on purpose with --replace; nothing written to {out_dir}"
        )
        try:
            recorded = json.loads(read_text(path))
        except (OSError, ValueError) as err:  # DataError and JSONDecodeError are ValueErrors
            raise CollectError(f"{path} cannot be read ({err}): {fix}") from None
        if not isinstance(recorded, list):
            raise CollectError(f"{path} is not a list of cells: {fix}")
    outside, missing = [], []
    for record in recorded:
        run_dir = record.get("run_dir") if isinstance(record, dict) else None
        if not isinstance(run_dir, str) or not run_dir:
            continue  # a hand-made record without a place: nothing to compare
        found = _found(run_dir, out_dir)
        if found is None and not comes_back(record):
            missing.append(run_dir)
        elif found is not None and not any(found.is_relative_to(root) for root in within):
            outside.append(run_dir)
    return outside, missing


def dropped_at_launch(
    out_dir: str | Path, sweep_dir: str | Path, planned: Iterable[str | Path]
) -> tuple[list[str], list[str]]:
    """The run directories (outside, gone) of ``out_dir``'s cells a sweep's end would drop.

    Raises:
        CollectError: If ``cells.json`` cannot be read as a list of cells.
    """
    will_exist = {Path(run_dir).resolve() for run_dir in planned}

    def again(record: dict[str, Any]) -> bool:
        there = _found(record["run_dir"], Path(out_dir), lambda p: p.resolve() in will_exist)
        return there is not None

    return _dropped(out_dir, [sweep_dir], again)


def launch_refusal(
    out_dir: str | Path, sweep_dir: str | Path, outside: list[str], missing: list[str]
) -> str:
    """Why a sweep is refused before training (:func:`dropped_at_launch`), and the ways out."""
    return _refusal(out_dir, [sweep_dir], outside, missing, sweep=True)


def _refusal(
    out_dir: str | Path,
    roots: list[str | Path],
    outside: list[str],
    missing: list[str],
    sweep: bool,
) -> str:
    """Why collecting ``roots`` into ``out_dir`` (``sweep``: at a sweep's end) is refused."""
    where, found, fixes = ", ".join(map(str, roots)), [], []
    if outside:
        example = _relative(_found(outside[0], Path(out_dir)) or Path(outside[0]))
        by = "" if sweep else "collected "
        found.append(f"{len(outside)} {by}from run directories outside {where} (e.g. {example})")
        # name the folder that holds them, unless collecting it would read too much
        held = [str(p) for d in outside if (p := _found(d, Path(out_dir))) is not None]
        common = Path(os.path.commonpath(held)) if held else None
        wide = [Path(out_dir).resolve(), Path.cwd(), *map(_root_dir, roots)]
        old = "<their run or sweep directory>"
        if common is not None and not any(place.is_relative_to(common) for place in wide):
            old = shlex.quote(_relative(common))
        now = shlex.join([*map(str, roots), "-o", str(out_dir)])
        fixes.append(f"collect all roots together (python -m bench.results.collect {old} {now})")
    if missing:
        gone = "that this sweep does not plan" if sweep else "that are not collected again"
        found.append(
            f"{len(missing)} whose run directories no longer exist and {gone} (e.g. {missing[0]})"
        )
        fixes.append("restore their run directories")
    fixes.append("collect into another results directory (results_dir=... for a sweep)")
    if sweep:
        drop = f"this sweep's end would drop from its tables, since it collects {where} alone"
        fix = (
            f"write this sweep's tables elsewhere (results_dir=...) and collect both sweeps into "
            f"one afterwards (python -m bench.results.collect <their runs> {where} -o {out_dir}), "
            f"or run this sweep into the runs directory they come from (hydra.sweep.dir=...); "
            f"nothing trained"
        )
    else:
        drop = "this collect would drop from its tables"
        fix = f"{', or '.join(fixes)}; to replace its tables on purpose, collect with --replace; "
        fix += f"nothing written to {out_dir}"
    count = len(outside) + len(missing)
    return f"{out_dir} holds {count} cells that {drop}: {'; '.join(found)}; to keep them, {fix}"


@contextlib.contextmanager
def results_lock(out_dir: str | Path) -> Iterator[None]:
    """Hold ``out_dir``'s lock (re-entrant; a directory it created goes if the block fails)."""
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
    """Read results under ``roots``, print problems, publish the outputs together (None: don't).

    Raises:
        CollectError: If a root is missing or empty, no result file passes its check, or
            (without ``replace``) ``out_dir``'s cells would be dropped.
    """
    roots = list(roots)
    with results_lock(out_dir) if out_dir is not None else contextlib.nullcontext():
        unchanged = f"nothing written to {out_dir}" if out_dir is not None else "nothing collected"
        bad = [
            f"{root} holds no {RESULT_FILE}" if Path(root).exists() else f"{root} does not exist"
            for root in roots
            if not find_result_files([root])
        ]
        if bad or not roots:
            raise CollectError("; ".join([*(bad or ["no roots"]), unchanged]))
        results, problems = read_results(roots)
        results, predictions, refused = verified(results)
        for problem in problems + refused:  # once: on stdout, beside the summary
            print(f"warning: {problem}")
        if not results:
            raise CollectError(
                f"none of the {len(find_result_files(roots))} result files under "
                f"{', '.join(map(str, roots))} could be read (warnings above); {unchanged}"
            )
        if out_dir is not None and not replace:
            keys = {cell_key(res) for res in results}
            outside, missing = _dropped(out_dir, roots, lambda record: _known(record, keys))
            if outside or missing:
                raise CollectError(_refusal(out_dir, roots, outside, missing, sweep=False))
        table = tidy(results)
        if out_dir is None:
            return table
        files = {**record_files(results, roots), **table_files(table)}
        frame = stored.predictions_table(predictions)
        if predictions:
            files[stored.PREDICTIONS_FILE] = stored.predictions_bytes(frame)
        if not (trials := trials_table(results)).empty:
            files[TRIALS_FILE] = trials_bytes(trials)
        cells, command = records.provenance_records(results), _command([*roots, out_dir])
        files |= frame_files(*from_results(table, frame, cells, command))
        publish(out_dir, files)
        path = Path(out_dir) / "results.csv"
        print(f"wrote {path} ({len(results)} cells, {len(table)} rows) and history, cells")
        return table


def write_frames(folder: str | Path) -> list[Path]:
    """(Re)write ``scores`` and ``comparisons`` beside a table; the paths written."""
    folder = Path(folder)
    cells_file = folder / CELLS_FILE
    cells = json.loads(read_text(cells_file)) if cells_file.is_file() else []
    found = from_results(
        read_table(folder), stored.read_predictions(folder), cells, _command([folder])
    )
    return publish(folder, frame_files(*found))


def _command(sweep_dirs: list[str | Path]) -> str:
    """The newest launch's command line (it names the experiment preset), or ""."""
    return str(records.last_launch(records.read_launch_log(sweep_dirs)).get("command") or "")


def print_summary(table: pd.DataFrame) -> None:
    """Print dev means per task × encoder × head × freeze (× size), then the failed cells."""
    ok = table[(table["status"] == "ok") & (table["split"] == "dev")]
    if ok.empty:
        print("no successful cells")
    else:
        keys = ["task", "encoder", "head_label", "freeze_label"]
        keys += ["train_size"] if sized_settings(ok) else []
        wide = ok.pivot_table(index=keys, columns="metric", values="value", aggfunc="mean")
        base = ok.pivot_table(index=keys, columns="metric", values="baseline", aggfunc="mean")
        wide = wide.join(base.rename(columns=lambda m: f"{m} (majority)"))
        runs = ok.drop_duplicates(subset=[*keys, "seed"]).groupby(keys)
        wide["seeds"], wide["train_s"] = runs["seed"].nunique(), runs["train_time_s"].mean()
        with pd.option_context("display.width", 160, "display.max_columns", 20):
            print(wide.round(4).to_string())
    cells = table.drop_duplicates(subset=[k for k in [*CELL_COLUMNS, *AXIS_COLUMNS] if k in table])
    counts = cells["status"].value_counts()
    print(f"{len(cells)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    sized = bool(sized_settings(cells))
    for _, row in cells[cells["status"] != "ok"].iterrows():
        size = f" (train_size={row['train_size']})" if sized else ""
        where = "/".join(str(row[c]) for c in CELL_COLUMNS)
        print(f"{row['status']}: {where}{size}: {row['reason']}")


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.results.collect <dirs...> [-o OUT_DIR] [--replace]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.results.collect", description=__doc__)
    parser.add_argument("roots", nargs="+", help="run or sweep directories holding result.json")
    parser.add_argument("-o", "--out", default=None, help="the results directory to write")
    parser.add_argument("--replace", action="store_true", help="even if that drops cells of OUT")
    parser.add_argument("--frames", action="store_true", help="rewrite ROOTS' scores/comparisons")
    args = parser.parse_args(argv)
    if args.frames:
        print("\n".join(f"wrote {path}" for root in args.roots for path in write_frames(root)))
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
