"""benchmarks/packed_rate.py: packed trainings' rates by how many ran at once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from benchmarks import packed_rate as pr
from conftest import ROOT

T0 = 1_800_000_000.0


def _result(runs: Path, rel: str, start: float, end: float, rate: float, **extra) -> None:
    path = runs / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "status": "ok",
        "finished_at": datetime.fromtimestamp(T0 + end, UTC).isoformat().replace("+00:00", "Z"),
        "wall_time_s": end - start,
        "throughput": {"examples_per_s_after_first": rate},
        "hardware": {"gpu": "NVIDIA H100 80GB HBM3"},
        **extra,
    }
    path.write_text(json.dumps(record))


def _sampled_concurrency(spans: list[tuple[float, float]], i: int) -> float:
    """The same quantity by brute force: count running spans on a fine time grid."""
    start, end = spans[i]
    grid = np.linspace(start, end, 200_001)[:-1] + (end - start) / 400_000
    running = sum(((grid >= s) & (grid < e)).astype(float) for s, e in spans)
    return float(running.mean())


def test_concurrency_and_levels_match_a_brute_force_count(tmp_path):
    runs = tmp_path / "runs"
    spans = [(0, 10), (0, 10), (10, 15), (10, 15), (12, 20), (2, 8)]
    rates = [100, 110, 200, 210, 180, 90]
    for k, ((s, e), rate) in enumerate(zip(spans, rates, strict=True)):
        _result(runs, f"rte/minilm/h{k}/full/seed=1/result.json", s, e, rate)
    _result(runs, "rte/minilm/x/full/seed=2/result.json", 0, 5, 999, status="failed")
    _result(runs, "rte/minilm/x/frozen/seed=1/result.json", 0, 5, 999)
    _result(runs, "mrpc/minilm/x/full/seed=1/result.json", 0, 5, 999)
    trainings = pr.read_trainings(runs, task="rte", freeze="full")
    assert len(trainings) == 6  # not the failed one, the frozen one or the other task
    by_start = sorted(zip(spans, rates, strict=True))
    assert [t.rate for t in trainings] == [r for _, r in by_start]
    ordered = [span for span, _ in by_start]
    for i, training in enumerate(trainings):
        assert pr.concurrency(training, trainings) == pytest.approx(
            _sampled_concurrency(ordered, i), abs=1e-3
        )
    # (0,10)x2 with (2,8) inside: 2.6 and 3 -> levels 3; (10,15)x2 with (12,20): 2.6 -> 3;
    # (12,20): 1.75 -> 2
    assert pr.rate_by_level(trainings) == {
        2: {"trainings": 1, "median_rate": 180, "total_rate": 360},
        3: {"trainings": 5, "median_rate": 110, "total_rate": 330},
    }


def test_the_committed_h100_lease_prints_its_levels(capsys):
    runs = ROOT / "results" / "fair_heads_gpu" / "runs"
    if not (runs / "rte").is_dir():
        pytest.skip("fair_heads_gpu has no RTE runs committed")
    pr.main([str(runs), "--task", "rte", "--freeze", "full", "--gpu", "H100"])
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| at once | trainings | median examples/s each | times the level |"
    assert len(table) >= 3


def test_a_folder_without_trainings_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no finished training"):
        pr.main([str(tmp_path)])
    with pytest.raises(SystemExit, match="not a folder"):
        pr.main([str(tmp_path / "missing")])
