"""Dry run: list a sweep's cells as done, failed, diverged, stale, corrupt or pending.

``python -m bench -m experiment=cpu_heads --dry-run`` expands the sweep exactly as
the sweeper does (the experiment's ``hydra.sweeper.params`` plus the command
line, the command line winning per key), composes every cell's config, checks what its
run directory is made of (:func:`bench.cell.check_identity`), runs the given preflight
check on it and reads its run directory. Nothing is written and nothing is trained.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench.atomic import unwritable_reason
from bench.axes.sweep import expand
from bench.cell import cell_path, check_identity, config_hash
from bench.errors import ConfigError, HeadbenchError
from bench.run.resume import CellState, ResumePolicy, cell_state, running_elsewhere, should_run
from bench.run.search import cell_trials_dir, stored_trials, trial_count


@dataclass(frozen=True)
class PlannedCell:
    """One cell of a sweep and what a launch would do with it.

    Attributes:
        overrides: The job's overrides, as the launcher would pass them.
        run_dir: Where the cell's result lives.
        state: What the run directory holds now.
        will_run: Whether launching the sweep now trains this cell.
        problem: Why the preflight check refuses the cell (it would be recorded failed).
        trials: The trials its search trains (0 = no search).
        trials_dir: Where they are stored: its setting's, or its own seed's under pairing.
    """

    overrides: tuple[str, ...]
    run_dir: Path
    state: CellState
    will_run: bool
    problem: str | None = None
    trials: int = 0
    trials_dir: Path | None = None


def _job_overrides(cfg: DictConfig, overrides: list[str], multirun: bool) -> list[list[str]]:
    if not multirun:
        return [overrides]
    sweeper = cfg.hydra.sweeper
    params = sweeper.get("params")
    grids = sweeper.get("grids")
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    return expand(
        parser,
        OmegaConf.to_container(params, resolve=False) if params else None,  # type: ignore[arg-type]
        OmegaConf.to_container(grids, resolve=False) if grids else None,  # type: ignore[arg-type]
        overrides,
    )


def _run_dir(cfg: DictConfig, multirun: bool) -> Path:
    try:
        if multirun:
            return Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
        return Path(str(cfg.hydra.run.dir))
    except Exception:  # a ${hydra:...} interpolation that needs a live run: use the default
        return Path(str(cfg.runs_dir)) / cell_path(cfg)


@contextmanager
def hydra_context(config_dir: str | Path) -> Iterator[None]:
    """Hydra's compose context for ``config_dir`` (inside a running Hydra app, the app's).

    A config file that does not parse as YAML is one :class:`ConfigError`
    (:func:`config_file_problem`), where YAML's own would print a traceback of ~90 lines.
    """
    here: AbstractContextManager[Any] = (
        nullcontext()  # inside a running app (a sweep callback)
        if GlobalHydra.instance().is_initialized()
        else initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3")
    )
    try:
        with here:
            yield
    except yaml.YAMLError as err:
        raise ConfigError(config_file_problem(err)) from None


def config_file_problem(err: yaml.YAMLError) -> str:
    """One line for a config file that does not parse: its file, line and column, YAML's words.

    Args:
        err: What the YAML parser raised (a syntax error, a tag it does not construct such as
            ``!!python/object``, a duplicate key).
    """
    mark = getattr(err, "problem_mark", None)
    if not isinstance(err, yaml.MarkedYAMLError) or mark is None:
        return f"a config file does not parse as YAML: {' '.join(str(err).split())}"
    context = err.context or ""
    if context and err.context_mark is not None and err.context_mark.line != mark.line:
        context += f" from line {err.context_mark.line + 1}"
    said = " ".join(filter(None, [err.problem, context and f"({context})", err.note]))
    return f"config file {mark.name}, line {mark.line + 1}, column {mark.column + 1}: {said}"


#: Jobs per worker process below which composing in parallel does not pay (Hydra composes a
#: cell in about a third of a second on this project's CPUs; forking a worker costs little).
JOBS_PER_WORKER = 16
#: The most worker processes a plan composes with.
MAX_WORKERS = 16
_Composed = tuple[DictConfig, Path, CellState] | str


def _compose_job(job: list[str], multirun: bool, hydra_overrides: list[str]) -> _Composed:
    """Compose one job and read its run directory; a refused identity as its message."""
    cfg = compose("config", overrides=[*job, *hydra_overrides], return_hydra_config=True)
    try:
        check_identity(cfg)
    except ConfigError as err:
        return f"{err} (cell: {' '.join(job) or 'the defaults'})"
    run_dir = _run_dir(cfg, multirun)
    return cfg, run_dir, running_elsewhere(run_dir) or cell_state(run_dir, config_hash(cfg))


def plan_workers(jobs: int) -> int:
    """How many processes compose a plan of ``jobs`` cells: 1 (this one) unless it pays.

    Composing is Hydra's work, one cell after another, and a launch waits for it (the 200
    cells of a ``gpu_pack`` launch took most of two minutes of a lent GPU machine). Workers
    are forked from this process, which holds Hydra's initialised state, so only where
    ``fork`` exists and this process runs no other thread (forking a threaded process can
    deadlock the child); a sweep's launch plans before its launcher starts any.
    """
    if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, MAX_WORKERS, jobs // JOBS_PER_WORKER))


def _composed(jobs: list[list[str]], multirun: bool, hydra_overrides: list[str]) -> list[_Composed]:
    """:func:`_compose_job` of every job, in order, in :func:`plan_workers` processes."""
    workers = plan_workers(len(jobs))
    if workers == 1:
        return [_compose_job(job, multirun, hydra_overrides) for job in jobs]
    fork = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=fork) as pool:
        chunk = max(1, len(jobs) // (4 * workers))
        same = [multirun] * len(jobs), [hydra_overrides] * len(jobs)
        return list(pool.map(_compose_job, jobs, *same, chunksize=chunk))


#: Jobs (their overrides) that the latest :func:`plan` of this process composed. Hydra's
#: sweeper composes each job once more before launching only to prove that it composes
#: (``Sweeper.validate_batch_is_legal``); ``hydra/sweeper=grid`` skips the ones listed here.
_COMPOSED: set[tuple[str, ...]] = set()


def composed_by_plan(job: list[str] | tuple[str, ...]) -> bool:
    """Whether :func:`plan` composed ``job`` (the same overrides) in this process."""
    return tuple(job) in _COMPOSED


def plan(
    config_dir: str | Path,
    overrides: list[str],
    multirun: bool,
    check: Callable[[DictConfig], None] | None = None,
    base: DictConfig | None = None,
) -> list[PlannedCell]:
    """Expand a sweep (or a single run) into its cells and classify each.

    Args:
        config_dir: The Hydra config tree (unused inside a running Hydra app).
        overrides: Command-line overrides, without ``-m``.
        multirun: Whether ``-m`` was given.
        check: A preflight check of one composed cell (e.g.
            :func:`bench.run.preflight.check_cell`); what it raises becomes the cell's
            ``problem``.
        base: The sweep's own config with its ``hydra`` node, where the caller holds it
            (a sweep callback is given it): then ``multirun`` is taken as given and the
            sweep is not composed twice more (Hydra takes about half a second per config here).

    Returns:
        One :class:`PlannedCell` per job, in launch order.

    Raises:
        ConfigError: When a cell's run directory cannot be made (a required key such as
            ``seed`` unset, a seed out of range, a name with a path separator or ``..``),
            naming the key and the cell.
    """
    cells = []
    _COMPOSED.clear()
    # A sweep's own config keeps the command's hydra.* overrides (hydra.sweep.dir,
    # hydra.searchpath) apart from its jobs' (hydra.overrides.task): each job composes with them.
    given = OmegaConf.select(base, "hydra.overrides.hydra") if base is not None else None
    hydra_overrides = [str(o) for o in given or []]
    with hydra_context(config_dir):
        if base is None:
            hydra = GlobalHydra.instance().hydra
            assert hydra is not None
            # As Hydra decides: `-m`, or `hydra.mode: MULTIRUN` in the composed config.
            mode = hydra.get_mode(config_name="config", overrides=overrides)
            multirun = multirun or mode == RunMode.MULTIRUN
            run_mode = RunMode.MULTIRUN if multirun else RunMode.RUN
            base = hydra.compose_config("config", overrides, run_mode=run_mode)
        jobs = _job_overrides(base, overrides, multirun)
        for job, composed in zip(jobs, _composed(jobs, multirun, hydra_overrides), strict=True):
            if isinstance(composed, str):
                raise ConfigError(composed)
            _COMPOSED.add(tuple(job))
            cfg, run_dir, state = composed
            will_run = should_run(state, ResumePolicy.of(cfg))
            problem = None
            if check is not None and will_run:
                try:
                    check(cfg)
                except HeadbenchError as err:
                    problem = f"{type(err).__name__}: {err}"
            trials = trial_count(cfg)  # the grid's size under the full grid; an anchor: none
            cells.append(
                PlannedCell(
                    tuple(job),
                    run_dir,
                    state,
                    will_run,
                    problem,
                    trials,
                    cell_trials_dir(cfg, run_dir) if trials else None,
                )
            )
        check_output_dirs(base, multirun)
    return cells


def check_output_dirs(cfg: DictConfig, multirun: bool) -> None:
    """Check, writing nothing, that a launch can write its run and results directories.

    Args:
        cfg: The composed config with its ``hydra`` node.
        multirun: A sweep (its run root, ``results_dir`` and the report's folder) or a
            single run (its run directory).

    Raises:
        ConfigError: Naming the key, the directory and what is in the way.
    """
    keys = ("hydra.sweep.dir", "results_dir", "report_file") if multirun else ("hydra.run.dir",)
    for key in keys:
        value = OmegaConf.select(cfg, key, default=None)
        if not value:
            continue
        folder = Path(str(value)).parent if key == "report_file" else Path(str(value))
        reason = unwritable_reason(folder)
        if reason:
            raise ConfigError(
                f"{key}={value}: cannot write there ({reason}); choose a writable directory "
                f"(runs_dir=..., results_dir=... or sweep_name=...)"
            )


def collisions(cells: list[PlannedCell]) -> dict[Path, list[tuple[str, ...]]]:
    """Run directories that several cells of one sweep would share (they would overwrite).

    Returns:
        For each shared directory, the overrides of the cells that map to it.
    """
    jobs: dict[Path, list[tuple[str, ...]]] = {}
    for cell in cells:
        jobs.setdefault(cell.run_dir, []).append(cell.overrides)
    return {run_dir: found for run_dir, found in jobs.items() if len(found) > 1}


def collision_message(shared: dict[Path, list[tuple[str, ...]]]) -> str:
    """Explain shared run directories and how to separate them."""
    lines = [f"{len(shared)} run directories would be shared by several cells of this sweep:"]
    for run_dir, jobs in list(shared.items())[:5]:
        lines.append(f"  {run_dir}: " + " | ".join(" ".join(job) for job in jobs))
    lines.append(
        "A run directory is task/encoder/head.label/freeze.label/seed=N (seed=N-order=M with "
        "an order_seed; a train_size=N level when axes=[train_size]); give the cells distinct "
        "labels (e.g. head.label=linear-d${head.dropout} when head.dropout varies), or list "
        "the swept axis (axes=[train_size] when data.train_size varies), so none overwrites "
        "another."
    )
    return "\n".join(lines)


def print_plan(cells: list[PlannedCell]) -> None:
    """Print one line per cell, a count per state and the cells preflight refuses."""
    for cell in cells:
        action = "run " if cell.will_run else "skip"
        if cell.will_run and cell.problem:
            action = "fail"
        reason = f"  ({cell.state.reason})" if cell.state.reason else ""
        problem = f"  preflight: {cell.problem}" if cell.will_run and cell.problem else ""
        print(f"{action} {cell.state.state:<8} {cell.run_dir}{reason}{problem}")
    counts = Counter(cell.state.state for cell in cells)
    to_run = sum(cell.will_run for cell in cells)
    refused = sum(bool(cell.will_run and cell.problem) for cell in cells)
    states = ", ".join(f"{counts[s]} {s}" for s in sorted(counts))
    failing = f" ({refused} would fail preflight)" if refused else ""
    print(f"{len(cells)} cells: {states}; {to_run} would run{failing}")
    budgets = {c.trials_dir: c.trials for c in cells if c.will_run and c.trials_dir}
    if budgets:
        stored = sum(stored_trials(folder, n) for folder, n in budgets.items())
        print(
            f"search: {sum(budgets.values())} trial trainings in {len(budgets)} searches "
            f"({stored} stored); a search serves its setting's seeds, or one seed under pairing"
        )
    shared = collisions(cells)
    if shared:
        print(collision_message(shared))
