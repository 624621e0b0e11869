"""Result files → one tidy table (one row per cell × split × metric).

``python -m bench.results.collect runs/quick -o results/quick`` writes ``results.csv`` and
``results.parquet`` (plus ``history.csv``, ``cells.json`` and ``launches.jsonl``, see
:mod:`bench.results.run_records`) and prints a wide summary. Unreadable result files are reported,
never fatal; when one cell has several results (the same cell found under two roots),
the latest is kept and the others are reported.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock

from bench.atomic import FILE_MODE, atomic_write, atomic_write_json
from bench.cell import CELL_COLUMNS, RESULT_FILE
from bench.clock import utc_now
from bench.results.run_records import (
    HISTORY_COLUMNS,
    history_table,
    provenance_records,
    read_launch_log,
)

log = logging.getLogger(__name__)

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
]

_NUMERIC_COLUMNS = ("seed", "value", "baseline", "best_epoch", "trainable_params", "train_time_s")


def find_result_files(roots: Iterable[str | Path]) -> list[Path]:
    """All ``result.json`` files under the given directories (or the files themselves)."""
    found: list[Path] = []
    for root in map(Path, roots):
        if root.is_file():
            found.append(root)
        else:
            found.extend(sorted(root.rglob(RESULT_FILE)))
    return found


def read_results(roots: Iterable[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """Read every result file; return the results and one message per unreadable file."""
    results, problems = [], []
    for path in find_result_files(roots):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data.get("cell"), dict):
                raise ValueError("no 'cell' entry")
        except (OSError, ValueError, AttributeError) as err:
            problems.append(f"{path}: unreadable result ({type(err).__name__}: {err})")
            continue
        data["run_dir"] = os.path.relpath(path.parent)  # relative to the working directory
        data.setdefault("finished_at", utc_now(path.stat().st_mtime))  # results before schema 2
        results.append(data)
    return _latest_per_cell(results, problems), problems


def cell_key(result: dict[str, Any]) -> tuple[Any, ...]:
    """The identity of a cell: its coordinates (task, encoder, head, layers, freeze, seed)."""
    return tuple(result["cell"].get(k) for k in CELL_COLUMNS)


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


def tidy(results: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per cell × split × metric at the best epoch (failed cells: one row, no value)."""
    rows = []
    for res in results:
        base = {k: res["cell"].get(k) for k in CELL_COLUMNS}
        base.update(
            status=res.get("status"),
            main_metric=res.get("main_metric"),
            reason=res.get("reason"),
            best_epoch=(res.get("best") or {}).get("epoch"),
            trainable_params=(res.get("params") or {}).get("trainable"),
            train_time_s=res.get("train_time_s"),
            run_dir=res.get("run_dir"),
        )
        best = (res.get("best") or {}).get("metrics") or {}
        if res.get("status") != "ok" or not best:
            rows.append({**base, "split": None, "metric": None, "value": None, "baseline": None})
            continue
        for split, metrics in best.items():
            baseline = ((res.get("baseline") or {}).get(split) or {}).get("metrics") or {}
            for metric, value in metrics.items():
                rows.append(
                    {
                        **base,
                        "split": split,
                        "metric": metric,
                        "value": value,
                        "baseline": baseline.get(metric),
                    }
                )
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Wide view: one row per task × encoder × head × freeze, one column per dev metric (mean)."""
    ok = table[(table["status"] == "ok") & (table["split"] == "dev")]
    if ok.empty:
        return pd.DataFrame()
    keys = ["task", "encoder", "head_label", "freeze_label"]
    wide = ok.pivot_table(index=keys, columns="metric", values="value", aggfunc="mean")
    main = ok.drop_duplicates(subset=[*keys, "seed"])  # one row per run for run-level columns
    base = ok.pivot_table(index=keys, columns="metric", values="baseline", aggfunc="mean")
    wide = wide.join(base.rename(columns=lambda m: f"{m} (majority)"))
    wide["seeds"] = main.groupby(keys)["seed"].nunique()
    wide["train_s"] = main.groupby(keys)["train_time_s"].mean()
    return wide


def write_table(table: pd.DataFrame, out_dir: str | Path) -> Path:
    """Write the tidy table as ``<out_dir>/results.csv`` and ``results.parquet``, atomically.

    Returns:
        The CSV path.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.csv"
    atomic_write(path, lambda handle: table.to_csv(handle, index=False))
    fd, tmp = tempfile.mkstemp(prefix=".results.parquet.", suffix=".tmp", dir=out_dir)
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    try:
        table.astype({"layers": "str", "reason": "str", "seed": "Int64"}).to_parquet(
            tmp, index=False
        )
        os.replace(tmp, out_dir / "results.parquet")
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


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
        parquet = path / "results.parquet"
        path = parquet if parquet.exists() else path / "results.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no results table at {path}")
    if path.suffix == ".parquet":
        table = pd.read_parquet(path)
    else:
        text = [c for c in TABLE_COLUMNS if c not in _NUMERIC_COLUMNS]
        table = pd.read_csv(path, dtype={**dict.fromkeys(text, "str"), "seed": "Int64"})
    return table


def write_records(
    results: list[dict[str, Any]], roots: Iterable[str | Path], out_dir: str | Path
) -> None:
    """Write ``history.csv``, ``cells.json`` and ``launches.jsonl`` beside the table."""
    out_dir = Path(out_dir)
    history = history_table(results)
    atomic_write(out_dir / "history.csv", lambda handle: history.to_csv(handle, index=False))
    atomic_write_json(out_dir / "cells.json", provenance_records(results))
    lines = "".join(json.dumps(r) + "\n" for r in read_launch_log(roots))
    atomic_write(out_dir / "launches.jsonl", lambda handle: handle.write(lines))


def read_history(out_dir: str | Path) -> pd.DataFrame:
    """Read ``history.csv`` of a results directory (empty table if there is none)."""
    path = Path(out_dir) / "history.csv"
    if not path.is_file():
        return pd.DataFrame(columns=HISTORY_COLUMNS)
    text = [c for c in CELL_COLUMNS if c != "seed"] + ["split", "metric"]
    return pd.read_csv(path, dtype={**dict.fromkeys(text, "str"), "seed": "Int64"})


def collect(roots: Iterable[str | Path], out_dir: str | Path | None) -> pd.DataFrame:
    """Read results under ``roots``, report problems, optionally write the table, return it."""
    roots = list(roots)
    results, problems = read_results(roots)
    for problem in problems:
        log.warning(problem)
        print(f"warning: {problem}")
    table = tidy(results)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        # One writer at a time per results directory (two sweeps, or many launcher jobs,
        # sharing it): the CSV, Parquet and side files always come from the same collect.
        with FileLock(Path(out_dir) / ".collect.lock"):
            path = write_table(table, out_dir)
            write_records(results, roots, out_dir)
        print(f"wrote {path} ({len(results)} cells, {len(table)} rows) and history, cells")
    return table


def print_summary(table: pd.DataFrame) -> None:
    """Print the wide summary and any failed cells."""
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        wide = summary(table)
        print(wide.round(4).to_string() if not wide.empty else "no successful cells")
        cells = table.drop_duplicates(subset=CELL_COLUMNS)
        counts = cells["status"].value_counts()
        print(f"{len(cells)} cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        failed = cells[cells["status"] != "ok"]
        for _, row in failed.iterrows():
            print(
                f"{row['status']}: {'/'.join(str(row[c]) for c in CELL_COLUMNS)}: {row['reason']}"
            )


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.results.collect <dirs...> [-o OUT_DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.results.collect", description=__doc__)
    parser.add_argument("roots", nargs="+", help="run or sweep directories holding result.json")
    parser.add_argument("-o", "--out", default=None, help="where to write results.csv/.parquet")
    args = parser.parse_args(argv)
    print_summary(collect(args.roots, args.out))


if __name__ == "__main__":
    main()
