"""Hydra callbacks: refuse a sweep whose cells share a run directory; collect at the end."""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bench.collect import collect, print_summary


class CollectResults(Callback):
    """Check a sweep before it starts; collect its results when it ends.

    Runs in the launching process, whichever launcher runs the cells.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Stop before training if two cells would write the same run directory."""
        from bench.plan import collision_message, collisions, plan

        overrides = list(config.hydra.overrides.task)
        shared = collisions(plan("", overrides, multirun=True))
        if shared:  # SystemExit: Hydra turns a callback's exceptions into mere warnings
            sys.exit(f"error: {collision_message(shared)}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Write ``<results_dir>/results.csv`` and ``.parquet``; print a summary."""
        table = collect([config.hydra.sweep.dir], config.results_dir)
        print_summary(table)
