"""``hydra/sweeper=grid``: Hydra's basic sweeper, plus a union of grids.

Hydra loads sweepers only from the ``hydra_plugins`` namespace package, so this thin
plugin lives here; the expansion itself is :func:`bench.axes.sweep.expand`, shared with
the dry run. Config (``hydra.sweeper``):

- ``params``: key -> value or sweep, as the basic sweeper's;
- ``grids``: a list of such mappings; the jobs are the union of their cartesian products
  (each combined with ``params`` and the command line);
- ``max_batch_size``: jobs handed to the launcher at a time (null = all at once).
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from bench.axes.sweep import expand
from bench.run.plan import composed_by_plan

log = logging.getLogger(__name__)


# A structured config: OmegaConf reads these annotations at run time, and Hydra executes
# this module without registering it in sys.modules, so they are typing's classes here.
@dataclass
class GridSweeperConf:
    """The ``hydra/sweeper=grid`` config node."""

    _target_: str = "hydra_plugins.headbench_sweeper.grid_sweeper.GridSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, Any]] = None
    grids: Optional[List[Any]] = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="grid", node=GridSweeperConf, provider="headbench"
)


class GridSweeper(Sweeper):
    """Launch the union of the configured grids' products, in batches.

    Args:
        max_batch_size: Jobs per launch; None = all at once.
        params: Overrides shared by every job (values or sweeps).
        grids: Per-grid overrides; None = one grid.
    """

    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict[str, Any] | None = None,
        grids: list[Any] | None = None,
    ) -> None:
        super().__init__()
        self.max_batch_size = max_batch_size
        self.params = params or {}
        self.grids = grids or []
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Keep the context and create the configured launcher."""
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> list[list[JobReturn]]:
        """Expand the grids with the command line and launch every job.

        Args:
            arguments: The command line's overrides.

        Returns:
            The launcher's job returns, one list per batch.
        """
        assert self.config is not None and self.launcher is not None
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        jobs = expand(parser, self.params, self.grids, arguments)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        size = self.max_batch_size or len(jobs) or 1
        returns = []
        for start in range(0, len(jobs), size):
            batch = jobs[start : start + size]
            # A job the sweep's plan composed (the launch callback) is known to compose.
            unchecked = [job for job in batch if not composed_by_plan(job)]
            if unchecked:
                self.validate_batch_is_legal(unchecked)
            results = self.launcher.launch(batch, initial_job_idx=start)
            for result in results:
                _ = result.return_value  # re-raises a job's exception, as the basic sweeper
            returns.append(list(results))
        return returns
