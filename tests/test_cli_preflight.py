"""The three forms of a launch give one verdict: a single run, a sweep (``-m``), a dry run.

A value no cell can use (a misspelt option, a precision Lightning does not know, a device
count of 0, a GPU the machine does not have, a cache dtype the cache does not store) is
refused before anything is written, with one message naming the key, the value and the
valid choices, exit status 2, in every form. Local data that is missing is named before
training; a cell that fails for want of its data is retried by the next launch. A sweep
whose labels interpolate a swept value is judged per job by the launch as by the dry run.
A selection slice smaller than ``selection.size`` is said, not silent.

The cases run the real command line (``bench.run.cli.main``, in this process) over the
real config tree and the real data; two pin what they rest on (Lightning's own lists, and
which failures count as the machine's).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.data import selection
from bench.data.glue_files import read_glue_tsv
from bench.data.location import count_examples, task_folder
from bench.data.tasks import TaskSpec, get_task
from bench.errors import DataError, MissingDataError
from bench.run.failures import is_environmental
from conftest import bench_in_this_process

# A cell that trains in a few seconds on one core (tiny BERT, 32 examples, one epoch).
TINY = (
    "encoder=tiny_bert",
    "head=linear",
    "freeze=frozen",
    "data.train_size=32",
    "selection.size=20",
    "data.max_length=32",
    "trainer.max_epochs=1",
)
CELL = (*TINY, "seed=1")


def _where(tmp_path: Path) -> tuple[str, ...]:
    """Every directory a launch may write, inside ``tmp_path``."""
    return (
        f"runs_dir={tmp_path}/runs",
        f"results_dir={tmp_path}/results",
        f"hydra.run.dir={tmp_path}/run",
        "report_file=null",
    )


def _written(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))


# --- values no cell can use: one error, exit 2, nothing written, in every form -------------

# Hydra's argument parser takes flags before the overrides.
FORMS = {
    "single run": ("seed=1",),
    "sweep": ("-m", "seed=1,2"),
    "dry run": ("--dry-run", "-m", "seed=1,2"),
}
# case: (overrides, what the message names: the key and value, and the valid choices)
BAD_VALUES = {
    "misspelt group option": (
        ("head=linear,bilstmm",),
        ("Could not find 'head/bilstmm'", "Available options in 'head'", "bilstm"),
    ),
    "unknown precision": (
        ("trainer.precision=banana",),
        ("trainer.precision='banana'", "bf16-mixed", "32-true"),
    ),
    "no devices": (("trainer.devices=0",), ("trainer.devices=0", "a positive integer")),
    "negative devices": (("trainer.devices=-5",), ("trainer.devices=-5", "a positive integer")),
    "unknown cache dtype": (
        ("cache.dtype=int3",),
        ("cache.dtype='int3'", "float32", "float16", "bfloat16"),
    ),
    # how the reports group verdicts (not hashed): refused at launch, not after training
    "unknown study column": (
        ("+studies=[{name:x,where:{colour:red}}]",),
        ("studies[0].where: unknown column colour", "valid choices: task, encoder, freeze"),
    ),
    # the epoch was chosen on 16 of the 32 selection examples while result.json said 32
    "part of the selection slice": (
        ("+trainer.limit_val_batches=0.5",),
        ("trainer.limit_val_batches=0.5", "selection.size"),
    ),
    "one batch of the selection slice": (
        ("+trainer.limit_val_batches=1",),  # Lightning: an integer counts batches
        ("trainer.limit_val_batches=1", "selection.size"),
    ),
    # silently no search at all
    "a search of no trials": (
        ("search=random", "search.trials=0"),
        ("search.trials=0", "at least 1", "search=random", "search=none"),
    ),
}


def _no_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_value_no_cell_can_use_is_one_error_exit_2_in_every_form(tmp_path, case, form):
    overrides, named = BAD_VALUES[case]
    if form == "single run" and "," in " ".join(overrides):
        overrides = tuple(o.replace("linear,", "") for o in overrides)  # one value, one run
    proc = bench_in_this_process(*FORMS[form], *TINY, *overrides, *_where(tmp_path))
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    said = proc.stdout + proc.stderr
    for text in named:
        assert text in said, (text, said[-3000:])
    assert "Traceback" not in said
    if form != "dry run":  # the dry run lists each cell with its reason
        assert proc.stderr.count("error") == 1, proc.stderr[-3000:]  # one message
    if case == "misspelt group option":
        assert said.count(named[0]) == 1, said[-3000:]  # not Hydra's twice
    assert _written(tmp_path) == []  # no multirun.yaml, no run or results directory


@pytest.mark.skipif(not _no_cuda(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_a_gpu_accelerator_without_cuda_is_refused_in_every_form(tmp_path, form, accelerator):
    proc = bench_in_this_process(
        *FORMS[form], *TINY, f"trainer.accelerator={accelerator}", *_where(tmp_path)
    )
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    said = proc.stdout + proc.stderr
    assert f"trainer.accelerator={accelerator!r}" in said and "no CUDA device" in said, said
    assert "cpu" in said and "auto" in said  # what is valid here
    assert _written(tmp_path) == []


def test_auto_and_cpu_accelerators_and_lightnings_precisions_pass(tmp_path):
    proc = bench_in_this_process(
        "--dry-run",
        "-m",
        *CELL,
        "trainer.accelerator=auto,cpu",
        "trainer.precision=32-true,bf16-mixed,32",
        "head.label=linear-${trainer.accelerator}-${trainer.precision}",  # a directory each
        *_where(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "6 would run" in proc.stdout and "preflight" not in proc.stdout


@pytest.mark.skipif(not _no_cuda(), reason="this machine has a CUDA device")
def test_a_cluster_sweep_is_not_refused_for_this_machines_devices(tmp_path):
    """The cells of ``submitit_slurm`` run on the cluster's nodes: their GPUs are not here."""
    cluster = ("--dry-run", "-m", *CELL, "hydra/launcher=submitit_slurm", *_where(tmp_path))
    proc = bench_in_this_process(*cluster, "trainer.accelerator=gpu")
    assert proc.returncode == 0 and "1 would run" in proc.stdout, proc.stdout + proc.stderr
    refused = bench_in_this_process(*cluster, "trainer.precision=banana")  # no node takes it
    assert refused.returncode == 2 and "trainer.precision='banana'" in refused.stdout


def test_the_lightning_lists_preflight_reads_are_still_there():
    """Preflight reads Lightning's own lists (private names): a release that moves them
    fails here, not as a precision refused for no reason."""
    from lightning.fabric.utilities.device_parser import _select_auto_accelerator
    from lightning.pytorch.accelerators import AcceleratorRegistry

    from bench.run.preflight import lightning_precisions

    assert {"32-true", "bf16-mixed", "16-mixed", 32} <= set(lightning_precisions())
    assert _select_auto_accelerator() in AcceleratorRegistry.available_accelerators()


# --- missing data: named before training; a cell that lacks it is retried -----------------


def test_a_missing_data_directory_is_named_by_the_dry_run_and_the_single_run(tmp_path):
    missing = tmp_path / "nonexistent"
    dry = bench_in_this_process(*CELL, f"data.dir={missing}", "--dry-run", *_where(tmp_path))
    assert dry.returncode == 2, dry.stdout[-2000:]
    failed = [line for line in dry.stdout.splitlines() if line.startswith("fail")]
    assert len(failed) == 1 and f"data.dir={missing}" in failed[0], dry.stdout
    assert "glue/SST-2/train.tsv" in failed[0] and "does not exist" in failed[0]

    single = bench_in_this_process(*CELL, f"data.dir={missing}", *_where(tmp_path))
    assert single.returncode == 2, single.stderr[-2000:]
    assert f"data.dir={missing}" in single.stderr and "glue/SST-2/train.tsv" in single.stderr
    assert _written(tmp_path) == []


def test_a_missing_task_file_is_named_and_the_hub_is_not_refused(tmp_path, data_dir):
    # The shared data holds QNLI's dev and test files only: its training file is missing.
    dry = bench_in_this_process(
        *CELL, "task=qnli", f"data.dir={data_dir}", "--dry-run", *_where(tmp_path)
    )
    assert dry.returncode == 2
    assert f"{data_dir}/glue/QNLI/train.tsv" in dry.stdout and "data.dir" in dry.stdout
    # No local directory: the data may come from the Hub or its cache; not refused here.
    hub = bench_in_this_process(*CELL, "data.dir=null", "--dry-run", *_where(tmp_path))
    assert hub.returncode == 0 and "1 would run" in hub.stdout, hub.stdout + hub.stderr


def test_a_sweep_over_a_data_directory_that_does_not_exist_is_refused(tmp_path):
    sweep = ("-m", *CELL, "task=sst2,rte", f"data.dir={tmp_path}/nonexistent")
    proc = bench_in_this_process(*sweep, *_where(tmp_path))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("error") == 1 and f"data.dir={tmp_path}/nonexistent" in proc.stderr
    assert "1 more cell(s) refused" in proc.stderr
    assert _written(tmp_path) == []


def test_a_cell_without_its_data_is_retried_once_the_files_are_there(tmp_path, data_dir):
    """A task whose files are missing fails alone (others may have theirs) and is retried."""
    data = tmp_path / "data"
    (data / "glue").mkdir(parents=True)
    sweep = ("-m", *CELL, f"data.dir={data}", *_where(tmp_path))
    first = bench_in_this_process(*sweep)
    assert first.returncode == 0, first.stderr[-3000:]  # recorded per cell, the sweep goes on
    [path] = (tmp_path / "runs").rglob("result.json")
    result = json.loads(path.read_text())
    assert result["status"] == "failed" and result["retryable"] is True
    assert result["reason"].startswith(f"MissingDataError: data.dir={data}: ")
    assert "glue/SST-2/train.tsv" in result["reason"]

    (data / "glue" / "SST-2").symlink_to(data_dir / "glue" / "SST-2")

    second = bench_in_this_process(*sweep)  # no +rerun_failed
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(path.read_text())["status"] == "ok"


def test_only_missing_input_data_is_environmental():
    assert is_environmental(MissingDataError("data.dir=/x: no such directory"))
    assert not is_environmental(FileNotFoundError(2, "No such file", "/cell/own/file"))
    assert not is_environmental(DataError("train.tsv:3: unknown label 'x'"))


# --- labels that interpolate a swept value: judged per job by every form ------------------


def test_an_interpolated_label_gives_the_dry_run_and_the_launch_one_verdict(tmp_path):
    # The data directory holds no task, so each cell is recorded failed without training:
    # the launch is accepted and writes one run directory per job.
    (tmp_path / "data").mkdir()
    label = ("-m", "head.dropout=0.1,0.2", "head.label=linear-d${head.dropout}", *CELL)
    where = (f"data.dir={tmp_path}/data", *_where(tmp_path))
    dry = bench_in_this_process(*label, *where, "--dry-run")
    assert "linear-d0.1" in dry.stdout and "linear-d0.2" in dry.stdout, dry.stdout
    assert "would be shared" not in dry.stdout
    launch = bench_in_this_process(*label, *where)
    assert launch.returncode == 0, launch.stderr[-3000:]
    labels = [p.parent.parent.parent.name for p in (tmp_path / "runs").rglob("result.json")]
    assert sorted(labels) == ["linear-d0.1", "linear-d0.2"]


def test_a_shared_run_directory_is_refused_by_the_dry_run_and_the_launch(tmp_path):
    shared = ("-m", "head.dropout=0.1,0.2", "head.label=linear-d", *CELL, *_where(tmp_path))
    dry = bench_in_this_process(*shared, "--dry-run")
    launch = bench_in_this_process(*shared)
    for proc in (dry, launch):
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        said = proc.stdout + proc.stderr
        assert "would be shared by several cells" in said and "linear-d${head.dropout}" in said
    assert _written(tmp_path) == []


# --- a selection slice smaller than asked: said at training, and by the dry run -----------

# WNLI has 635 training examples: 600 train, 35 are left to select on (selection.size: 500).
CAPPED = ("task=wnli", "data.train_size=600", "selection.size=500")


def test_a_capped_selection_slice_is_said_by_the_dry_run(tmp_path, data_dir):
    cell = (*CELL, *CAPPED, f"data.dir={data_dir}", *_where(tmp_path))
    dry = bench_in_this_process(*cell, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    notes = [line for line in dry.stdout.splitlines() if "selection.size=500" in line]
    assert len(notes) == 1 and "35" in notes[0] and "data.train_size=600" in notes[0], dry.stdout
    full = bench_in_this_process(
        *CELL, "task=wnli", f"data.dir={data_dir}", "--dry-run", *_where(tmp_path)
    )
    assert "selection.size" not in full.stdout  # not capped: nothing said


def test_a_capped_selection_slice_is_logged_and_recorded(tmp_path, data_dir):
    proc = bench_in_this_process(*CELL, *CAPPED, f"data.dir={data_dir}", *_where(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout + proc.stderr
    assert "selection.size=500" in said and "35" in said, said[-3000:]
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["selection"]["size"] == 35 and result["config"]["selection"]["size"] == 500


@pytest.mark.parametrize("task", ["rte", "mrpc", "cola", "stsb", "sst2"])
def test_the_dry_runs_line_count_is_the_readers_row_count(data_dir, task):
    """The dry run counts a GLUE file's lines instead of parsing it: the same number."""
    spec = get_task(task)
    assert isinstance(spec, TaskSpec)
    rows = read_glue_tsv(task_folder(data_dir, spec) / spec.train.filename, spec)
    assert count_examples(data_dir, spec) == len(rows["label"])


def test_the_capped_slice_line_quoted_in_the_docs_is_what_rte_gives(data_dir):
    """docs/faults.md quotes the line RTE's protocol setting (2,000 to train) logs."""
    n = count_examples(data_dir, get_task("rte"))
    assert n is not None
    line = selection.capped_note("rte train", n, 2000, 500)
    faults = (Path(__file__).parents[1] / "docs" / "faults.md").read_text(encoding="utf-8")
    assert f"`{line}`" in faults
    assert selection.capped_size(n, 2000, 500) == 490  # the protocol's "its other 490"


def test_a_refused_sweep_whose_stderr_is_closed_still_trains_nothing(tmp_path):
    """``2>&1 | head -1`` closes the pipe: printing the refusal fails, the refusal holds."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "bench", "-m", *CELL, *_where(tmp_path)]
    command += ["sweep_name=s", "hydra.sweep.dir=" + str(tmp_path / "sweep")]
    command.append("optim.encoder_lr=nan,1e-5")  # refused by the launch's check of each cell
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    process.stderr.close()
    assert process.wait(timeout=300) == 2
    assert not list(tmp_path.rglob("result.json"))
