"""The union-of-grids sweeper: its expansion, checked against Hydra's own basic sweeper."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.plugins.sweeper import Sweeper

from bench.axes.sweep import expand
from bench.errors import ConfigError
from bench.paths import config_dir
from bench.run.plan import plan
from conftest import bench_in_this_process

PARSER = OverridesParser.create()


def _basic(lines: list[str]) -> list[list[str]]:
    """Hydra's basic sweeper (the independent implementation) on the same lines."""
    return BasicSweeper.split_arguments(PARSER.parse_overrides(lines), None)[0]


@pytest.mark.parametrize(
    "params, arguments",
    [
        ({"seed": "1,2,3", "head": "linear,bilstm"}, []),
        ({"seed": "1,2"}, ["seed=5", "freeze=frozen,full"]),  # the command line wins per key
        ({"seed": "range(1,4)", "head.layers": "[0],[1]"}, ["+trainer.limit_val_batches=2"]),
        ({}, ["task=sst2,rte"]),
    ],
)
def test_without_grids_it_is_the_basic_sweepers_product(params, arguments):
    lines = [f"{k}={v}" for k, v in params.items()] + arguments
    assert expand(PARSER, params, None, arguments) == _basic(lines)


def test_grids_are_a_union_of_products_each_with_the_shared_params():
    grids = [
        {"head": "linear", "freeze": "full", "head.layers": "last"},
        {"head": "bilstm", "freeze": "frozen", "head.layers": "embeddings,last"},
    ]
    jobs = expand(PARSER, {"seed": "1,2"}, grids, [])
    expected = _basic(["seed=1,2", "head=linear", "freeze=full", "head.layers=last"]) + _basic(
        ["seed=1,2", "head=bilstm", "freeze=frozen", "head.layers=embeddings,last"]
    )
    assert jobs == expected and len(jobs) == 2 + 4


def test_the_command_line_narrows_every_grid_and_duplicates_are_dropped():
    grids = [{"head.combine": "concat"}, {"head.combine": "concat,mean"}]
    jobs = expand(PARSER, {"seed": "1,2,3"}, grids, ["seed=2"])
    assert jobs == [["seed=2", "head.combine=concat"], ["seed=2", "head.combine=mean"]]


def test_an_interval_sweep_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match="interval"):
        expand(PARSER, {"optim.head_lr": "interval(0.1,1.0)"}, None, [])


def test_a_preset_with_grids_expands_in_the_dry_run_as_in_a_launch():
    cells = plan(config_dir(), ["experiment=layers_sst2"], multirun=True)
    labels = {str(cell.run_dir).split("/")[-3] for cell in cells}
    assert len(cells) == (7 + 3) * 2 * 3
    assert labels == {f"linear-L{i}" for i in range(7)} | {
        f"linear-last4_{c}" for c in ("concat", "mean", "max")
    }


_FORKED_PLAN = """
import os
import bench.run.plan as planning
from bench.errors import ConfigError
from bench.paths import config_dir

overrides = ["experiment=quick"]  # 8 cells
real = planning.plan_workers
planning.plan_workers = lambda jobs: 1
here = planning.plan(config_dir(), overrides, multirun=True)
planning.plan_workers = real
planning.JOBS_PER_WORKER = 4
workers = planning.plan_workers(len(here))
forked = planning.plan(config_dir(), overrides, multirun=True)
try:
    planning.plan(config_dir(), ["experiment=quick", "seed=1,-1"], multirun=True)
    refused = "not refused"
except ConfigError as err:
    refused = str(err)
print(repr((len(here), workers, min(2, len(os.sched_getaffinity(0))), forked == here, refused)))
"""


def test_a_plan_composed_in_worker_processes_is_the_plan_composed_here():
    """Forked workers compose the cells (a launch's wait); the plan is the same, in order,
    and a cell refused in a worker is refused naming it. In a fresh one-thread process, as a
    launch plans (a test worker of pytest-xdist runs threads of its own, so composes alone)."""
    import ast
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _FORKED_PLAN], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cells, workers, expected, same, refused = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert (cells, workers, same) == (8, expected, True)
    assert "(cell: " in refused and "seed=-1" in refused


def test_a_process_running_other_threads_composes_alone(monkeypatch):
    """Forking a process that runs other threads can deadlock the child: no workers then."""
    import os

    import bench.run.plan as planning

    monkeypatch.setattr(planning, "JOBS_PER_WORKER", 1)
    monkeypatch.setattr(planning.threading, "active_count", lambda: 1)
    assert planning.plan_workers(1) == 1 and planning.plan_workers(40) >= 1
    cores = len(os.sched_getaffinity(0))
    assert planning.plan_workers(40) == min(planning.MAX_WORKERS, cores)
    monkeypatch.setattr(planning.threading, "active_count", lambda: 2)
    assert planning.plan_workers(40) == 1


def test_a_launch_composes_each_planned_cell_for_the_plan_and_the_launcher_only(
    tmp_path, monkeypatch, data_dir
):
    """Hydra composes a config in about half a second here: the sweeper's legality check of
    a job the launch's plan already composed is skipped; the plan uses the sweep's config."""
    composed: list[tuple[str, ...]] = []
    validated: list[list[str]] = []
    real_load = ConfigLoaderImpl.load_configuration
    real_validate = Sweeper.validate_batch_is_legal

    def load(self, config_name, overrides, *args, **kwargs):
        composed.append(tuple(overrides))
        return real_load(self, config_name, overrides, *args, **kwargs)

    def validate(self, batch):
        validated.extend(batch)
        return real_validate(self, batch)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", load)
    monkeypatch.setattr(Sweeper, "validate_batch_is_legal", validate)
    line = [
        "encoder=tiny_bert",
        "task=sst2",
        "head=linear",
        "freeze=frozen",
        "data.max_length=9999",  # refused by each cell's preflight: recorded, nothing trained
        f"runs_dir={tmp_path}/runs",
        f"results_dir={tmp_path}/results",
        "report_file=null",
    ]
    proc = bench_in_this_process("-m", *line, "seed=1,2,3")
    assert proc.returncode == 0, proc.stderr[-3000:]  # each cell is recorded failed
    results = sorted((tmp_path / "runs").rglob("result.json"))
    assert [json.loads(p.read_text())["status"] for p in results] == ["failed"] * 3
    assert validated == []  # the plan composed all three
    seeds = [[x for x in o if x.startswith("seed=")] for o in composed]
    jobs = Counter(s[0] for s in seeds if s and "," not in s[0])
    # once in the launch's plan, once in the launcher, for each of the three cells
    assert jobs == {"seed=1": 2, "seed=2": 2, "seed=3": 2}
    # the whole sweep is composed by Hydra's own launch (its mode, its multirun config) only
    assert len(composed) - jobs.total() <= 3
