"""How fast packed trainings went, by how many ran at once, from a sweep's own results.

A ``gpu_pack`` launch (docs/gpu.md) trains several cells on one GPU, and its results say when
each training ended (``finished_at``) and how long it took (``wall_time_s``): together, its
interval. This script reads every ``result.json`` and ``trial.json`` under a run directory,
computes for each training how many trainings were running on average over its interval (its
concurrency, itself included), and groups them by it::

    python benchmarks/packed_rate.py results/fair_heads_gpu/runs --task rte --freeze full

For each concurrency level it prints how many trainings ran at it, their median examples per
second after the first batch (``throughput.examples_per_s_after_first``: a worker's first
batch compiles the encoder and records its CUDA graphs), and that median times the level,
the launch's total rate. If the total rate stops growing with the level, the GPU (or the
host) is saturated and packing more cells buys nothing; if it keeps growing, it does not.
Trainings from different machines should not be pooled: ``--gpu`` keeps one GPU model.
Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.cell import RESULT_FILE, TRIAL_FILE

RESULT_FILES = (RESULT_FILE, TRIAL_FILE)


@dataclass(frozen=True)
class Training:
    """One training's interval and rate.

    Attributes:
        path: Its result file.
        start: Seconds since the epoch when it started (``finished_at - wall_time_s``).
        end: Seconds since the epoch when it ended.
        rate: Training examples per second after its first batch.
    """

    path: Path
    start: float
    end: float
    rate: float


def read_trainings(
    runs: Path, task: str | None = None, freeze: str | None = None, gpu: str | None = None
) -> list[Training]:
    """Every training under ``runs`` that records its interval and rate, in start order.

    Args:
        runs: A sweep's run directory (``<task>/<encoder>/<head>/<freeze>/...``).
        task: Keep this task only (the first level of the path).
        freeze: Keep this freezing label only (the fourth level).
        gpu: Keep results whose ``hardware.gpu`` contains this text.
    """
    found = []
    for path in sorted(runs.rglob("*.json")):
        if path.name not in RESULT_FILES:
            continue
        parts = path.relative_to(runs).parts
        if (task and parts[0] != task) or (freeze and (len(parts) < 4 or parts[3] != freeze)):
            continue
        record = json.loads(path.read_text())
        rate = (record.get("throughput") or {}).get("examples_per_s_after_first")
        if record.get("status") != "ok" or not rate or not record.get("finished_at"):
            continue
        if gpu and gpu not in str((record.get("hardware") or {}).get("gpu")):
            continue
        end = datetime.fromisoformat(record["finished_at"].replace("Z", "+00:00")).timestamp()
        found.append(Training(path, end - float(record["wall_time_s"]), end, float(rate)))
    return sorted(found, key=lambda t: t.start)


def concurrency(training: Training, trainings: Sequence[Training]) -> float:
    """How many trainings ran, on average over ``training``'s interval (itself included)."""
    length = training.end - training.start
    if length <= 0:
        return 1.0
    overlap = sum(
        max(0.0, min(training.end, other.end) - max(training.start, other.start))
        for other in trainings
    )
    return overlap / length


def rate_by_level(trainings: Sequence[Training]) -> dict[int, dict[str, float]]:
    """Per concurrency level (rounded): trainings, median rate, and the level times it."""
    levels: dict[int, list[float]] = {}
    for training in trainings:
        level = max(1, round(concurrency(training, trainings)))
        levels.setdefault(level, []).append(training.rate)
    return {
        level: {
            "trainings": len(rates),
            "median_rate": statistics.median(rates),
            "total_rate": level * statistics.median(rates),
        }
        for level, rates in sorted(levels.items())
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Print the table for a run directory."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", type=Path, help="a sweep's run directory")
    p.add_argument("--task", help="one task (the path's first level)")
    p.add_argument("--freeze", help="one freezing label (the path's fourth level), e.g. full")
    p.add_argument("--gpu", help="keep results whose hardware.gpu contains this text")
    args = p.parse_args(argv)
    if not args.runs.is_dir():
        raise SystemExit(f"{args.runs}: not a folder (a sweep's run directory)")
    trainings = read_trainings(args.runs, args.task, args.freeze, args.gpu)
    if not trainings:
        raise SystemExit(f"{args.runs}: no finished training records its interval and rate")
    print("| at once | trainings | median examples/s each | times the level |")
    print("|---|---|---|---|")
    for level, row in rate_by_level(trainings).items():
        print(
            f"| {level} | {row['trainings']} | {row['median_rate']:.0f} | {row['total_rate']:.0f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
