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

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr
from sklearn.metrics import matthews_corrcoef
from test_report import write_synthetic_sweep

from bench.cell import RESULT_SCHEMA, SUPERSEDED_DIR
from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.sequence_datamodule import write_predictions
from bench.data.tasks import TaskSpec, get_task
from bench.errors import CollectError, HeadbenchError
from bench.model.metrics import score
from bench.model.task_types import SequenceEvaluation
from bench.report.inputs import load_inputs
from bench.results.collect import collect, find_result_files, read_results, read_table
from bench.results.degenerate import prediction_summary
from bench.results.predictions import cell_predictions
from bench.results.rescore import mismatches
from bench.results.stats import run_values
from bench.run.callbacks import CollectResults
from conftest import DATA_DIR, ROOT

OUTPUTS = (
    "results.csv",
    "results.parquet",
    "history.csv",
    "cells.json",
    "launches.jsonl",
    "scores.csv",
    "scores.parquet",
    "comparisons.csv",
    "comparisons.parquet",
)


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


# --- case 10: a run whose main metric is undefined is kept, and counted as failed -----------

#: Committed cells of a real sweep (schema 2, with their predictions), copied, never changed.
FAIR_HEADS = ROOT / "results" / "fair_heads" / "runs"


def _dev_labels(spec: TaskSpec) -> list:
    """The real dev labels of a GLUE task, as the data module holds them."""
    return read_glue_tsv(glue_file(DATA_DIR, spec, spec.dev["dev"].filename), spec)["label"]


def _predict_constant(spec: TaskSpec, labels: list, constant: float) -> tuple[dict, dict]:
    """A model predicting ``constant`` everywhere, evaluated as training evaluates it.

    Constant logits go through the real in-loop evaluation batch by batch, so the metrics
    are the ones training records and the kept predictions the ones it writes.

    Returns:
        ``(metrics, predictions)``: the split's recorded metrics, and its kept
        ``idx``/``label``/``pred`` (``prob``) lists.
    """
    evaluation = SequenceEvaluation(spec, ["dev"])
    for start in range(0, len(labels), 32):
        part = labels[start : start + 32]
        if spec.is_regression:
            logits = torch.full((len(part), 1), constant, dtype=torch.float32)
            gold = torch.tensor(part, dtype=torch.float32)
        else:
            logits = torch.zeros(len(part), spec.num_labels)
            logits[:, int(constant)] = 1.0
            gold = torch.tensor(part, dtype=torch.long)
        batch = {"labels": gold, "idx": torch.arange(start, start + len(part))}
        evaluation.update("dev", torch.nn.Identity(), logits, batch)
    return evaluation.scores("dev", world_size=1), evaluation.collect("dev")


def _sweep_with_a_constant_run(
    tmp_path: Path, task: str, constant: float, legacy_spearman: bool = False
) -> tuple[Path, Path]:
    """Three committed seeds of one setting; seed 2 re-made as a constant predictor.

    Seed 2's ``predictions_dev.csv``, ``best.metrics``, selection scores and degenerate
    flag are written as train.run writes them (``legacy_spearman``: its Spearman as results
    made before correlations of a constant were recorded as undefined held it, 0.0).

    Returns:
        ``(runs root, seed 2's run directory)``.
    """
    setting = Path(task) / "minilm" / "bilstm" / "frozen"
    runs = tmp_path / "runs"
    for seed in (1, 2, 3):
        shutil.copytree(FAIR_HEADS / setting / f"seed={seed}", runs / setting / f"seed={seed}")
    run_dir = runs / setting / "seed=2"
    spec = get_task(task)
    metrics, kept = _predict_constant(spec, _dev_labels(spec), constant)
    if legacy_spearman:
        metrics["spearman"] = 0.0
    (run_dir / "predictions_dev.csv.gz").unlink()
    write_predictions(run_dir, {"dev": kept})
    result = json.loads((run_dir / "result.json").read_text())
    result["best"]["metrics"] = {"dev": metrics}
    train = read_glue_tsv(glue_file(DATA_DIR, spec, "train.tsv"), spec)["label"]
    ids = result["selection"]["ids"]
    result["selection"]["metrics"] = score(spec, [constant] * len(ids), [train[i] for i in ids])
    summary = prediction_summary(spec, {"dev": kept})
    result["predictions_summary"], result["degenerate"] = summary, summary["degenerate"]
    assert summary["degenerate"]
    (run_dir / "result.json").write_text(json.dumps(result))
    return runs, run_dir


@pytest.mark.parametrize("legacy_spearman", [False, True], ids=["recorded-now", "spearman-0.0"])
def test_a_constant_stsb_run_is_collected_and_counted_as_failed(tmp_path, capsys, legacy_spearman):
    committed = json.loads(
        (FAIR_HEADS / "stsb/minilm/bilstm/frozen/seed=2/result.json").read_text()
    )
    train_mean = float(committed["baseline"]["dev"]["prediction"])  # a collapsed regressor's output
    runs, run_dir = _sweep_with_a_constant_run(tmp_path, "stsb", train_mean, legacy_spearman)
    recorded = json.loads((run_dir / "result.json").read_text())["best"]["metrics"]["dev"]
    assert recorded == {"pearson": None, "spearman": 0.0 if legacy_spearman else None}
    rows = cell_predictions(
        {**json.loads((run_dir / "result.json").read_text()), "run_dir": str(run_dir)}
    )
    y, p = rows["label"].astype(float), rows["pred"].astype(float)
    with pytest.warns(ConstantInputWarning):
        assert np.isnan(pearsonr(y, p)[0]) and np.isnan(spearmanr(y, p)[0])

    out = tmp_path / "results"
    collect([runs], out)
    printed = capsys.readouterr().out
    assert "refused" not in printed and "do not re-score" not in printed, printed
    table = read_table(out / "results.csv")
    assert len(table.drop_duplicates(subset=["run_dir"])) == 3
    mine = table[table["seed"] == 2].set_index("metric")["value"]
    assert np.isnan(mine["pearson"])
    assert (mine["spearman"] == 0.0) if legacy_spearman else np.isnan(mine["spearman"])

    runs_table = run_values(table)  # main metric: Pearson, on dev
    failed = runs_table.set_index("seed")
    assert failed.loc[2, "fail_reason"] == "undefined" and bool(failed.loc[2, "failed"])
    assert not failed.loc[[1, 3], "failed"].any()
    assert (len(runs_table), int(runs_table["value"].notna().sum())) == (3, 2)
    assert int(runs_table["failed"].sum()) == 1 and (runs_table["status"] == "ok").all()
    spearman = run_values(table, metric="spearman")
    assert int(spearman["failed"].sum()) == 1  # undefined, or (legacy) 0.0 at the best constant 0


@pytest.mark.parametrize("constant", [0, 1], ids=["all-unacceptable", "all-acceptable"])
def test_a_constant_cola_run_is_collected_and_counted_as_failed(tmp_path, capsys, constant):
    runs, run_dir = _sweep_with_a_constant_run(tmp_path, "cola", constant)
    recorded = json.loads((run_dir / "result.json").read_text())["best"]["metrics"]["dev"]
    labels = _dev_labels(get_task("cola"))
    assert recorded["mcc"] == matthews_corrcoef(labels, [constant] * len(labels)) == 0.0

    out = tmp_path / "results"
    collect([runs], out)
    printed = capsys.readouterr().out
    assert "refused" not in printed and "do not re-score" not in printed, printed
    table = read_table(out / "results.csv")
    failed = run_values(table).set_index("seed")
    assert failed.loc[2, "value"] == 0.0
    assert failed.loc[2, "fail_reason"] == "at or below best constant"
    assert not failed.loc[[1, 3], "failed"].any()
    assert int(run_values(table)["failed"].sum()) == 1


def _stsb_rows(labels: list[float], preds: list[float]) -> pd.DataFrame:
    """One STS-B cell's dev rows as cell_predictions gives them (scores as text)."""
    return pd.DataFrame(
        {
            "split": "dev",
            "label": [repr(float(v)) for v in labels],
            "pred": [repr(float(v)) for v in preds],
        }
    )


def _stsb_result(dev: dict) -> dict:
    return {"cell": {"task": "stsb"}, "best": {"metrics": {"dev": dev}}}


def test_the_audit_repro_constant_stsb_predictions_re_score():
    spec = get_task("stsb")
    labels = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    recorded = score(spec, [2.5] * 6, labels)
    assert recorded == {"pearson": None, "spearman": None}
    assert mismatches(_stsb_result(recorded), _stsb_rows(labels, [2.5] * 6)) == []


def test_undefined_agrees_only_with_undefined_or_a_legacy_zero_of_a_constant():
    spec = get_task("stsb")
    labels = torch.tensor(_dev_labels(spec), dtype=torch.float32).tolist()
    constant = [2.5] * len(labels)
    rng = np.random.default_rng(0)
    varied = (np.asarray(labels) + rng.normal(0, 1, len(labels))).astype(np.float32).tolist()
    real = score(spec, varied, labels)
    assert real["pearson"] == pytest.approx(pearsonr(labels, varied)[0], abs=1e-12)
    flat = _stsb_rows(labels, constant)
    # undefined on both sides, or an older result's 0 (within the tolerance) of a constant
    for dev in (
        {"pearson": None, "spearman": None},
        {"pearson": None, "spearman": 0.0},
        {"pearson": 0.0, "spearman": 0.0},
        {"pearson": 1e-8, "spearman": -0.0},
    ):
        assert mismatches(_stsb_result(dev), flat) == [], dev
    # constant gold scores (a split whose labels are all one value): the same
    assert (
        mismatches(
            _stsb_result({"pearson": None, "spearman": 0.0}),
            _stsb_rows([3.0] * len(labels), varied),
        )
        == []
    )
    # a number against an undefined value is refused, either way round
    assert mismatches(_stsb_result({"pearson": 0.01, "spearman": None}), flat) == [
        "dev pearson: recorded 0.01, predictions give nan"
    ]
    rows = _stsb_rows(labels, varied)
    assert mismatches(_stsb_result({**real, "spearman": None}), rows) == [
        f"dev spearman: recorded None, predictions give {spearmanr(labels, varied)[0]}"
    ]
    # a recorded 0 where the predictions vary is a wrong number, not a legacy undefined
    [problem] = mismatches(_stsb_result({**real, "pearson": 0.0}), rows)
    assert problem.startswith("dev pearson: recorded 0.0, predictions give 0.")
    assert mismatches(_stsb_result(real), rows) == []
