"""The dry run's cost projection: planted measurements, the process-hours recomputed here."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from bench.run import projection
from bench.run.plan import PlannedCell
from bench.run.resume import CellState
from conftest import bench_in_this_process

KEY = {"task": "sst2", "encoder": "tiny_bert", "freeze_label": "frozen", "head_label": "linear"}


def _record(size: int, epochs: int, wall: float, trials: float | None = None, **extra) -> dict:
    """A cells.json record of a finished linear cell; ``trials``: its search's seconds (2)."""
    record = {
        "cell": KEY | {"seed": 1, "train_size": size},
        "status": "ok",
        "config": {"trainer": {"max_epochs": epochs}, "data": {"train_size": size}},
        "hardware": {"gpu": None},
        "wall_time_s": wall,
    }
    if trials is not None:
        record["search"] = {"scores": {"1": 0.5, "2": 0.6}, "train_time_s": trials}
    return record | extra


def test_a_dry_run_projects_the_planted_costs(tmp_path, data_dir):
    walls, searches = [1000.0, 3000.0, 1400.0], [800.0, 800.0, 800.0]  # at 32 examples × 2 epochs
    planted = [_record(32, 2, w, s) for w, s in zip(walls, searches, strict=True)]
    planted += [
        _record(16, 1, 50.0),  # farther from 64 × 2 than 32 × 2: not used
        _record(32, 2, 1.0, hardware={"gpu": "NVIDIA H200"}),  # another device
        _record(32, 2, 9e9, status="failed"),  # not a finished run
    ]
    measured = tmp_path / "results" / "old"
    measured.mkdir(parents=True)
    (measured / "cells.json").write_text(json.dumps(planted))
    runs = tmp_path / "runs"
    stored = runs / "sst2/tiny_bert/linear/frozen/trials/trial=1/trial.json"
    stored.parent.mkdir(parents=True)
    stored.write_text("{}")  # one of linear's two trials is stored: not trained again
    proc = bench_in_this_process(
        "--dry-run", "-m", "task=sst2", "encoder=tiny_bert", "head=linear,mean_linear",
        "freeze=frozen", "seed=1,2", "data.train_size=64", "selection.size=20",
        "trainer.max_epochs=2", "trainer.accelerator=cpu", "search=random", "search.trials=2",
        f"data.dir={data_dir}", f"runs_dir={runs}", f"results_dir={tmp_path}/results/new",
        "report_file=null",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # recomputed: a run is a seed's cell (its wall time) or a trial (its search's mean)
    per_run = np.mean([*walls, *(s / 2 for s in searches)]) * (64 * 2) / (32 * 2)
    linear_runs = 2 + 1  # two seeds, one trial not stored yet
    hours = linear_runs * per_run / 3600
    total = re.search(
        r"cost: ([\d.]+) process-hours projected for (\d+) of (\d+) runs", proc.stdout
    )
    assert total, proc.stdout
    assert float(total[1]) == round(hours, 2) and int(total[2]) == 3
    assert int(total[3]) == 3 + 2 + 2  # mean_linear: two seeds, two trials, not measured
    assert "4 runs of 1 setting × head not measured" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if " linear " in line and "old" in line)
    assert f"{per_run:,.0f}" in row and f"{hours:.2f}" in row and "scaled ×2" in row


def test_the_sweeps_own_finished_cells_are_measured_on_their_device(tmp_path):
    done = tmp_path / "seed=1"
    done.mkdir()
    (done / "result.json").write_text(json.dumps(_record(64, 2, 120.0, 60.0)))
    cells = [
        PlannedCell((), done, CellState("done"), False),
        PlannedCell((), tmp_path / "seed=2", CellState("pending"), True),
    ]
    found = projection.measurements(cells, None)
    assert found["seconds"].tolist() == [120.0, 30.0] and set(found["source"]) == {"this sweep"}
    planned = pd.DataFrame([KEY | {"train_size": 64, "max_epochs": 2, "device": "CPU"}])
    planned = planned.assign(whole=67349, runs=5)
    frame = projection.project(planned, found)
    assert frame["hours"].item() == 5 * np.mean([120.0, 30.0]) / 3600
    gpu = projection.project(planned.assign(device="NVIDIA H200"), found)
    assert gpu["hours"].isna().item() and gpu["measured"].item() == "no measurement on NVIDIA H200"
