"""Hydra callbacks: collect a sweep's results when the multirun ends."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bench.collect import collect, print_summary


class CollectResults(Callback):
    """After a multirun, write ``<results_dir>/results.csv`` and print a summary table."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Collect every result under the sweep directory."""
        table = collect([config.hydra.sweep.dir], config.results_dir)
        print_summary(table)
