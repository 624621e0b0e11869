"""collect never loses results: bad paths, malformed or foreign result files, half-written outputs,
another sweep's cells in the results directory.

Real result files (the report tests' synthetic sweep, written as train.run writes them), the
real command line, real output directories; each test compares the outputs byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf
from test_report import write_synthetic_sweep

from bench.cell import RESULT_SCHEMA, SUPERSEDED_DIR
from bench.errors import CollectError, HeadbenchError
from bench.report.inputs import load_inputs
from bench.results.collect import collect, find_result_files, read_results, read_table
from bench.run.callbacks import CollectResults
from conftest import ROOT

OUTPUTS = ("results.csv", "results.parquet", "history.csv", "cells.json", "launches.jsonl")


def _cli(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "bench.results.collect", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != ".collect.lock"}


@pytest.fixture
def collected(tmp_path):
    """A sweep of real result files and its results directory, collected by the CLI."""
    runs, out = tmp_path / "runs", tmp_path / "results"
    results = write_synthetic_sweep(runs)
    proc = _cli(runs, "-o", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(_snapshot(out)) == sorted(OUTPUTS)
    return runs, out, results


# --- case 1: an empty or missing input never replaces existing results ----------------------


def test_a_misspelt_runs_path_exits_2_and_leaves_the_results_alone(collected, tmp_path):
    runs, out, _ = collected
    before = _snapshot(out)
    typo = tmp_path / "rusn"
    proc = _cli(typo, "-o", out)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"{typo} does not exist" in proc.stderr
    assert f"nothing written to {out}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert _snapshot(out) == before
    # one good root beside a misspelt one: still refused (the table would lose cells)
    proc = _cli(runs, typo, "-o", out)
    assert proc.returncode == 2 and f"{typo} does not exist" in proc.stderr
    assert _snapshot(out) == before


def test_a_root_without_result_files_exits_2_and_is_named(collected, tmp_path):
    _, out, _ = collected
    before = _snapshot(out)
    empty = tmp_path / "empty_sweep"
    (empty / "sst2").mkdir(parents=True)
    proc = _cli(empty, "-o", out)
    assert proc.returncode == 2
    assert f"{empty} holds no result.json" in proc.stderr
    assert _snapshot(out) == before
    proc = _cli(empty)  # without -o as well: nothing to summarise is an error
    assert proc.returncode == 2 and f"{empty} holds no result.json" in proc.stderr


def test_collect_itself_refuses_to_replace_results_with_nothing(collected, tmp_path):
    """The sweep-end callback calls collect([sweep_dir], results_dir) directly."""
    _, out, _ = collected
    before = _snapshot(out)
    empty = tmp_path / "empty_sweep"
    empty.mkdir()
    with pytest.raises(HeadbenchError, match=r"holds no result\.json"):
        collect([empty], out)
    unreadable = tmp_path / "broken_sweep" / "sst2" / "seed=1"
    unreadable.mkdir(parents=True)
    (unreadable / "result.json").write_text('{"status": "ok", "cell": {"ta')  # cut by a crash
    with pytest.raises(HeadbenchError, match=r"none of the 1 result files .* could be read"):
        collect([tmp_path / "broken_sweep"], out)
    assert _snapshot(out) == before


# --- case 2: one malformed result file is skipped and named; outputs are all or none -------

# (where in the result, the wrong value, what the message says was expected)
BAD_FIELDS = [
    ("cell.seed", "abc", "an integer"),
    ("best", [], "an object or null"),
    ("history", 5, "a list or null"),
    ("cell", {"task": 3}, "a string"),
    ("cell.layers", ["-1"], "a string or null"),
    ("cell.head_label", None, "a string"),
    ("best.metrics.dev", [0.5], "an object"),
    ("best.metrics.dev.accuracy", "high", "a number or null"),
    ("best.epoch", 1.5, "an integer or null"),
    ("baseline.dev", 0.5, "an object or null"),
    ("history.0.dev", {"accuracy": [0.7]}, "a number or null"),
    ("params.trainable", "1k", "an integer or null"),
    ("train_time_s", "10 s", "a number or null"),
    ("status", "done", "one of ok, failed, diverged"),
    ("git", "abc123", "an object or null"),
    ("cell.seed", 2**70, "a 64-bit integer"),
    ("main_metric", 7, "a string or null"),
]


def _set(result: dict, dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    node = result
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value


@pytest.mark.parametrize(("field", "value", "expected"), BAD_FIELDS)
def test_a_wrongly_typed_field_skips_that_file_only_and_names_it(collected, field, value, expected):
    runs, out, results = collected
    path = sorted((runs / "sst2").rglob("result.json"))[0]  # an ok cell with history
    bad = json.loads(path.read_text())
    assert bad["status"] == "ok" and bad["history"]
    _set(bad, field, value)
    path.write_text(json.dumps(bad))
    proc = _cli(runs, "-o", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warning = next(line for line in proc.stdout.splitlines() if str(path) in line)
    assert f"'{field.split('.')[0]}" in warning and expected in warning, warning
    # every output comes from the same collect, and the bad cell is in none of them
    cells = json.loads((out / "cells.json").read_text())
    assert len(cells) == len(results) - 1
    assert os.path.relpath(path.parent, ROOT) not in {c["run_dir"] for c in cells}
    table = read_table(out)
    assert len(table.drop_duplicates(subset=["run_dir"])) == len(results) - 1
    assert set(pd.read_csv(out / "results.csv")["run_dir"]) == set(table["run_dir"])
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_outputs_are_written_all_or_none(collected, monkeypatch):
    """A failure while the outputs are produced (here: the Parquet writer) changes none."""
    runs, out, _ = collected
    before = _snapshot(out)
    first = sorted(runs.rglob("result.json"))[0]
    changed = json.loads(first.read_text())
    changed["train_time_s"] = 999.0  # so that a new results.csv would differ from the old
    first.write_text(json.dumps(changed))

    def broken_parquet(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", broken_parquet)
    with pytest.raises(OSError, match="disk full"):
        collect([runs], out)
    assert _snapshot(out) == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_an_output_name_taken_by_a_directory_changes_no_output(collected):
    runs, out, _ = collected
    (out / "history.csv").unlink()
    (out / "history.csv").mkdir()
    before = _snapshot_files(out)
    with pytest.raises(HeadbenchError, match=r"history.csv is a directory"):
        collect([runs], out)
    assert _snapshot_files(out) == before


def _snapshot_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


# --- case 3: the result schema is read; a missing config hash is reported ------------------


def _one_result(tmp_path: Path, **changes: object) -> tuple[Path, dict]:
    runs = tmp_path / "runs"
    write_synthetic_sweep(runs)
    path = sorted(runs.rglob("result.json"))[0]
    result = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    path.write_text(json.dumps(result))
    return path, result


def test_a_result_of_a_newer_schema_is_skipped_with_a_clear_message(tmp_path):
    path, _ = _one_result(tmp_path, schema=RESULT_SCHEMA + 1)
    results, problems = read_results([tmp_path / "runs"])
    assert str(path.parent) not in {str(Path(r["run_dir"]).resolve()) for r in results}
    assert [p for p in problems if str(path) in p] == [
        f"{path}: skipped: written by a newer headbench: schema {RESULT_SCHEMA + 1}, "
        f"this version reads ≤ {RESULT_SCHEMA}"
    ]


@pytest.mark.parametrize("schema", [0, "1", True, 1.0, [1]])
def test_a_result_of_an_unknown_schema_is_skipped(tmp_path, schema):
    path, _ = _one_result(tmp_path, schema=schema)
    results, problems = read_results([tmp_path / "runs"])
    [problem] = [p for p in problems if str(path) in p]
    assert "'schema'" in problem and f"1 to {RESULT_SCHEMA}" in problem, problem
    assert len(results) == len(find_result_files([tmp_path / "runs"])) - 1


def test_a_result_without_schema_is_read_as_schema_1(tmp_path):
    path, _ = _one_result(tmp_path, schema=None)
    results, problems = read_results([tmp_path / "runs"])
    assert not [p for p in problems if str(path) in p]
    assert len(results) == len(find_result_files([tmp_path / "runs"]))


def test_a_result_without_config_hash_is_kept_and_reported(tmp_path, capsys):
    path, _ = _one_result(tmp_path, config_hash=None)
    table = collect([tmp_path / "runs"], tmp_path / "results")
    assert f"warning: {path}: no 'config_hash'" in capsys.readouterr().out
    assert len(table.drop_duplicates(subset=["run_dir"])) == len(
        find_result_files([tmp_path / "runs"])
    )


# --- case 4: superseded outputs of an earlier configuration are not results ----------------


def test_results_below_a_superseded_directory_are_ignored(tmp_path):
    runs = tmp_path / "runs"
    write_synthetic_sweep(runs)
    current = sorted(runs.rglob("result.json"))
    old = json.loads(current[0].read_text())
    old["best"]["metrics"]["dev"]["accuracy"] = 0.01
    old["finished_at"] = "2099-01-01T00:00:00.000000Z"  # newer: a duplicate would win
    for sub in (f"{SUPERSEDED_DIR}/0123456789ab", f"{SUPERSEDED_DIR}/0123456789ab/deeper"):
        (current[0].parent / sub).mkdir(parents=True, exist_ok=True)
        (current[0].parent / sub / "result.json").write_text(json.dumps(old))
    assert find_result_files([runs]) == current
    results, problems = read_results([runs])
    assert problems == [] and len(results) == len(current)
    table = collect([runs], None)
    assert 0.01 not in table["value"].tolist()
    # a folder merely named like it elsewhere in the path (the root itself) is no reason
    nested = tmp_path / SUPERSEDED_DIR / "runs"
    write_synthetic_sweep(nested)
    assert len(find_result_files([nested])) == len(current)


def test_the_unchanged_results_are_all_valid(collected):
    """The mutations above start from results that collect accepts unchanged."""
    runs, _, results = collected
    read, problems = read_results([runs])
    assert problems == [] and len(read) == len(results)


# --- case 8: records beside the results, saved by a Windows editor, still read ---------------


def test_records_with_a_byte_order_mark_are_read_like_without(collected):
    """``cells.json`` and ``launches.jsonl`` re-saved with a BOM: the report reads the same."""
    _, out, _ = collected
    before = load_inputs(out)
    for name in ("cells.json", "launches.jsonl"):
        path = out / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    after = load_inputs(out)
    assert after.cells == before.cells and len(after.cells) > 0
    assert after.launch == before.launch and after.launch


# --- case 9: a results directory holding other cells is never replaced by another sweep's ---


def _other_sweep(root: Path) -> list[dict]:
    """A second sweep of real result files, of other cells (seeds 11, 12, 13) than the first."""
    results = write_synthetic_sweep(root)
    for path in root.rglob("result.json"):
        result = json.loads(path.read_text())
        result["cell"]["seed"] += 10
        path.write_text(json.dumps(result))
    return results


def _run_dirs(out: Path) -> set[Path]:
    return {(ROOT / c["run_dir"]).resolve() for c in json.loads((out / "cells.json").read_text())}


def test_collecting_another_root_into_a_results_dir_holding_cells_is_refused(collected, tmp_path):
    """The bug: a one-cell sweep's end replaced a committed 250-cell table, silently."""
    runs, out, results = collected
    other = tmp_path / "other_sweep"
    _other_sweep(other)
    before = _snapshot(out)
    proc = _cli(other, "-o", out)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr)
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error:")]  # one error line
    assert "Traceback" not in proc.stderr
    assert line.startswith(f"error: {out} holds {len(results)} cells that this collect would drop")
    assert f"{len(results)} collected from run directories outside {other} (e.g. " in line
    example = Path(re.search(r"\(e\.g\. (\S+)\)", line).group(1))
    assert example in {p.parent for p in find_result_files([runs])}
    command = f"python -m bench.results.collect {runs} {other} -o {out}"
    assert f"collect all roots together ({command})" in line
    assert "results_dir=... for a sweep" in line and "--replace" in line
    assert line.endswith(f"nothing written to {out}")
    assert _snapshot(out) == before  # every output keeps its bytes
    # the function the sweep-end callback calls refuses the same way
    with pytest.raises(CollectError, match=rf"outside {other} .*nothing written to {out}$"):
        collect([other], out)
    assert _snapshot(out) == before


def test_collecting_both_roots_together_keeps_every_cell(collected, tmp_path):
    runs, out, results = collected
    other = tmp_path / "other_sweep"
    more = _other_sweep(other)
    proc = _cli(runs, other, "-o", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = _run_dirs(out)
    assert len(cells) == len(results) + len(more)
    assert cells == {p.parent for p in find_result_files([runs, other])}
    # and again (a sweep of either root resuming): the same two roots, the same cells
    assert _cli(other, runs, "-o", out).returncode == 0
    assert _run_dirs(out) == cells


def test_recollecting_the_same_root_succeeds_with_or_without_new_cells(collected):
    """The resume workflow: a sweep's end collects its runs directory into its results."""
    runs, out, results = collected
    proc = _cli(runs, "-o", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(_run_dirs(out)) == len(results)
    source = sorted(find_result_files([runs]))[0]
    added = json.loads(source.read_text())
    added["cell"]["seed"] = 7
    new_dir = runs / "sst2" / "cell_new" / "seed=7"
    new_dir.mkdir(parents=True)
    (new_dir / "result.json").write_text(json.dumps(added))
    proc = _cli(runs, "-o", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _run_dirs(out) == {p.parent for p in find_result_files([runs])}
    assert new_dir in _run_dirs(out) and len(_run_dirs(out)) == len(results) + 1
    # a single cell of the root is refused (it would drop the others), the root is not
    proc = _cli(new_dir, "-o", out)
    assert proc.returncode == 2 and f"{len(results)} collected from run" in proc.stderr


def test_recollecting_from_another_working_directory_finds_the_recorded_cells(
    tmp_path, monkeypatch
):
    """Run directories are recorded relative to the working directory of the collect (the
    checkout); a collect started elsewhere finds them relative to the results directory's
    parents."""
    checkout = tmp_path / "checkout"
    write_synthetic_sweep(checkout / "results" / "exp" / "runs")
    monkeypatch.chdir(checkout)  # like a committed experiment: results/exp/runs
    collect([Path("results/exp/runs")], Path("results/exp"))
    recorded = {c["run_dir"] for c in json.loads(Path("results/exp/cells.json").read_text())}
    assert all(d.startswith("results/exp/runs/") for d in recorded)
    monkeypatch.chdir(checkout / "results")
    collect([Path("exp/runs")], Path("exp"))
    recorded = {c["run_dir"] for c in json.loads(Path("exp/cells.json").read_text())}
    assert all(d.startswith("exp/runs/") for d in recorded)


def test_replace_writes_the_collected_roots_alone(collected, tmp_path):
    _, out, results = collected
    other = tmp_path / "other_sweep"
    _other_sweep(other)
    proc = _cli(other, "-o", out, "--replace")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _run_dirs(out) == {p.parent for p in find_result_files([other])}
    assert len(_run_dirs(out)) == len(results)
    table = collect([tmp_path / "runs"], out, replace=True)  # and back, in-process
    assert _run_dirs(out) == {p.parent for p in find_result_files([tmp_path / "runs"])}
    assert set(table["seed"].dropna()) == {1, 2, 3}


def test_a_run_directory_gone_is_refused_unless_its_cell_is_collected_again(collected, tmp_path):
    runs, out, results = collected
    moved = tmp_path / "moved_runs"
    runs.rename(moved)  # every recorded run directory is gone, every cell is under moved/
    proc = _cli(moved, "-o", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _run_dirs(out) == {p.parent for p in find_result_files([moved])}
    before = _snapshot(out)
    gone = sorted(find_result_files([moved]))[0].parent
    shutil.rmtree(gone)  # a finished cell's run directory deleted: the tables are its record
    proc = _cli(moved, "-o", out)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert (
        f"{out} holds 1 cells that this collect would drop from its tables: 1 whose run "
        f"directories no longer exist and that are not collected again (e.g. "
        f"{os.path.relpath(gone, ROOT)}); to keep them, restore their run directories, or "
    ) in proc.stderr
    assert _snapshot(out) == before
    proc = _cli(moved, "-o", out, "--replace")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(_run_dirs(out)) == len(results) - 1


@pytest.mark.parametrize("content", [b'[{"run_dir": "x", "cell"', b"{}", b"\xff\xfe"])
def test_an_unreadable_cells_json_is_refused_not_overwritten(collected, content):
    runs, out, _ = collected
    (out / "cells.json").write_bytes(content)
    before = _snapshot(out)
    with pytest.raises(CollectError, match=r"cells\.json (cannot be read|is not a list)"):
        collect([runs], out)
    assert _snapshot(out) == before
    collect([runs], out, replace=True)
    assert json.loads((out / "cells.json").read_text())


def test_the_sweep_end_callback_exits_with_the_refusal(collected, tmp_path):
    """``CollectResults.on_multirun_end`` collects ``[hydra.sweep.dir]`` into ``results_dir``."""
    _, out, results = collected
    other = tmp_path / "other_sweep"
    _other_sweep(other)
    before = _snapshot(out)
    config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(other)}}, "results_dir": str(out), "report_file": None}
    )
    with pytest.raises(SystemExit) as exit_:
        CollectResults().on_multirun_end(config)
    message = str(exit_.value.code)
    assert message.startswith(
        f"error: the results were not collected into {out}: {out} holds {len(results)} cells"
    )
    assert f"python -m bench.results.collect {tmp_path / 'runs'} {other} -o {out}" in message
    assert _snapshot(out) == before


def test_what_a_sweep_would_drop_is_known_before_it_trains(collected, tmp_path, monkeypatch):
    """dropped_at_launch: the collect rule with the planned run directories for the results."""
    from bench.results.collect import dropped_at_launch, launch_refusal

    runs, out, results = collected
    monkeypatch.chdir(ROOT)  # cells.json records run directories relative to the collect's cwd
    recorded = [c["run_dir"] for c in json.loads((out / "cells.json").read_text())]
    cells = sorted(p.parent for p in find_result_files([runs]))
    # the same sweep again, whatever it plans: its cells stay under its sweep directory
    assert dropped_at_launch(out, runs, []) == ([], [])
    # another sweep directory: every recorded cell lies outside it
    outside, missing = dropped_at_launch(out, tmp_path / "other", [])
    assert (sorted(outside), missing) == (sorted(recorded), [])
    text = launch_refusal(out, tmp_path / "other", outside, missing)
    assert text.startswith(f"{out} holds {len(recorded)} cells that this sweep's end would drop")
    assert text.endswith("nothing trained")
    # a run directory gone: dropped unless the sweep plans it again
    shutil.rmtree(cells[0])
    assert dropped_at_launch(out, runs, []) == ([], [os.path.relpath(cells[0], ROOT)])
    assert dropped_at_launch(out, runs, [cells[0]]) == ([], [])
    assert len(results) == len(recorded)
