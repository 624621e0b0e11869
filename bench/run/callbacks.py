"""Hydra callbacks: check a sweep before it starts; collect and report at its end.

Hydra turns a callback's exceptions into mere warnings and a sweep would end with status 0,
so both hooks end the process themselves (:class:`SystemExit`) when something is wrong:
status 2 for a sweep refused before training, 1 when its results could not be written.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench.errors import ConfigError, HeadbenchError
from bench.results import adequacy
from bench.results.collect import (
    collect,
    dropped_at_launch,
    launch_refusal,
    print_summary,
    read_results,
    results_lock,
)
from bench.results.run_records import log_launch_event
from bench.run.packing import PackCheck
from bench.run.plan import plan
from bench.run.preflight import SweepCheck
from bench.run.trackers import check_logger


def _refuse(message: str) -> NoReturn:
    """Refuse the sweep: print why (a closed stderr pipe does not let it launch) and exit 2."""
    with contextlib.suppress(OSError):  # `2>&1 | head -1`: Hydra would call it a mere warning
        print(message, file=sys.stderr)
    sys.exit(2)


class CollectResults(Callback):
    """Check a sweep before it starts; collect its results when it ends.

    Runs in the launching process, whichever launcher runs the cells.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Stop before training when the sweep cannot be run as asked.

        That is: a cell's run directory cannot be made (a required key unset, a name with
        a path separator), the run or results directory is not writable, two cells
        would write the same run directory, the chosen ``logger`` needs an extra that
        is not installed, ``runtime.cells_per_gpu`` cells would not fit on the GPU
        (:mod:`bench.run.packing`), or the collect at its end would drop cells that
        ``results_dir`` holds from elsewhere (:func:`bench.results.collect.dropped_at_launch`).
        """
        # unresolved, as Hydra's sweeper reads them: an interpolated value (e.g.
        # head.label=linear-d${head.dropout}) resolves per job, not against the sweep's config
        task = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
        assert isinstance(task, list)
        overrides = [str(o) for o in task]
        values = SweepCheck()  # a value no cell can use, or cells sharing a run directory
        pack = PackCheck()  # hydra/launcher=gpu_pack: refuse to over-pack the GPU

        def check(cfg: DictConfig) -> None:
            values(cfg)
            pack(cfg)

        try:
            check_logger(config)
            cells = plan("", overrides, multirun=True, check=check, base=config)
            pack.verdict()
        except (HydraException, OmegaConfBaseException) as err:
            _refuse(f"error composing the sweep: {err}")
        except ConfigError as err:
            _refuse(f"error: {err}")
        refusal = values.verdict(cells)
        if refusal:
            _refuse(refusal)
        results_dir = config.get("results_dir")
        if results_dir:  # its end would refuse to collect: refuse now, before training
            try:
                outside, missing = dropped_at_launch(
                    results_dir, config.hydra.sweep.dir, [cell.run_dir for cell in cells]
                )
            except HeadbenchError as err:
                _refuse(f"error: {err}")
            if outside or missing:
                message = launch_refusal(results_dir, config.hydra.sweep.dir, outside, missing)
                _refuse(f"error: {message}")
        command = " ".join(["python -m bench -m", *(shlex.quote(o) for o in overrides)])
        sweep_dir = Path(config.hydra.sweep.dir)
        planned = [
            cell.run_dir.relative_to(sweep_dir).as_posix()
            if cell.run_dir.is_relative_to(sweep_dir)
            else cell.run_dir.as_posix()
            for cell in cells
        ]
        log_launch_event(sweep_dir, "launch", command=command, planned=planned)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Collect ``<results_dir>/results.csv``, print a summary, write the HTML report.

        The summary ends with the adequacy of each head's search (:func:`warn_adequacy`).

        Collects the sweep directory alone: a results directory that holds cells of other
        run directories is left as it is, and the sweep exits 1 with collect's message,
        which names the command that collects every root together.
        """
        results_dir = config.results_dir
        try:
            # The report is built under the results lock too: a sweep sharing the results
            # directory cannot publish a fuller table between this collect and this report.
            lock = results_lock(results_dir) if results_dir else contextlib.nullcontext()
            with lock:
                self._collect_and_report(config)
        except (OSError, HeadbenchError) as err:
            sys.exit(f"error: the results were not collected into {results_dir}: {err}")

    @staticmethod
    def _collect_and_report(config: DictConfig) -> None:
        # matplotlib and the statistics: not at the start of every sweep
        from bench.report import build_context, load_inputs, write_report
        from bench.report.readme import README, not_generated_message, results_folder, write_readme

        table = collect([config.hydra.sweep.dir], config.results_dir)
        print_summary(table)
        warn_adequacy(config.hydra.sweep.dir)
        report_file = config.get("report_file")
        readme = bool(config.get("results_readme", False))
        if not config.results_dir or table.empty or not (report_file or readme):
            return
        # The results are written whatever happens below: each output says why it is not.
        try:  # the statistics, once for both outputs
            ctx = build_context(load_inputs(config.results_dir))
        except Exception as err:
            _not_written("the report and the results README", err)
            return
        if report_file:
            try:
                path = write_report(ctx, report_file)
            except Exception as err:
                _not_written("the report", err)
            else:
                print(f"report: {path}")
        if readme:
            try:
                written = write_readme(ctx.inputs, ctx.scores, ctx.comparisons)
            except Exception as err:
                _not_written("the results README", err)
            else:
                if written is None:
                    folder = results_folder(ctx.inputs.source)
                    print(f"note: {not_generated_message(folder / README)}")
                else:
                    print(f"README: {written}")


def warn_adequacy(sweep_dir: str | Path) -> None:
    """Print the adequacy line of a sweep's cells; a warning naming each flagged setting × head.

    Args:
        sweep_dir: The sweep's run directory (its ``result.json`` files are read).
    """
    frame = adequacy.adequacy(read_results([sweep_dir])[0])
    line, flagged = adequacy.summary(frame), adequacy.flagged_lines(frame)
    if line:
        print("\n  ".join([f"warning: {line}:", *flagged]) if flagged else line)


def _not_written(what: str, err: Exception) -> None:
    """Say on stderr why a sweep's output was not written (its results were)."""
    print(f"error: {what} could not be built: {type(err).__name__}: {err}", file=sys.stderr)
