"""Hydra callbacks: stop a sweep whose cells share a run dir; collect and report at its end."""

from __future__ import annotations

import shlex
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from bench.report import build_report
from bench.results.collect import collect, print_summary
from bench.results.run_records import log_launch_event
from bench.run.plan import collision_message, collisions, plan


class CollectResults(Callback):
    """Check a sweep before it starts; collect its results when it ends.

    Runs in the launching process, whichever launcher runs the cells.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Stop before training if two cells would write the same run directory."""
        overrides = list(config.hydra.overrides.task)
        shared = collisions(plan("", overrides, multirun=True))
        if shared:  # SystemExit: Hydra turns a callback's exceptions into mere warnings
            sys.exit(f"error: {collision_message(shared)}")
        command = " ".join(["python -m bench -m", *(shlex.quote(o) for o in overrides)])
        log_launch_event(config.hydra.sweep.dir, "launch", command=command)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Collect ``<results_dir>/results.csv``, print a summary, write the HTML report."""
        table = collect([config.hydra.sweep.dir], config.results_dir)
        print_summary(table)
        report_file = config.get("report_file")
        if report_file and config.results_dir and not table.empty:
            try:
                path = build_report(config.results_dir, report_file)
            except Exception as err:  # the results are written; say why the page is not
                print(
                    f"error: the report could not be built: {type(err).__name__}: {err}",
                    file=sys.stderr,
                )
            else:
                print(f"report: {path}")
