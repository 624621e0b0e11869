"""Whether ``fair_heads_gpu``'s fine-tuning cells compile their encoder, from ``perf.py``'s figures.

The rule was written down before any figure existed (docs/gpu.md, "How to decide"):

- a side's **speed** is its running speed in ``perf.py``'s ``finetune`` part, the training
  examples/s after the first batch (``examples_per_s_after_first``), beside the seconds that
  first batch took (compilation lands there);
- a side **counts** only if its dev accuracy is within the part's ±0.5 points of eager
  headbench's (medians over the part's runs);
- compiling is paid once per ``gpu_pack`` worker, which trains its share of every cell and
  search trial of a launch one after another, so a side **costs** its first batch plus its
  share of the training at its running speed. The side that costs least is chosen; eager
  ``headbench`` when neither compiled side was measured, failed, or does not count.

The choice is printed as the overrides that pin it in ``conf/experiment/fair_heads_gpu.yaml``
(``fast_path.full.*``), so ``benchmarks/device_plan.sh`` hands them to the launch on the GPU
that measured them, and the preset is edited to the same values when the results come home
(the config hash is the same either way)::

    python benchmarks/compile_choice.py results/perf_gpu.json --tasks rte,mrpc,stsb,cola

Exit status 3 (nothing printed on stdout) when the ``finetune`` part has no eager headbench
side yet: then nothing is decided, and no fine-tuning cell should run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.atomic import atomic_write_json

#: The part's accuracy tolerance (points), as ``perf.py`` states its goal.
ACCURACY_POINTS = 0.5
#: Each candidate side of ``perf.py``'s ``finetune`` part and what pins it in the preset.
SIDES: dict[str, tuple[str, ...]] = {
    "headbench": ("fast_path.full.compile=false", "fast_path.full.pad_to_multiple_of=null"),
    "headbench_compile": (
        "fast_path.full.compile=default",
        "fast_path.full.pad_to_multiple_of=null",
    ),
    "headbench_graphs": (
        "fast_path.full.compile=reduce-overhead",
        "fast_path.full.pad_to_multiple_of=8",
    ),
}
EXIT_UNDECIDED = 3


def worker_examples(
    train_rows: Mapping[str, int],
    *,
    selection: int,
    epochs: int,
    trainings_per_task: int,
    workers: int,
) -> float:
    """Training examples one ``gpu_pack`` worker goes through in a launch, at most.

    Args:
        train_rows: Rows of each launched task's training file.
        selection: Examples held out of train for selection (not trained on).
        epochs: ``trainer.max_epochs`` (early stopping can only make it fewer).
        trainings_per_task: Search trials and seed cells of every head, per task.
        workers: ``runtime.cells_per_gpu``.

    Returns:
        The examples divided evenly over the workers.
    """
    trained = sum(max(rows - selection, 0) for rows in train_rows.values())
    return trained * epochs * trainings_per_task / workers


def side_figures(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per side of the ``finetune`` part, the medians the rule reads, from its runs so far.

    Read from the runs rather than the part's summary, which ``perf.py`` writes only when
    every run of the part is done: a part cut after its headbench sides still decides.

    Args:
        runs: ``state["finetune"]["runs"]``.

    Returns:
        Side -> ``examples_per_s_after_first``, ``first_batch_s`` and ``dev_accuracy``
        (medians over its runs), for each side of :data:`SIDES` with a running speed.
    """
    out: dict[str, dict[str, float]] = {}
    for name in SIDES:
        mine = [r for r in runs if r.get("framework") == name]
        speeds = [r["throughput"].get("examples_per_s_after_first") for r in mine]
        firsts = [r["throughput"].get("first_batch_s") for r in mine]
        if not mine or None in speeds or None in firsts:
            continue
        out[name] = {
            "examples_per_s_after_first": statistics.median(speeds),
            "first_batch_s": statistics.median(firsts),
            "dev_accuracy": statistics.median([r["dev_accuracy"]["final"] for r in mine]),
        }
    return out


def choose(figures: Mapping[str, Mapping[str, float]], share: float) -> dict[str, Any]:
    """Apply the rule to the ``finetune`` part's figures (:func:`side_figures`).

    Args:
        figures: Side -> its running speed, first batch (s) and dev accuracy (0-1).
        share: Training examples one worker goes through (:func:`worker_examples`).

    Returns:
        ``side`` (a key of :data:`SIDES`, or None when undecided), ``overrides``, ``why``
        (one line), and ``sides``: per side its figures, accuracy gap (points), whether it
        counts and its estimated seconds for the share.
    """
    if "headbench" not in figures:
        return {
            "side": None,
            "overrides": [],
            "why": "the finetune part has no eager headbench run with a running speed yet",
            "sides": {},
        }
    base_acc = figures["headbench"]["dev_accuracy"]
    sides: dict[str, dict[str, Any]] = {}
    for name in SIDES:
        if name not in figures:
            sides[name] = {"counts": False, "why": "not measured (or failed)"}
            continue
        side = figures[name]
        gap = 100 * abs(side["dev_accuracy"] - base_acc)
        counts = gap <= ACCURACY_POINTS
        sides[name] = {
            **side,
            "accuracy_gap_points": gap,
            "counts": counts,
            "estimated_s": side["first_batch_s"] + share / side["examples_per_s_after_first"],
            **({} if counts else {"why": f"dev accuracy {gap:.2f} points from eager's"}),
        }
    best = min((n for n, s in sides.items() if s["counts"]), key=lambda n: sides[n]["estimated_s"])
    eager_s = sides["headbench"]["estimated_s"]
    why = (
        f"{best}: about {sides[best]['estimated_s']:.0f} s for a worker's "
        f"{share:,.0f} training examples"
        + ("" if best == "headbench" else f", against eager's {eager_s:.0f} s")
    )
    return {"side": best, "overrides": list(SIDES[best]), "why": why, "sides": sides}


def _train_rows(tasks: Sequence[str], data_dir: str | None) -> dict[str, int]:
    from bench.data.sequence_datamodule import load_split
    from bench.data.tasks import TASKS

    return {t: len(load_split(TASKS[t], TASKS[t].train, data_dir)["label"]) for t in tasks}


def _preset_counts(tasks: Sequence[str]) -> dict[str, int]:
    """Selection size, epochs and trainings per task of the preset's fine-tuning cells."""
    from bench.paths import config_dir
    from bench.report.preset_grid import swept_values
    from benchmarks.perf import _compose

    cfg = _compose(["experiment=fair_heads_gpu", "freeze=full", f"task={tasks[0]}", "seed=1"])
    swept = swept_values(config_dir() / "experiment" / "fair_heads_gpu.yaml")
    heads, seeds = len(swept["head"]), len(swept["seed"])
    return {
        "selection": int(cfg.selection.size),
        "epochs": int(cfg.trainer.max_epochs),
        "trainings_per_task": heads * (int(cfg.search.trials) + seeds),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the overrides of the chosen side; write the decision to ``--record``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("perf_json", type=Path, help="perf.py's output (its finetune part)")
    parser.add_argument("--tasks", default="rte,mrpc,stsb,cola", help="the launch's tasks")
    parser.add_argument("--workers", type=int, default=4, help="runtime.cells_per_gpu")
    parser.add_argument("--record", type=Path, help="write the decision here as JSON")
    args = parser.parse_args(argv)
    from bench.data.location import default_data_dir

    tasks = args.tasks.split(",")
    state = json.loads(args.perf_json.read_text()) if args.perf_json.is_file() else {}
    counts = _preset_counts(tasks)
    share = worker_examples(_train_rows(tasks, default_data_dir()), workers=args.workers, **counts)
    decision = choose(side_figures((state.get("finetune") or {}).get("runs") or []), share)
    decision.update(share_examples=share, tasks=tasks, workers=args.workers, **counts)
    decision["finetune_settings"] = (state.get("finetune") or {}).get("settings")
    if args.record:
        atomic_write_json(args.record, decision)
    print(f"[compile_choice] {decision['why']}", file=sys.stderr)
    for name, side in decision["sides"].items():
        print(f"[compile_choice]   {name}: {json.dumps(side)}", file=sys.stderr)
    if decision["side"] is None:
        return EXIT_UNDECIDED
    print(" ".join(decision["overrides"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
