"""The adequacy check: a planted edge choice and an unstopped run are flagged, in the frames,
the report and at the end of a real (tiny) sweep; the committed flags recomputed here."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.report.budget import budget_section
from bench.report.context import ReportContext
from bench.report.inputs import ReportInputs
from bench.report.style import Palette
from bench.results import adequacy
from conftest import ROOT, bench_in_this_process

RESULTS = ROOT / "results"
GRID = {"frozen_head_lr": [1e-3, 1e-2, 1e-1], "weight_decay": [0.0, 0.1, 1.0], "ratio": [1, 10]}


def _record(head: str, seed: int, lr: float, wd: float, best: int, **selection: Any) -> dict:
    cell = {"task": "rte", "encoder": "tiny_bert", "head_label": head, "freeze_label": "frozen"}
    return {
        "cell": cell | {"seed": seed, "train_size": 64},
        "status": "ok",
        "config": {
            "freeze": {"name": "frozen"},
            "search": {"name": "random", "trials": 9, "space": {"frozen": GRID}},
            "trainer": {"max_epochs": 3},
        },
        "search": {"selected_config": {"frozen_head_lr": lr, "weight_decay": wd, "ratio": 10}},
        "selection": {"best_epoch": best, **selection},
    }


def _planted() -> list[dict]:
    return [
        # the largest rate by 3 of 5 seeds: flagged
        *(_record("edge", s, 1e-1 if s <= 3 else 1e-2, 0.1, 1) for s in range(1, 6)),
        # the smallest rate by 2 of 5, weight decay 0 (a hard bound) by all: adequate
        *(_record("fine", s, 1e-3 if s <= 2 else 1e-2, 0.0, 1) for s in range(1, 6)),
        # the last epoch by 3 of 5 seeds, not stopped early: flagged
        *(_record("late", s, 1e-2, 0.1, 2 if s <= 3 else 0) for s in range(1, 6)),
        # the last epoch too, but early stopping ended each run: adequate
        *(_record("stopped", s, 1e-2, 0.1, 2, stopped_early=True) for s in range(1, 6)),
        # ran to max_epochs, its best epoch earlier: unstopped all the same
        *(_record("ran_out", s, 1e-2, 0.1, 0, stopped_early=False) for s in range(1, 4)),
        # the largest weight decay by its only 2 seeds (fewer than 3: all of them flag)
        *(_record("few", s, 1e-2, 1.0, 0) for s in (1, 2)),
        {**_record("failed", 1, 1e-1, 1.0, 2), "status": "failed"},  # no choice to judge
    ]


def test_a_planted_edge_choice_and_an_unstopped_run_are_flagged():
    found = adequacy.adequacy(_planted()).set_index("head_label")
    assert found["adequate"].to_dict() == {
        "edge": False,
        "fine": True,
        "late": False,
        "stopped": True,
        "ran_out": False,
        "few": False,
    }
    assert found["runs"].to_dict() == {
        "edge": 5,
        "fine": 5,
        "late": 5,
        "stopped": 5,
        "ran_out": 3,
        "few": 2,
    }
    assert found.loc["edge", "edge"] == "frozen_head_lr=0.1 ×3"
    assert found.loc["late", "edge"] == "epoch=3/3 ×3"
    assert found.loc["ran_out", "edge"] == "epoch=1/3 ×3"
    assert found.loc["few", "edge"] == "weight_decay=1 ×2"
    # the two-value option and the others are counted, never flagged
    assert found.loc["fine", "counts"] == (
        "frozen_head_lr: 0.01 ×3, 0.001 ×2; weight_decay: 0 ×5; ratio: 10 ×5; epoch: 2/3 ×5"
    )


@pytest.mark.parametrize(
    ("option", "value", "grid", "edge"),
    [
        ("weight_decay", 0.0, [0.0, 0.1, 1.0], False),  # a hard bound
        ("warmup_ratio", 0.0, [0.0, 0.06, 0.1], False),
        ("head.dropout", 0.0, [0.0, 0.1, 0.3], False),
        ("weight_decay", 1.0, [0.0, 0.1, 1.0], True),
        ("frozen_head_lr", 1e-4, [1e-4, 1e-3, 1e-2], True),
        ("frozen_head_lr", 1e-4, [1e-4, 1e-2], None),  # two values: counted only
        ("pool", "cls", ["cls", "mean", "max"], None),  # categorical: counted only
        ("flag", True, [True, False, True], None),
    ],
)
def test_which_values_are_edges(option, value, grid, edge):
    assert adequacy.is_edge(option, value, grid) is edge


def test_the_report_and_the_scores_frame_say_the_same(tmp_path):
    cells = _planted()
    inputs = ReportInputs("t", pd.DataFrame(), pd.DataFrame(), cells, {})
    ctx = ReportContext(
        inputs, Palette([], []), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), False
    )
    section = budget_section(ctx)
    assert section is not None and "Adequacy: 4 of 6 setting × head flagged" in section.body
    scores = pd.DataFrame(
        {
            "task": "rte",
            "encoder": "tiny_bert",
            "freeze_label": "frozen",
            "train_size": 64,
            "head_label": ["edge", "fine", "absent"],
            "mean": 0.5,
        }
    )
    marked = adequacy.with_adequacy(scores, cells)
    assert marked["adequate"].tolist() == [False, True, pd.NA]
    assert marked["edge"].tolist()[:2] == ["frozen_head_lr=0.1 ×3", ""]


def _independent(cells: list[dict]) -> dict[tuple, bool]:
    """Per setting × head, whether it is flagged: the rule recomputed from the records alone."""
    edges: dict[tuple, Counter] = defaultdict(Counter)
    runs: Counter = Counter()
    for c in cells:
        if c.get("status") != "ok":
            continue
        cell, config = c["cell"], c["config"]
        size = cell.get("train_size") or config["data"].get("train_size") or 0
        key = (cell["task"], cell["freeze_label"], int(size), cell["head_label"])
        runs[key] += 1
        grid = config["search"]["space"][c["search"]["family"]]
        for option, value in c["search"]["selected_config"].items():
            values = grid[option]
            bound = 0.0 if option in ("weight_decay", "warmup_ratio") else None
            if len(set(values)) >= 3 and value in (min(values), max(values)) and value != bound:
                edges[key][option] += 1
        last = c["selection"]["best_epoch"] == config["trainer"]["max_epochs"] - 1
        edges[key]["epochs"] += last
    return {k: any(n >= min(3, runs[k]) for n in edges[k].values()) for k in runs}


@pytest.mark.parametrize("name", ["fair_heads", "fair_heads_gpu"])
def test_the_committed_flags_are_the_rule_recomputed(name):
    if not (RESULTS / name / "cells.json").is_file():
        pytest.skip(f"{name} not committed")
    cells = json.loads((RESULTS / name / "cells.json").read_text(encoding="utf-8"))
    scores = pd.read_csv(RESULTS / name / "scores.csv")
    key = ["task", "freeze_label", "train_size", "head_label"]
    got = {tuple(k): not bool(a) for *k, a in scores[[*key, "adequate"]].itertuples(index=False)}
    assert got == _independent(cells)
    if name == "fair_heads":  # the count: 11 of 25 frozen heads chose 3e-2, the top
        frozen = scores[scores["freeze_label"] == "frozen"]
        assert len(frozen) == 25
        assert frozen["edge"].fillna("").str.contains("frozen_head_lr=0.03 ×10").sum() == 11
        assert (~scores["adequate"]).sum() == 31


# --- a real tiny sweep: its chosen rate at the grid's edge, its one epoch the last -----------


@pytest.mark.slow
def test_a_tiny_sweep_flags_its_edge_choice_and_unstopped_runs(tmp_path, data_dir):
    # two of the three rates diverge (Adam's first step overflows float32): the smallest wins;
    # one epoch: every run's selected epoch is its last
    proc = bench_in_this_process(
        "-m", "task=sst2", "encoder=tiny_bert", "head=linear", "freeze=frozen", "seed=1,2,3",
        "data.train_size=64", "selection.size=20", "data.max_length=32", "trainer.max_epochs=1",
        "search=random", "search.trials=3", "search.space.frozen.frozen_head_lr=[1e-3,1e299,1e300]",
        "search.space.frozen.weight_decay=[0.0]", f"data.dir={data_dir}",
        f"runs_dir={tmp_path}/runs", f"results_dir={tmp_path}/results", "report_file=null",
        "results_readme=false",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    scores = pd.read_parquet(tmp_path / "results" / "scores.parquet")
    assert scores["adequate"].tolist() == [False]
    assert scores["edge"].tolist() == ["frozen_head_lr=0.001 ×3, epoch=1/1 ×3"]
    warning = [line for line in proc.stdout.splitlines() if "adequacy:" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: adequacy: 1 of 1 ")
    results = [json.loads(p.read_text()) for p in Path(tmp_path / "runs").rglob("result.json")]
    chosen = {r["search"]["selected_config"]["frozen_head_lr"] for r in results}
    assert len(results) == 3 and chosen == {1e-3}
    assert all(r["selection"]["best_epoch"] == 0 for r in results)
    assert not math.isnan(scores["mean"].iloc[0])
