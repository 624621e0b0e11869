"""Dry run: list a sweep's cells as done, failed, diverged, stale, corrupt or pending.

``python -m bench -m experiment=cpu_heads --dry-run`` expands the sweep exactly as
the sweeper does (the experiment's ``hydra.sweeper.params`` plus the command
line, the command line winning per key), composes every cell's config and reads its
run directory. Nothing is written and nothing is trained.
"""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench.cell import cell_path, config_hash
from bench.run.resume import CellState, cell_state, running_elsewhere, should_run
from bench.run.sweep import expand


@dataclass(frozen=True)
class PlannedCell:
    """One cell of a sweep and what a launch would do with it.

    Attributes:
        overrides: The job's overrides, as the launcher would pass them.
        run_dir: Where the cell's result lives.
        state: What the run directory holds now.
        will_run: Whether launching the sweep now trains this cell.
    """

    overrides: tuple[str, ...]
    run_dir: Path
    state: CellState
    will_run: bool


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


def hydra_context(config_dir: str | Path) -> AbstractContextManager[Any]:
    """Hydra's compose context for ``config_dir``; a no-op inside a running Hydra app."""
    if GlobalHydra.instance().is_initialized():  # inside a running app (a sweep callback)
        return nullcontext()
    return initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3")


def plan(config_dir: str | Path, overrides: list[str], multirun: bool) -> list[PlannedCell]:
    """Expand a sweep (or a single run) into its cells and classify each.

    Args:
        config_dir: The Hydra config tree (unused inside a running Hydra app).
        overrides: Command-line overrides, without ``-m``.
        multirun: Whether ``-m`` was given.

    Returns:
        One :class:`PlannedCell` per job, in launch order.
    """
    cells = []
    with hydra_context(config_dir):
        hydra = GlobalHydra.instance().hydra
        assert hydra is not None
        # As Hydra decides: `-m`, or `hydra.mode: MULTIRUN` in the composed config.
        mode = hydra.get_mode(config_name="config", overrides=overrides)
        multirun = multirun or mode == RunMode.MULTIRUN
        run_mode = RunMode.MULTIRUN if multirun else RunMode.RUN
        base = hydra.compose_config("config", overrides, run_mode=run_mode)
        for job in _job_overrides(base, overrides, multirun):
            cfg = compose("config", overrides=job, return_hydra_config=True)
            run_dir = _run_dir(cfg, multirun)
            state = running_elsewhere(run_dir) or cell_state(run_dir, config_hash(cfg))
            will_run = should_run(
                state, bool(cfg.get("rerun_failed", False)), bool(cfg.get("force", False))
            )
            cells.append(PlannedCell(tuple(job), _run_dir(cfg, multirun), state, will_run))
    return cells


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
        "A run directory is task/encoder/head.label/freeze.label/seed=N; give the cells "
        "distinct labels (e.g. head.label=linear-d${head.dropout} when head.dropout varies) so "
        "none overwrites another."
    )
    return "\n".join(lines)


def print_plan(cells: list[PlannedCell]) -> None:
    """Print one line per cell and a count per state."""
    for cell in cells:
        action = "run " if cell.will_run else "skip"
        reason = f"  ({cell.state.reason})" if cell.state.reason else ""
        print(f"{action} {cell.state.state:<8} {cell.run_dir}{reason}")
    counts = Counter(cell.state.state for cell in cells)
    to_run = sum(cell.will_run for cell in cells)
    states = ", ".join(f"{counts[s]} {s}" for s in sorted(counts))
    print(f"{len(cells)} cells: {states}; {to_run} would run")
    shared = collisions(cells)
    if shared:
        print(collision_message(shared))
