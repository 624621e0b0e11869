"""Command line: ``python -m bench [overrides]`` trains one cell, ``-m`` sweeps.

Re-running a sweep resumes it: cells whose result says ``ok`` for the same config are
skipped; failed and diverged cells are re-run with ``+rerun_failed=true`` (those that
failed for the machine's sake, a full disk or memory, are retried unless
``+rerun_environmental=false``); ``+force=true`` re-runs everything. The result of an
earlier configuration of a cell is kept in its ``superseded/`` folder, never deleted.
``--dry-run`` lists what a launch would do, with every preflight check, without training.
A command that cannot run, a single run's or a sweep's (a misspelt option, a value no cell
can use, cells sharing a run directory), exits with status 2 and one message before Hydra
writes anything (:mod:`bench.run.preflight`).

A skipped cell's directory is left untouched: Hydra's ``.hydra/`` files are written here
when the cell starts training (``hydra.output_subdir`` is null) and Hydra's job log is
opened only when a line is logged.

Examples:
    python -m bench task=sst2 encoder=minilm head=bilstm freeze=frozen seed=1
    python -m bench -m experiment=quick          # `+experiment=quick` works too
    python -m bench experiment=cpu_heads --dry-run
"""

from __future__ import annotations

import os
import sys
import warnings
from functools import partial
from importlib.util import find_spec
from pathlib import Path
from typing import IO, Any

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench.atomic import atomic_write
from bench.axes.resolvers import register as register_resolvers
from bench.cell import config_hash
from bench.data import selection
from bench.data.location import count_examples
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.paths import config_dir
from bench.results.run_records import log_launch_event
from bench.run import interrupts, loky_worker
from bench.run.logs import route_lightning_logs
from bench.run.plan import PlannedCell, collisions, hydra_context, plan, print_plan
from bench.run.preflight import (
    check_cell,
    check_command,
    compose_single_run,
    runs_here,
)
from bench.run.resume import (
    KEPT_STATES,
    RUNNING,
    CellState,
    ResumePolicy,
    cell_lock,
    cell_state,
    clear_run_outputs,
    should_run,
    supersede,
)
from bench.run.trackers import check_logger

# conf/ derives labels with these resolvers; Hydra resolves them before any task code runs
# (output directories), also in launcher worker processes, which import this module.
register_resolvers()


_MULTIRUN_FLAGS = ("-m", "--multirun")


def _report_skip(hydra_cfg: Any, run_dir: Path, state: CellState) -> None:
    """Say why a cell is not trained, and log it in the sweep's ``launches.jsonl``."""
    hints = {
        "running": " in another process",
        "failed": "; +rerun_failed=true re-runs it",
        "diverged": "; +rerun_failed=true re-runs it",
    }
    if state.state in ("failed", "diverged") and state.retryable:
        hints["failed"] = " (+rerun_environmental=false was given)"
    print(f"skip ({state.state}{hints.get(state.state, '')}): {run_dir}/result.json")
    if hydra_cfg.mode == RunMode.MULTIRUN:
        cell_path = os.path.relpath(run_dir, hydra_cfg.sweep.dir)
        log_launch_event(hydra_cfg.sweep.dir, "skip", cell_path=cell_path, state=state.state)


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    # Imported here: training pulls in torch and Lightning (~8 s), which a skipped cell, a
    # --dry-run and the launching process of a sweep never need.
    from bench.run.search import run_with_search
    from bench.run.train import run

    interrupts.starting()  # a launcher's worker told to stop leaves its queued cells untouched
    hydra_cfg = HydraConfig.get()
    loky_worker.allow_growth(launcher_workers(cfg, hydra_cfg))  # gpu_pack: no restart per cell
    run_dir = Path(hydra_cfg.runtime.output_dir)
    with cell_lock(run_dir) as mine:  # two launches never train one cell at once
        if not start_cell(cfg, hydra_cfg, run_dir, mine):
            return
        route_lightning_logs()
        result = run_with_search(cfg, run_dir, run)
    status = result["status"]
    print(f"{status}: {run_dir}/result.json")
    if status != "ok" and hydra_cfg.mode == RunMode.RUN:
        print(f"reason: {result['reason']}", file=sys.stderr)
        sys.exit(1)


def launcher_workers(cfg: DictConfig, hydra_cfg: Any) -> int:
    """The launcher's worker processes, as many as loky's workers share the machine among.

    Args:
        cfg: The cell's config (``runtime.cells_per_gpu``: gpu_pack's ``n_jobs``).
        hydra_cfg: Its Hydra config (joblib's ``launcher.n_jobs``).

    Returns:
        ``n_jobs`` where it is a positive number; every CPU where it is -1 or not set.
    """
    for n_jobs in (
        OmegaConf.select(hydra_cfg, "launcher.n_jobs", throw_on_resolution_failure=False),
        OmegaConf.select(cfg, "runtime.cells_per_gpu", throw_on_resolution_failure=False),
    ):
        if isinstance(n_jobs, int) and n_jobs > 0:
            return n_jobs
    return os.cpu_count() or 1


def start_cell(cfg: DictConfig, hydra_cfg: Any, run_dir: Path, mine: bool) -> bool:
    """Decide, holding the cell's lock, whether it trains; if so, make its directory ready.

    A cell that should not train (done, failed without ``+rerun_failed``, or trained by
    another process) is reported and left untouched. One that trains has an earlier result
    of another configuration moved to ``superseded/``, its old outputs cleared and its
    ``.hydra/`` config written.

    Args:
        cfg: The cell's config.
        hydra_cfg: Its Hydra config (``HydraConfig.get()`` inside its job).
        run_dir: Its run directory.
        mine: Whether this process holds the cell's lock (:func:`bench.run.resume.cell_lock`).

    Returns:
        True when the cell is to be trained now.
    """
    state = cell_state(run_dir, config_hash(cfg)) if mine else CellState(RUNNING)
    if not should_run(state, ResumePolicy.of(cfg)):
        _report_skip(hydra_cfg, run_dir, state)
        return False
    if state.state in KEPT_STATES:
        kept = supersede(run_dir)
        why = f"{state.state}: {state.reason}" if state.reason else state.state
        print(f"kept the earlier result ({why}) in {kept}")
    clear_run_outputs(run_dir)
    save_job_config(run_dir, cfg, hydra_cfg)
    return True


#: Hydra's own folder of a run directory (written by :func:`save_job_config`).
JOB_CONFIG_DIR = ".hydra"


def save_job_config(run_dir: Path, cfg: DictConfig, hydra_cfg: Any) -> Path:
    """Write ``.hydra/{config,hydra,overrides}.yaml`` as Hydra would, for a cell that trains.

    Hydra's own writing is off (``hydra.output_subdir: null``): it would rewrite the files
    of every cell a launch visits, also of cells it skips, even of one another process is
    training.

    Args:
        run_dir: The cell's run directory.
        cfg: The task config.
        hydra_cfg: ``HydraConfig.get()``.

    Returns:
        The folder written.
    """
    folder = run_dir / JOB_CONFIG_DIR
    files = {
        "config.yaml": OmegaConf.to_yaml(cfg),
        "hydra.yaml": OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})),
        "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.overrides.task),
    }
    for name, text in files.items():
        atomic_write(folder / name, partial(_write_text, text))
    return folder


def _write_text(text: str, handle: IO[str]) -> None:
    handle.write(text)


def _usage_error(message: str) -> None:
    """A bad command: one line on stderr, exit status 2, nothing written."""
    print(message, file=sys.stderr)
    sys.exit(2)


def _check_cell_and_logger(cfg: DictConfig) -> None:
    """Every preflight check of a cell, and that its ``logger`` option can be used."""
    check_cell(cfg, here=runs_here(cfg))
    check_logger(cfg)


def _dry_run(args: list[str]) -> None:
    """List what a launch would do, with every preflight check; exit 2 where it would fail.

    That is: a cell refused by preflight, a sweep whose cells would share a run directory
    (the launch refuses it), or a launcher that would over-pack the GPU. A selection slice
    that a training subset leaves smaller than ``selection.size`` is said (:func:`_capped`),
    and the process-hours of what would run are projected from measured runs
    (:mod:`bench.run.projection`).
    """
    multirun = any(a in _MULTIRUN_FLAGS for a in args)
    overrides = [a for a in args if a not in _MULTIRUN_FLAGS]
    flags = [a for a in overrides if a.startswith("-")]
    if flags:
        _usage_error(
            f"--dry-run takes overrides and -m only; not supported here: {' '.join(flags)}"
        )
    from bench.run import projection
    from bench.run.packing import PackCheck

    pack = PackCheck()
    notes: dict[str, int] = {}
    composed: list[DictConfig] = []  # each cell that will run, checked in the plan's order

    def check(cfg: DictConfig) -> None:
        composed.append(cfg)
        _check_cell_and_logger(cfg)
        pack(cfg)
        note = _capped(cfg)
        if note:
            notes[note] = notes.get(note, 0) + 1

    try:
        cells = plan(config_dir(), overrides, multirun, check=check)
    except (HydraException, OmegaConfBaseException) as err:  # what Hydra itself would report
        _usage_error(f"error composing the sweep: {err}")
    except ConfigError as err:
        _usage_error(f"error: {err}")
    print_plan(cells)
    for note, count in notes.items():
        print(f"selection: {note} ({count} cell{'s' if count > 1 else ''})")
    projection.print_projection(cells, composed)
    try:  # hydra/launcher=gpu_pack: how many cells fit on the GPU at once
        packing = pack.line()
        if packing:
            print(packing)
        pack.verdict()
    except ConfigError as err:
        _usage_error(f"error: {err}")
    if _refused(cells):
        sys.exit(2)


def _refused(cells: list[PlannedCell]) -> bool:
    """Whether a launch would fail: preflight refuses a cell, or cells share a directory."""
    return any(cell.will_run and cell.problem for cell in cells) or bool(collisions(cells))


def _capped(cfg: DictConfig) -> str | None:
    """What the dry run says of a cell whose selection slice is smaller than asked.

    Known without loading data only where the training file is a local GLUE file (its rows
    are counted, not parsed); elsewhere the run's log line says it
    (:func:`bench.data.selection.carve_selection`).
    """
    name = OmegaConf.select(cfg, "selection.name", default="dev")
    size = OmegaConf.select(cfg, "selection.size", default=None)
    train_size = OmegaConf.select(cfg, "data.train_size", default=None)
    carve = OmegaConf.select(cfg, "selection.carve", default=selection.DEFAULT_CARVE)
    if name != "heldout" or not isinstance(size, int) or not isinstance(train_size, int):
        return None
    spec = get_task(cfg.task.name)
    n = count_examples(OmegaConf.select(cfg, "data.dir", default=None), spec)
    if n is None or train_size > n:  # too large a subset: check_train_size refused it
        return None
    held = selection.capped_size(n, train_size, size, carve)
    if not selection.MIN_SIZE <= held < size:  # too small a slice is the run's error too
        return None
    return selection.capped_note(f"{spec.name} train", n, train_size, size)


def _normalise(arg: str) -> str:
    """``+experiment=x`` means ``experiment=x``: the defaults list already has the slot."""
    return arg[1:] if arg.startswith("+experiment=") else arg


def _preflight(args: list[str]) -> None:
    """A bad command exits with status 2 before Hydra writes anything.

    A single run is checked whole here (:func:`bench.run.preflight.check_command`). A sweep
    (``-m``) is checked by its launch callback (:mod:`bench.run.callbacks`), which plans
    it anyway: every cell composed once and its values checked
    (:class:`bench.run.preflight.SweepCheck`), one message and exit 2 before Hydra writes
    ``multirun.yaml``; its own config is composed here first, which Hydra would do with a
    traceback for a config file that does not parse. Hydra's own flags (``--cfg``,
    ``--help``, ``--config-dir``, ...) are Hydra's business.
    """
    flags = [a for a in args if a.startswith("-")]
    if any(flag not in _MULTIRUN_FLAGS for flag in flags):
        return
    if flags:
        message = _sweep_problem([a for a in args if a not in flags])
    else:
        message = check_command(config_dir(), args) or _logger_problem(args)
    if message:
        print(message, file=sys.stderr)
        sys.exit(2)


def _sweep_problem(overrides: list[str]) -> str | None:
    """The message when a sweep's own config does not compose (its cells: its callback)."""
    try:
        with hydra_context(config_dir()):
            hydra = GlobalHydra.instance().hydra
            assert hydra is not None
            hydra.compose_config("config", overrides, run_mode=RunMode.MULTIRUN)
    except (HydraException, OmegaConfBaseException) as err:
        return f"error composing the sweep: {err}"
    except ConfigError as err:
        return f"error: {err}"
    return None


def _logger_problem(args: list[str]) -> str | None:
    """The message when a single run's ``logger`` option cannot be used (a missing extra)."""
    try:
        cfg = compose_single_run(config_dir(), args)
        if cfg is not None:
            check_logger(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        return f"error composing the config: {err}"
    except ConfigError as err:
        return f"error: {err}"
    return None


#: The launcher presets in conf/hydra/launcher/: the plugin module each needs and its extra.
LAUNCHER_PLUGINS = {
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "joblib"),
    "gpu_pack": ("hydra_plugins.hydra_joblib_launcher", "joblib"),  # joblib, one GPU
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
    "ray": ("hydra_plugins.hydra_ray_launcher", "ray"),
}


def plugin_installed(module: str) -> bool:
    """Whether ``module`` (``hydra_plugins.<name>``) can be imported, without importing it.

    ``importlib.util.find_spec`` of a dotted name raises when the parent package is
    missing; that is "not installed" too.
    """
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def missing_launcher(args: list[str]) -> str | None:
    """A message if ``hydra/launcher=<name>`` names a preset whose plugin is not installed.

    Without this check Hydra fails later with "Error locating target
    hydra_plugins...", which does not say what to install.
    """
    for arg in args:
        key, _, name = arg.lstrip("+~").partition("=")
        if key != "hydra/launcher" or name not in LAUNCHER_PLUGINS:
            continue
        module, extra = LAUNCHER_PLUGINS[name]
        if not plugin_installed(module):
            return (
                f"hydra/launcher={name} needs the Hydra plugin {module.split('.')[-1]!r}, "
                f"which is not installed: pip install 'headbench[{extra}]'"
            )
    return None


def main() -> None:
    """Entry point of ``python -m bench`` and the ``headbench`` script."""
    # conf/hydra/launcher/* shadow the launcher plugins' own configs of the same names on
    # purpose: Hydra then validates our presets against the plugins' schemas (a misspelt
    # knob is an error), and warns that this matching is deprecated.
    warnings.filterwarnings("ignore", message=r"(?s).*validated against ConfigStore schema")
    sys.argv[1:] = [_normalise(a) for a in sys.argv[1:]]
    if "--dry-run" in sys.argv[1:]:
        _dry_run([a for a in sys.argv[1:] if a != "--dry-run"])
        return
    message = missing_launcher(sys.argv[1:])
    if message:
        print(message, file=sys.stderr)
        sys.exit(2)
    _preflight(sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
