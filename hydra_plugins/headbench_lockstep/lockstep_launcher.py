"""``hydra/launcher=lockstep``: a sweep's frozen cells train in lock-step groups.

    python -m bench -m experiment=variance_seeds hydra/launcher=lockstep

The launcher receives every job of a multirun (a batch of them with
``hydra.sweeper.max_batch_size``), composes each, and groups the cells that can share
their batches (:func:`bench.run.lockstep.group_cells`: frozen, sequence task, the same
encoder, data, ``order_seed``, epochs, cache and input layers). Each group trains in this
process as one batch loop (:func:`bench.run.lockstep.train_group`); every other cell runs
as Hydra's basic launcher would run it, with the reason printed. Resume works as for any
launch: each cell's lock is taken and its stored result decides whether it trains
(:func:`bench.run.cli.start_cell`), so done cells are skipped and a group trains only its
cells that need it.

Cells with a search: their missing trials are trained first, in lock-step groups across
heads and configurations when ``search.order_seed`` is set
(:func:`bench.run.lockstep.train_trials`), otherwise one by one as a cell alone would
(:func:`bench.run.search.select_config`); then each cell's selected configuration is known
and the searched cells are grouped like any others, each training that configuration with
its own seed and order seed.
"""

import copy
import logging
import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobStatus,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from bench.cell import config_hash
from bench.run.cli import start_cell
from bench.run.logs import route_lightning_logs
from bench.run.resume import (
    ResumePolicy,
    cell_lock,
    cell_state,
    running_elsewhere,
    should_run,
)

log = logging.getLogger(__name__)


# A structured config: OmegaConf reads these annotations at run time, and Hydra executes
# this module without registering it in sys.modules, so they are typing's classes here.
@dataclass
class LockstepLauncherConf:
    """The ``hydra/launcher=lockstep`` config node."""

    _target_: str = "hydra_plugins.headbench_lockstep.lockstep_launcher.LockstepLauncher"


ConfigStore.instance().store(
    group="hydra/launcher", name="lockstep", node=LockstepLauncherConf, provider="headbench"
)


@dataclass
class _Job:
    """One job of the batch: its overrides, its Hydra config and its task config."""

    overrides: List[str]
    config: DictConfig
    task: DictConfig

    @property
    def run_dir(self) -> Path:
        return Path(str(self.config.hydra.runtime.output_dir))


def _will_run(job: _Job) -> bool:
    """Whether the job's cell trains in this launch, as the dry run decides it.

    Its stored result, the resume flags, and whether another process trains it now.
    """
    state = running_elsewhere(job.run_dir) or cell_state(job.run_dir, config_hash(job.task))
    return should_run(state, ResumePolicy.of(job.task))


class LockstepLauncher(Launcher):
    """Train lock-step groups together in this process; launch other cells one by one."""

    def __init__(self) -> None:
        super().__init__()
        self.config: Optional[DictConfig] = None
        self.task_function: Optional[TaskFunction] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Keep what launching needs."""
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def _job(self, overrides: Sequence[str], idx: int) -> _Job:
        """Compose a job as ``run_job`` does: its output directory, its task config."""
        assert self.hydra_context is not None and self.config is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = idx
            config.hydra.job.num = idx
        HydraConfig.instance().set_config(config)
        output_dir = os.path.join(
            str(OmegaConf.select(config, "hydra.sweep.dir")),
            str(OmegaConf.select(config, "hydra.sweep.subdir")),
        )
        with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
            config.hydra.runtime.output_dir = os.path.abspath(output_dir)
        HydraConfig.instance().set_config(config)
        task = copy.deepcopy(config)
        with read_write(task), open_dict(task):
            del task["hydra"]
        OmegaConf.resolve(task)  # while this job's Hydra config is the current one
        return _Job(list(overrides), config, task)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        """Train each lock-step group together, then the other cells one by one.

        Args:
            job_overrides: Every job's overrides.
            initial_job_idx: The first job's number in the sweep.

        Returns:
            One job return per job, in the given order.
        """
        # Imported here: Hydra imports this plugin module to discover it at every start,
        # also of a command refused before anything runs; bench.run.lockstep pulls in torch
        # and Lightning (seconds).
        from bench.run.lockstep import group_cells

        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        jobs = [self._job(o, initial_job_idx + i) for i, o in enumerate(job_overrides)]
        self._trials([job for job in jobs if _will_run(job)])
        groups, alone = group_cells([job.task for job in jobs])
        selected = self._select(jobs)  # searched cells: their configurations, trials done
        order = sorted(selected)
        searched, _ = group_cells([selected[i][0] for i in order], selected=True)
        log.info(
            "Launching %d jobs: %d lock-step groups (%d cells), %d cells alone",
            len(jobs),
            len(groups),
            sum(len(g) for g in groups),
            len(alone),
        )
        returns: Dict[int, JobReturn] = {}
        for members in groups:
            returns.update(self._group([jobs[i] for i in members], members))
        for found in searched:
            members = [order[k] for k in found]
            chosen = [selected[i] for i in members]
            returns.update(self._group([jobs[i] for i in members], members, chosen))
        for i in sorted(set(alone) - set(returns)):
            print(f"alone ({alone[i]}): {' '.join(filter_overrides(jobs[i].overrides))}")
            returns[i] = self._alone(job_overrides[i], initial_job_idx + i)
        return [returns[i] for i in range(len(jobs))]

    def _trials(self, jobs: List[_Job]) -> None:
        """Train the missing search trials (``search.order_seed`` set) in lock-step groups."""
        if any(OmegaConf.select(j.task, "search.order_seed") is not None for j in jobs):
            from bench.run.lockstep import train_trials  # torch, Lightning: only when training

            route_lightning_logs()
            trained = train_trials([j.task for j in jobs], [j.run_dir for j in jobs])
            print(f"lock-step search trials: {trained} trained")

    def _select(self, jobs: List[_Job]) -> Dict[int, Any]:
        """Each searched cell's selected configuration (its trials read or trained here)."""
        from bench.run.search import enabled, select_config
        from bench.run.train import run

        selected = {}
        for i, job in enumerate(jobs):
            if enabled(job.task) and _will_run(job):
                trained, kwargs = select_config(job.task, job.run_dir, run)
                if "failure" not in kwargs:  # a failed search is recorded by the cell alone
                    selected[i] = (trained, kwargs)
        return selected

    def _alone(self, overrides: Sequence[str], idx: int) -> JobReturn:
        """Run one job as Hydra's basic launcher does."""
        assert self.hydra_context is not None and self.config is not None
        assert self.task_function is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(config):
            config.hydra.job.id = idx
            config.hydra.job.num = idx
        ret = run_job(
            hydra_context=self.hydra_context,
            task_function=self.task_function,
            config=config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return ret

    def _group(
        self, jobs: List[_Job], members: List[int], chosen: Optional[List[Any]] = None
    ) -> Dict[int, JobReturn]:
        """Claim the group's cells (resume decides which train), train those together.

        ``chosen``: for searched cells, each one's selected configuration and the keyword
        arguments of its result (``extra``, ``cell_hash``).
        """
        from bench.run.lockstep import train_group  # torch, Lightning: only when training
        from bench.run.train import run

        returns: Dict[int, JobReturn] = {}
        with ExitStack() as locks:
            training, trains = [], []
            for k, job in enumerate(jobs):
                mine = locks.enter_context(cell_lock(job.run_dir))
                hydra_cfg = job.config.hydra
                if start_cell(job.task, hydra_cfg, job.run_dir, mine):
                    training.append(job)
                    trains.append(chosen[k] if chosen else (job.task, {}))
            route_lightning_logs()
            results: List[Dict[str, Any]] = []
            if len(training) > 1:
                print(f"lock-step group of {len(training)} cells")
                results = train_group(
                    [cfg for cfg, _ in trains],
                    [j.run_dir for j in training],
                    extras=[kwargs.get("extra", {}) for _, kwargs in trains],
                    cell_hashes=[kwargs.get("cell_hash") for _, kwargs in trains],
                    selected=chosen is not None,
                )
            elif training:  # the others are done: this one trains alone
                results = [run(trains[0][0], training[0].run_dir, **trains[0][1])]
        for job, result in zip(training, results, strict=True):
            print(f"{result['status']}: {job.run_dir}/result.json")
        for i, job in zip(members, jobs, strict=True):
            returns[i] = JobReturn(
                overrides=job.overrides,
                cfg=job.task,
                hydra_cfg=job.config,
                working_dir=os.getcwd(),
                task_name=str(job.config.hydra.job.name),
                status=JobStatus.COMPLETED,
                _return_value=None,
            )
        return returns
