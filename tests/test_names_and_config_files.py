"""Names, config files and report paths that used to pass the checks and fail (or lie) later.

A name that becomes a path component must be one the readers read back (``superseded``
made a cell vanish from every table) and one the filesystem takes (over 255 bytes: an
``OSError`` after the dry run had passed). A config file that does not parse is one line
naming the file and line, exit 2, in every form. ``bench.report -o`` takes a directory as
``tables -o`` does. A training subset larger than the local training file is refused by the
dry run that counts its rows, not only by the cell.

Every case runs the real command line over the real config tree (in this process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, bench_in_this_process

TINY = (
    "task=sst2",
    "encoder=tiny_bert",
    "head=linear",
    "freeze=full",
    "seed=1",
    "trainer.max_epochs=1",
    "selection.size=32",
)
# Hydra's argument parser takes flags before the overrides.
FORMS = {"single run": (), "sweep": ("-m",), "dry run": ("--dry-run", "-m")}


def _where(tmp_path: Path) -> tuple[str, ...]:
    """Every directory a launch may write, inside ``tmp_path/out``."""
    out = tmp_path / "out"
    return (
        f"runs_dir={out}/runs",
        f"results_dir={out}/results",
        f"hydra.run.dir={out}/run",
        "report_file=null",
    )


def _error_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


# --- names that become path components -------------------------------------------------------


def test_the_reported_sweep_with_a_label_named_superseded_is_refused(tmp_path):
    """The issue's command: 2 cells, 1 reported ok, the other skipped as done forever."""
    proc = bench_in_this_process(
        "-m",
        *TINY,
        "data.train_size=64",
        "sweep_name=sup",
        "head.label=superseded,mylinear",
        *_where(tmp_path),
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    [line] = _error_lines(proc)
    assert "head.label='superseded'" in line and "reserved" in line, line
    assert not (tmp_path / "out").exists()


NAMES = {
    "reserved label": ("head.label=superseded", ("head.label='superseded'", "superseded")),
    "reserved freeze label": ("freeze.label=trials", ("freeze.label='trials'", "trials")),
    "reserved sweep name": ("sweep_name=superseded", ("sweep_name='superseded'",)),
    "label over 255 bytes": (f"head.label={'x' * 256}", ("head.label=", "255 bytes", "256")),
    # 128 two-byte characters: 256 bytes in UTF-8 though only 128 characters (quoted: Hydra's
    # override grammar takes a non-ASCII value in quotes)
    "label over 255 bytes in UTF-8": (f"head.label='{'é' * 128}'", ("head.label=", "256")),
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("case", sorted(NAMES))
def test_a_reserved_or_too_long_name_is_refused_in_every_form(tmp_path, case, form):
    override, named = NAMES[case]
    proc = bench_in_this_process(
        *FORMS[form], *TINY, "data.train_size=64", override, *_where(tmp_path)
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    said = proc.stdout + proc.stderr
    for text in named:
        assert text in said, (text, said[-2000:])
    assert "Traceback" not in said and len(_error_lines(proc)) == 1, proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()  # no empty directories left behind


def test_a_name_of_255_bytes_is_accepted(tmp_path):
    proc = bench_in_this_process(
        "--dry-run", *TINY, "data.train_size=64", f"head.label={'x' * 255}", *_where(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 would run" in proc.stdout


# --- config files that do not parse --------------------------------------------------------

CONFIG_FILES = {
    # an unclosed flow sequence: the parser stops at line 3
    "syntax error": ("trainer:\n  max_epochs: [1, 2\nfoo: bar\n", "line 3"),
    # a tag that would run code under an unsafe loader: refused, never constructed
    "python tag": (
        "trainer: !!python/object/apply:os.system ['touch {flag}']\n",
        "python/object/apply:os.system",
    ),
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("case", sorted(CONFIG_FILES))
def test_a_config_file_that_does_not_parse_is_one_line_naming_file_and_line(tmp_path, case, form):
    text, named = CONFIG_FILES[case]
    flag = tmp_path / "executed"
    conf = tmp_path / "my_conf"
    (conf / "experiment").mkdir(parents=True)
    path = conf / "experiment" / "mine.yaml"
    path.write_text(text.format(flag=flag), encoding="utf-8")
    proc = bench_in_this_process(
        *FORMS[form],
        *TINY,
        "experiment=mine",
        f"hydra.searchpath=[file://{conf}]",
        *_where(tmp_path),
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    [line] = _error_lines(proc)
    assert str(path) in line and named in line, line
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not flag.exists()  # the tag was not executed
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("form", ["sweep", "dry run"])
def test_a_swept_config_file_that_does_not_parse_is_named_by_the_sweeps_check(tmp_path, form):
    """The sweep's own config composes; the job that reads the broken file does not."""
    conf = tmp_path / "my_conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "fine.yaml").write_text("# @package _global_\n", encoding="utf-8")
    path = conf / "experiment" / "mine.yaml"
    path.write_text(CONFIG_FILES["syntax error"][0], encoding="utf-8")
    proc = bench_in_this_process(
        *FORMS[form],
        *TINY,
        "experiment=fine,mine",
        f"hydra.searchpath=[file://{conf}]",
        *_where(tmp_path),
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    [line] = _error_lines(proc)
    assert str(path) in line and "line 3" in line, line
    assert not (tmp_path / "out").exists()


def test_a_sweeps_launch_plans_with_the_commands_hydra_overrides(tmp_path):
    """hydra.sweep.dir (like hydra.searchpath) is not among the jobs' own overrides: the
    launch's plan read each cell's state in runs_dir while Hydra wrote under the sweep dir."""
    (tmp_path / "data").mkdir()  # no task files: the cell fails at once, nothing trains
    sweep = tmp_path / "sweep"
    args = (*TINY, f"data.dir={tmp_path}/data", f"hydra.sweep.dir={sweep}", *_where(tmp_path))
    proc = bench_in_this_process("-m", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [launch] = [json.loads(line) for line in (sweep / "launches.jsonl").read_text().splitlines()]
    assert launch["planned"] == ["sst2/tiny_bert/linear/full/seed=1"], launch
    assert (sweep / launch["planned"][0] / "result.json").is_file()


def test_lightnings_whole_split_values_pass(tmp_path):
    extra = ("+trainer.limit_val_batches=1.0", "+trainer.overfit_batches=0")
    proc = bench_in_this_process("--dry-run", *TINY, *extra, *_where(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


# --- bench.report -o <directory> -------------------------------------------------------------


def test_report_into_an_existing_directory_writes_its_default_name_there(tmp_path, capsys):
    from bench.report.__main__ import main as report_main

    source = ROOT / "results" / "quick"
    report_main([str(source), "-o", str(tmp_path)])
    out = tmp_path / "quick.html"
    assert out.is_file() and out.read_text(encoding="utf-8").startswith("<!")
    assert f"wrote {out}" in capsys.readouterr().out


# --- a training subset larger than the training file -----------------------------------------


@pytest.mark.parametrize("form", ["single run", "dry run"])
def test_a_training_subset_larger_than_the_local_file_is_refused_before_training(
    tmp_path, data_dir, form
):
    args = (*TINY, "task=rte", "data.train_size=99999", f"data.dir={data_dir}")
    proc = bench_in_this_process(*FORMS[form], *args, *_where(tmp_path))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    said = proc.stdout + proc.stderr
    # RTE's train.tsv holds 2,490 examples; selection=heldout keeps at least 20 to select on
    assert "data.train_size=99999" in said and "2490" in said, said[-2000:]
    assert not (tmp_path / "out").exists()


def test_the_whole_training_file_or_a_subset_that_fits_passes_the_dry_run(tmp_path, data_dir):
    for size in ("null", "2000"):
        args = (*TINY, "task=rte", f"data.train_size={size}", f"data.dir={data_dir}")
        proc = bench_in_this_process("--dry-run", *args, *_where(tmp_path))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
