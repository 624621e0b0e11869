"""Lock-step training of frozen heads: the cells of a group train together on shared batches.

A sweep's frozen cells that share the encoder, the task, the data (subset, selection slice,
``max_length``, batch size), the data order (``order_seed``), the number of epochs, the
cache and the head's input layers see the same cached batches in the same order. Trained
alone, each would read the cache and run its own training loop; in lock-step one process
reads each batch once and trains every cell of the group on it:

- heads of the same type and shapes (``linear``, ``pooler``, ``mean_linear``,
  ``last4_concat``, any seeds and trial configurations) as one batched computation
  (:class:`~bench.model.stacked.StackedHeads`: stacked parameters, ``baddbmm``, one
  loss, one clipping and one AdamW update for all rows);
- other heads (the BiLSTM, a scalar mix) one after another inside the same batch loop,
  each with its own ``torch.optim.AdamW``.

Each cell keeps what it has alone: its initial weights (its module is built as
:func:`bench.run.train.run` builds it, after ``seed_everything(seed)``), its dropout masks
(its own random state, :class:`~bench.model.stacked.CellRng`: the state the single run has
when training starts, advanced as the single run's data loaders advance it: one draw per
evaluation loader per epoch, one per epoch for length-grouped batches; Lightning takes
``len(loader)`` batches an epoch without exhausting the sampler, and so does the group),
its AdamW state, learning rates,
schedule and weight decay, its gradient-norm clipping, its best epoch and its result
file (the same fields, written atomically, plus ``lockstep``). A cell whose loss is not
finite is recorded ``diverged`` at that step and leaves the group; a cell that fails is
recorded ``failed`` and the others go on.

:func:`group_key` says which cells can share a group and why a cell cannot;
:func:`train_group` trains one group; :func:`train_trials` trains the missing search trials
of cells whose search sets ``search.order_seed``. The Hydra launcher ``hydra/launcher=lockstep``
(:mod:`hydra_plugins.headbench_lockstep`) groups the jobs of a sweep and runs the other
cells as the basic launcher would.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
import warnings
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import lightning as L
import torch
from filelock import Timeout
from lightning.fabric.utilities.apply_func import move_data_to_device
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from bench.axes.heads import ANCHOR
from bench.cell import RESULT_FILE, TRIAL_FILE, config_hash
from bench.data.tasks import get_task
from bench.errors import ConfigError, DivergedError
from bench.model.adaptation import StageCallback
from bench.model.compiled import check_compile_mode
from bench.model.matmul import DEFAULT_MATMUL_PRECISION
from bench.model.stacked import CellRng, StackedHeads, optimizer_hypers, stack_key
from bench.run import interrupts, provenance
from bench.run.preflight import check_cell
from bench.run.search import enabled as search_enabled
from bench.run.search import pending_trials, read_trial, trial_lock
from bench.run.timing import TrainLoopTimer, phase
from bench.run.train import (
    CellSetup,
    conclude_cell,
    finish_result,
    new_result,
    prepare_cell,
    record_failure,
)

log = logging.getLogger(__name__)

#: Trainer keys a lock-step cell may set (others, e.g. accumulate_grad_batches, run alone).
TRAINER_KEYS = frozenset(
    {
        "name",
        "max_epochs",
        "accelerator",
        "devices",
        "precision",
        "gradient_clip_val",
        "log_every_n_steps",
        "deterministic",
        "compile",  # nothing to compile: a lock-step cell reads cached states, no encoder forward
        "matmul_precision",  # highest only (below)
    }
)
#: Loggers whose cells can train in lock-step (trackers log one run per process).
LOGGERS = ("default", "csv")


class NotLockstep(ConfigError):
    """A cell that cannot train in a lock-step group (the message says why and what to set)."""


def _plain(cfg: DictConfig, key: str) -> Any:
    node = OmegaConf.select(cfg, key, default=None)
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)
    return node


def group_key(cfg: DictConfig, selected: bool = False) -> str:
    """The lock-step group of a cell: equal keys train together on the same batches.

    Args:
        cfg: The cell's composed config.
        selected: The cell's search is done and ``cfg`` carries the selected trial's
            values (:func:`bench.run.search.select_config`): it trains like any cell.

    Returns:
        A key (JSON) of everything that must be shared: encoder, task, data settings and
        data order, epochs, cache settings and the head's input layers.

    Raises:
        NotLockstep: For a cell that must train alone, naming the key and what to set.
    """
    freeze = OmegaConf.select(cfg, "freeze.name", default=None)
    if freeze != "frozen":
        raise NotLockstep(
            f"freeze={freeze}: lock-step trains frozen heads only (valid choice: frozen)"
        )
    if OmegaConf.select(cfg, "head.name", default=None) == ANCHOR:
        raise NotLockstep("head=anchor: fitted by scikit-learn, not trained; it runs alone")
    if OmegaConf.select(cfg, "order_seed", default=None) is None:
        raise NotLockstep(
            "order_seed is null: the batch order then comes from `seed` after the head's "
            "initialisation and differs between cells; set order_seed=<int> to train cells "
            "in lock-step"
        )
    trials = int(OmegaConf.select(cfg, "search.trials", default=0) or 0)
    if trials and not selected:
        raise NotLockstep(
            f"search.trials={trials}: a cell's search selects its configuration first "
            "(hydra/launcher=lockstep then groups the cells; search=none groups at once)"
        )
    task = str(OmegaConf.select(cfg, "task.name", default=""))
    try:
        kind = get_task(task).kind
    except KeyError:
        kind = None
    if kind != "sequence":
        raise NotLockstep(f"task={task}: lock-step covers sequence (GLUE) tasks only")
    if OmegaConf.select(cfg, "pair_encoding", default=None) == "siamese":
        raise NotLockstep(
            "pair_encoding=siamese: lock-step stacks heads over one sequence per example; "
            "siamese cells train alone (valid here: pair_encoding=cross or null)"
        )
    if not OmegaConf.select(cfg, "cache.enabled", default=True):
        raise NotLockstep("cache.enabled=false: lock-step cells read the feature cache")
    trainer = _plain(cfg, "trainer") or {}
    extra = sorted(set(trainer) - TRAINER_KEYS)
    if extra:
        raise NotLockstep(
            f"trainer.{extra[0]} is set: lock-step supports trainer keys "
            f"{', '.join(sorted(TRAINER_KEYS))}"
        )
    if str(trainer.get("precision", "32-true")) not in ("32-true", "32", "32.0"):
        raise NotLockstep(
            f"trainer.precision={trainer.get('precision')}: lock-step trains in float32 "
            "(valid: 32-true)"
        )
    if (trainer.get("matmul_precision") or DEFAULT_MATMUL_PRECISION) != DEFAULT_MATMUL_PRECISION:
        raise NotLockstep(
            f"trainer.matmul_precision={trainer.get('matmul_precision')}: lock-step trains "
            f"with float32 matrix products (valid: {DEFAULT_MATMUL_PRECISION})"
        )
    if int(trainer.get("devices", 1) or 1) != 1:
        raise NotLockstep(f"trainer.devices={trainer.get('devices')}: lock-step uses one device")
    logger = OmegaConf.select(cfg, "logger.name", default="default")
    if logger not in LOGGERS:
        raise NotLockstep(
            f"logger={logger}: tracker runs are per process; lock-step cells log to "
            f"result.json only (valid: {', '.join(LOGGERS)})"
        )
    data = dict(_plain(cfg, "data") or {})
    data.pop("num_workers", None)
    cache = dict(_plain(cfg, "cache") or {})
    head = _plain(cfg, "head") or {}
    key = {
        "encoder": _plain(cfg, "encoder"),
        "task": task,
        "data": data,
        "data_seed": OmegaConf.select(cfg, "data_seed", default=0),
        "selection": _plain(cfg, "selection"),
        "order_seed": OmegaConf.select(cfg, "order_seed"),
        "max_epochs": trainer.get("max_epochs"),
        "accelerator": trainer.get("accelerator", "auto"),
        "cache": cache,
        "layers": [head.get("layers", -1), head.get("combine", "concat")],
    }
    return json.dumps(key, sort_keys=True, default=str)


def group_cells(
    cfgs: Sequence[DictConfig], selected: bool = False
) -> tuple[list[list[int]], dict[int, str]]:
    """Split cells into lock-step groups and the cells that train alone.

    Args:
        cfgs: The cells' configs.
        selected: Their searches are done (see :func:`group_key`).

    Returns:
        The groups (indices into ``cfgs``, each of at least two cells, in launch order) and,
        for every other cell, why it trains alone.
    """
    groups: dict[str, list[int]] = {}
    alone: dict[int, str] = {}
    for i, cfg in enumerate(cfgs):
        try:
            groups.setdefault(group_key(cfg, selected), []).append(i)
        except NotLockstep as err:
            alone[i] = str(err)
    found = []
    for members in groups.values():
        if len(members) == 1:
            alone[members[0]] = "no other cell shares its encoder, task, data, order and layers"
        else:
            found.append(members)
    return found, alone


@dataclass(eq=False)  # compared by identity (a config comparison would resolve both)
class _Cell:
    """One cell of a group while it trains."""

    cfg: DictConfig
    run_dir: Path
    result: dict[str, Any]
    started: float
    setup: CellSetup
    rng: CellRng
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any = None
    names: dict[int, str] = field(default_factory=dict)
    #: Training time charged to this cell: its own computation plus its share of the rest.
    seconds: float = 0.0
    #: Its own setup before the group trains (preflight, module, data).
    setup_s: float = 0.0

    @property
    def module(self) -> Any:
        return self.setup.module

    @property
    def clip(self) -> float | None:
        value = OmegaConf.select(self.cfg, "trainer.gradient_clip_val", default=None)
        return float(value) if value else None


class _Stack:
    """Cells whose heads are stacked (:class:`~bench.model.stacked.StackedHeads`)."""

    def __init__(self, cells: list[_Cell], device: torch.device) -> None:
        self.cells = cells
        self.heads = StackedHeads([c.module.head for c in cells], device)

    def train_step(
        self, hidden: Sequence[Tensor | None], batch: dict[str, Tensor]
    ) -> list[tuple[_Cell, float]]:
        """One optimizer step of every cell; returns the cells whose loss was not finite."""
        started = time.perf_counter()
        cells = list(self.cells)
        mask = batch["attention_mask"]
        logits = self.heads.forward(hidden, mask, [c.rng for c in self.cells])
        losses = self.cells[0].setup.kind.stacked_loss(logits, batch)  # (N,): one per cell
        values = losses.detach().tolist()  # one sync a step
        finite = [math.isfinite(v) for v in values]
        kept = [i for i, ok in enumerate(finite) if ok]
        diverged = [(self.cells[i], values[i]) for i, ok in enumerate(finite) if not ok]
        if kept:
            # A diverged cell's loss is left out; its rows (dropped below) are its own: no
            # operation mixes the rows of two cells.
            (losses[kept] if diverged else losses).sum().backward()
            size = mask.shape[0]
            hypers, orders = [], []
            for i, c in enumerate(self.cells):
                if finite[i]:
                    c.module.add_train_loss(values[i], size)
                assert c.optimizer is not None
                record = optimizer_hypers(c.optimizer, c.names)
                hypers.append(record["hypers"])
                orders.append(record["order"])
            self.heads.clip_gradients([c.clip for c in self.cells], orders)
            self.heads.adamw_step(hypers)
            with warnings.catch_warnings():  # the schedules are read; their optimizers never step
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step")
                for i in kept:
                    self.cells[i].scheduler.step()
        if diverged:
            self.heads.keep(kept)
            self.cells = [self.cells[i] for i in kept]
        share = (time.perf_counter() - started) / len(cells)  # one computation: equal shares
        for c in cells:
            c.seconds += share
        return diverged

    def eval_logits(
        self, hidden: Sequence[Tensor | None], batch: dict[str, Tensor]
    ) -> list[Tensor]:
        """Every cell's logits in evaluation mode (no dropout)."""
        logits = self.heads.forward(hidden, batch["attention_mask"])
        return [logits[i] for i in range(len(self.cells))]

    def snapshot(self, cell: _Cell) -> dict[str, Tensor]:
        """CPU copies of a cell's head weights."""
        return self.heads.snapshot(self.cells.index(cell))

    def load(self, cell: _Cell, state: dict[str, Tensor]) -> None:
        """Put a snapshot back into a cell's row."""
        self.heads.load(self.cells.index(cell), state)


class _Single:
    """Cells trained one after another inside the batch loop (heads that cannot be stacked).

    Each keeps its module's head, its own ``torch.optim.AdamW`` and schedule, and draws its
    dropout with its own random state: the single run's steps, in the same order.
    """

    def __init__(self, cells: list[_Cell], device: torch.device) -> None:
        self.cells = cells
        self.device = device
        for c in cells:
            c.module.head.to(device)

    def train_step(
        self, hidden: Sequence[Tensor | None], batch: dict[str, Tensor]
    ) -> list[tuple[_Cell, float]]:
        """One optimizer step of every cell; returns the cells whose loss was not finite."""
        mask = batch["attention_mask"]
        diverged = []
        for c in list(self.cells):
            started = time.perf_counter()
            with c.rng.active(self.device):
                logits = c.module.head(hidden, mask)
            loss = c.setup.kind.loss(c.module.head, logits, batch)
            value = float(loss.detach())  # one read-back a cell and step
            if not math.isfinite(value):
                diverged.append((c, value))
                self.cells.remove(c)
                c.seconds += time.perf_counter() - started
                continue
            c.module.add_train_loss(value, mask.shape[0])
            loss.backward()
            assert c.optimizer is not None
            if c.clip:
                params = [p for group in c.optimizer.param_groups for p in group["params"]]
                torch.nn.utils.clip_grad_norm_(params, c.clip)
            c.optimizer.step()
            c.optimizer.zero_grad(set_to_none=True)
            c.scheduler.step()
            c.seconds += time.perf_counter() - started
        return diverged

    def eval_logits(
        self, hidden: Sequence[Tensor | None], batch: dict[str, Tensor]
    ) -> list[Tensor]:
        """Every cell's logits in evaluation mode."""
        out = []
        for c in self.cells:
            c.module.head.eval()
            out.append(c.module.head(hidden, batch["attention_mask"]))
            c.module.head.train()
        return out

    def snapshot(self, cell: _Cell) -> dict[str, Tensor]:
        """CPU copies of a cell's head weights."""
        return {
            k: v.detach().to("cpu", copy=True) for k, v in cell.module.head.state_dict().items()
        }

    def load(self, cell: _Cell, state: dict[str, Tensor]) -> None:
        """Put a snapshot back into a cell's head."""
        cell.module.head.load_state_dict(state)


_Unit = _Stack | _Single


def _units(cells: list[_Cell], device: torch.device) -> list[_Unit]:
    """Stacks of same-shape heads, then one unit for the heads trained one by one."""
    stacks: dict[str, list[_Cell]] = {}
    single: list[_Cell] = []
    for c in cells:
        key = stack_key(c.module.head)
        if key is None:
            single.append(c)
        else:
            stacks.setdefault(key, []).append(c)
    units: list[_Unit] = [_Stack(members, device) for members in stacks.values()]
    if single:
        units.append(_Single(single, device))
    return units


def _device(cfg: DictConfig) -> torch.device:
    accelerator = str(OmegaConf.select(cfg, "trainer.accelerator", default="auto"))
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


@dataclass(frozen=True)
class _Output:
    """What a group writes: the result file's name, reporting splits or not, extra fields."""

    result_file: str
    report: bool
    extras: list[dict[str, Any]]
    cell_hashes: list[str | None]


def _prepare(
    cfgs: Sequence[DictConfig],
    run_dirs: Sequence[Path],
    results: list[dict[str, Any] | None],
    output: _Output,
) -> list[_Cell]:
    """Build every cell as :func:`bench.run.train.run` would; failures are written at once."""
    cells: list[_Cell] = []
    shared: CellSetup | None = None
    for i, (cfg, run_dir) in enumerate(zip(cfgs, run_dirs, strict=True)):
        started = time.perf_counter()
        run_dir.mkdir(parents=True, exist_ok=True)
        result = new_result(cfg, cell_hash=output.cell_hashes[i], extra=output.extras[i])
        try:
            check_cell(cfg)
            setup = prepare_cell(cfg, result, output.report, shared)
            rng = CellRng()  # the global state the single run starts training with
            if shared is not None and setup.module.feature_plan != shared.module.feature_plan:
                raise NotLockstep(
                    f"head={cfg.head.name} reads layers {setup.module.feature_plan}, the "
                    f"group's first cell {shared.module.feature_plan}: not one group"
                )
            if setup.module.feature_plan is None or setup.module.feature_plan.start is not None:
                raise NotLockstep("the cell does not read frozen states from the cache")
            shared = shared or setup
            setup_s = time.perf_counter() - started
            cells.append(_Cell(cfg, run_dir, result, started, setup, rng, setup_s=setup_s))
        except Exception as err:  # recorded, the group goes on
            record_failure(cfg, run_dir, result, err)
            results[i] = finish_result(run_dir, result, started, output.result_file)
    return cells


def _finish(
    cell: _Cell,
    error: Exception | None,
    group: dict[str, Any],
    result_file: str,
    git: dict[str, Any],
) -> dict[str, Any]:
    """Fill the training fields, conclude or record the failure, write the result.

    The cell's ``wall_time_s`` is its share of the group's wall: its own setup, the
    training time charged to it and its own conclusion, so that a sweep's cells add up to
    the time the group took (``lockstep.wall_time == "share"``), never the group's whole
    wall once per member.
    """
    began = time.perf_counter()
    module, result = cell.module, cell.result
    result["history"] = module.history
    result["trainable_params_history"] = module.adaptation.trainable_history
    mode = check_compile_mode(OmegaConf.select(cell.cfg, "trainer.compile", default=False))
    if mode:  # as run() records it: set, but no encoder forward to compile
        result["compile"] = {"mode": mode, "applied": False}
    result["lockstep"] = group
    result.setdefault("phases_s", {})["fit"] = cell.seconds  # its share of the group's
    if error is None:
        try:
            with phase(result, "conclude"):
                conclude_cell(cell.cfg, cell.run_dir, result, cell.setup)
            result["status"] = "ok"
        except Exception as err:
            record_failure(cell.cfg, cell.run_dir, result, err)
    else:
        try:
            raise error
        except Exception as err:  # in an except block: the traceback is the error's
            record_failure(cell.cfg, cell.run_dir, result, err)
    started = began - cell.setup_s - cell.seconds
    return finish_result(cell.run_dir, result, started, result_file, git=git)


def train_group(
    cfgs: Sequence[DictConfig],
    run_dirs: Sequence[str | Path],
    *,
    result_file: str = RESULT_FILE,
    report: bool = True,
    extras: Sequence[dict[str, Any]] | None = None,
    cell_hashes: Sequence[str | None] | None = None,
    selected: bool = False,
) -> list[dict[str, Any]]:
    """Train cells of one lock-step group together; write each cell's ``result.json``.

    Args:
        cfgs: The cells' configs, all with the same :func:`group_key`.
        run_dirs: Each cell's run directory.
        result_file: The file written (search trials write ``trial.json``).
        report: Whether the reporting splits are scored (not for search trials).
        extras: Fields added to each cell's result (a trial's number and configuration;
            a searched cell's ``search`` record).
        cell_hashes: The config hash each result records, where ``cfgs`` are not the cells'
            own configs (a searched cell trains its selected trial's values).
        selected: The cells' searches are done (:func:`bench.run.search.select_config`).

    Returns:
        Each cell's result as written (``ok``, ``failed`` or ``diverged``), in order.

    Raises:
        NotLockstep: When the cells do not share one group key.
        Interrupted: When the process was told to stop (the cells not finished stay
            pending).
    """
    keys = {group_key(cfg, selected) for cfg in cfgs}
    if len(keys) != 1:
        raise NotLockstep(
            f"{len(keys)} lock-step groups among these cells; train each group on its own "
            "(bench.run.lockstep.group_cells)"
        )
    interrupts.starting()  # a process told to stop starts no group
    dirs = [Path(d) for d in run_dirs]
    results: list[dict[str, Any] | None] = [None] * len(cfgs)
    index = {id(cfg): i for i, cfg in enumerate(cfgs)}
    output = _Output(
        result_file,
        report,
        list(extras or [{}] * len(cfgs)),
        list(cell_hashes or [None] * len(cfgs)),
    )
    cells = _prepare(cfgs, dirs, results, output)
    if cells:
        _train_cells(cells, results, index, output)
    assert all(r is not None for r in results)
    return cast(list[dict[str, Any]], results)


def _train_cells(
    cells: list[_Cell],
    results: list[dict[str, Any] | None],
    index: dict[int, int],
    output: _Output,
) -> None:
    """The batch loop of a group; each cell's result is written when it ends."""
    first = cells[0]
    datamodule = first.setup.datamodule
    plan = first.module.feature_plan
    assert plan is not None
    device = _device(first.cfg)
    epochs = int(first.cfg.trainer.max_epochs)
    loader = datamodule.train_dataloader()
    per_epoch = len(loader)
    for c in cells:  # its evaluation stays on the host: _split_logits brings the logits
        c.optimizer, c.scheduler = c.module.build_optimizer(epochs * per_epoch, per_epoch)
        c.names = {id(p): n for n, p in c.module.head.named_parameters()}
        trainer = SimpleNamespace(current_epoch=0, global_step=0)  # what the callback reads
        StageCallback(c.module.adaptation).on_train_start(cast(L.Trainer, trainer), c.module)
    units = _units(cells, device)
    group = {
        "size": len(cells),
        "stacked": sum(len(u.cells) for u in units if isinstance(u, _Stack)),
        "device": str(device),
        "wall_time": "share",  # each cell's wall_time_s is its share (see _finish)
    }
    log.info("lock-step group of %d cells (%d stacked) on %s", len(cells), group["stacked"], device)
    timer = TrainLoopTimer()
    alive = list(cells)
    started = time.perf_counter()
    charged = [0.0]  # seconds charged to cells so far
    since = started  # charged up to here
    sampler_draws = 1 if datamodule.group_by_length else 0  # its loader's base seed: global
    step = 0

    def charge(since: float) -> float:
        """Share the time since ``since`` not charged to a cell equally among the cells."""
        now = time.perf_counter()
        rest = (now - since) - (sum(c.seconds for c in cells) - charged[0])
        for c in alive:
            c.seconds += rest / len(alive)
        charged[0] = sum(c.seconds for c in cells)
        return now

    git: dict[str, Any] = {}  # the checkout's commit, read once for the group (two git calls)

    def end(cell: _Cell, error: Exception | None) -> None:
        # its own computation and its share of the group's (so a sweep's sum stays true)
        cell.result["train_time_s"] = cell.seconds
        cell.result["throughput"] = {**timer.summary(), "cells": len(alive)}
        alive.remove(cell)
        if not git:
            git.update(provenance.git_commit())
        results[index[id(cell.cfg)]] = _finish(cell, error, group, output.result_file, git)

    try:
        for epoch in range(epochs):
            for c in alive:
                c.module.on_train_epoch_start()  # train mode; the epoch's running loss
                c.rng.skip(sampler_draws)
            timer.start()
            # Lightning takes len(loader) batches and never exhausts the sampler (which
            # would draw one more permutation from the order generator): nor does this.
            batches = itertools.islice(loader, per_epoch)
            for batch, hidden in _batches(batches, plan, first, device):
                ended = []
                for unit in units:
                    ended += unit.train_step(hidden, batch)
                since = charge(since)  # batch gathering, counted per step
                for cell, loss in ended:
                    end(cell, DivergedError(step, loss))
                if ended:  # their conclusion is their own time (in their wall_time_s), not
                    since = time.perf_counter()  # the group's to share among the others
                timer.count(batch["attention_mask"])
                step += 1
            timer.stop()
            _evaluate(units, datamodule, plan, first, device)
            _close_epoch(units, epoch, step)
            since = charge(since)
        if output.report:
            _report(units, datamodule, plan, first, device)
        charge(since)
        group["train_s"] = time.perf_counter() - started  # epochs, evaluation, reporting
    except Exception as err:  # the group cannot go on: every cell still training failed
        for c in list(alive):
            end(c, err)
        return
    for c in list(alive):
        end(c, None)


def _batches(loader: Any, plan: Any, first: _Cell, device: torch.device) -> Any:
    """A loader's batches on the device, each with the hidden states the heads read."""
    for batch in loader:
        batch = move_data_to_device(batch, device)
        mask = batch["attention_mask"]
        yield batch, plan.hidden_states(first.module.encoder, batch["cached_states"], mask)


def _split_logits(
    units: list[_Unit], loader: Any, plan: Any, first: _Cell, device: torch.device
) -> tuple[list[dict[str, Tensor]], list[list[list[Tensor]]]]:
    """Every cell's logits on one split, copied to the host once.

    Scoring each cell's batch where its logits are would copy predictions, labels and
    ids back per cell and batch, and on a GPU wait for it each time; here the split's
    logits stay on the device until the loop ends, then each unit's come back in one copy.

    Returns:
        The batches' ``idx`` and ``labels`` on the host, and per unit, per cell, the logits
        of each batch on the host (the batches' boundaries, so metrics see the same updates).
    """
    kept: list[dict[str, Tensor]] = []
    outputs: list[list[Tensor]] = [[] for _ in units]
    for batch, hidden in _batches(loader, plan, first, device):
        kept.append({"idx": batch["idx"], "labels": batch["labels"]})
        for out, unit in zip(outputs, units, strict=True):
            out.append(torch.stack(unit.eval_logits(hidden, batch)))  # (N, B, C)
    if not kept:
        return [], [[[] for _ in unit.cells] for unit in units]
    sizes = [len(b["labels"]) for b in kept]
    host = {k: torch.cat([b[k] for b in kept]).cpu().split(sizes) for k in ("idx", "labels")}
    batches = [{k: host[k][i] for k in host} for i in range(len(kept))]
    logits = []
    for out, unit in zip(outputs, units, strict=True):
        rows = torch.cat(out, dim=1).cpu()  # (N, examples, C)
        logits.append([list(rows[i].split(sizes)) for i in range(len(unit.cells))])
    return batches, logits


def _evaluate(
    units: list[_Unit], datamodule: Any, plan: Any, first: _Cell, device: torch.device
) -> None:
    """Every cell's predictions on the splits evaluated each epoch (scored on the host)."""
    loaders = datamodule.val_dataloader()
    for unit in units:
        for c in unit.cells:
            c.rng.skip(len(loaders))  # the single run's loaders draw their base seeds
    with torch.no_grad():
        for name, loader in zip(datamodule.eval_names, loaders, strict=True):
            batches, logits = _split_logits(units, loader, plan, first, device)
            for unit, per_cell in zip(units, logits, strict=True):
                for c, cell_logits in zip(unit.cells, per_cell, strict=True):
                    for batch, rows in zip(batches, cell_logits, strict=True):
                        c.module.evaluation.update(name, c.module.head, rows, batch)


def _close_epoch(units: list[_Unit], epoch: int, step: int) -> None:
    """Score the epoch of every cell and keep its best epoch (and its weights)."""
    for unit in units:
        for c in unit.cells:
            c.module.close_epoch(epoch, step, 1, snapshot=partial(unit.snapshot, c))


def _report(
    units: list[_Unit], datamodule: Any, plan: Any, first: _Cell, device: torch.device
) -> None:
    """Score the reporting splits once, each cell on its best epoch's weights."""
    names = datamodule.report_names
    if not names:
        return
    evaluations = {}
    for unit in units:
        for c in unit.cells:
            state = c.module.take_best_state()
            if state is not None:
                unit.load(c, state)
            evaluations[id(c)] = c.module.reporting_evaluation(torch.device("cpu"))
            c.module.report = {"metrics": {}, "predictions": {}}
    with torch.no_grad():
        for name, loader in zip(names, datamodule.report_dataloaders(), strict=True):
            batches, logits = _split_logits(units, loader, plan, first, device)
            for unit, per_cell in zip(units, logits, strict=True):
                for c, cell_logits in zip(unit.cells, per_cell, strict=True):
                    evaluation = evaluations[id(c)]
                    for batch, rows in zip(batches, cell_logits, strict=True):
                        evaluation.update(name, c.module.head, rows, batch)
                    c.module.report["metrics"][name] = evaluation.scores(name, 1)
                    c.module.report["predictions"][name] = evaluation.collect(name)


def train_trials(cfgs: Sequence[DictConfig], run_dirs: Sequence[str | Path]) -> int:
    """Train the missing search trials of these cells in lock-step groups.

    Only searches with ``search.order_seed`` set qualify (the trials' batch order is then
    the same for every head of a setting). Trials shared by several cells (their seeds)
    train once; a trial another process holds, or one that has no partner in a group, is
    left to :func:`bench.run.search.run_with_search` when its cell trains.

    Args:
        cfgs: The cells' configs (cells without such a search are passed over).
        run_dirs: Their run directories (trials live beside them).

    Returns:
        How many trials were trained here.
    """
    pending: dict[Path, tuple[DictConfig, dict[str, Any]]] = {}
    for cfg, run_dir in zip(cfgs, run_dirs, strict=True):
        if not search_enabled(cfg) or OmegaConf.select(cfg, "search.order_seed") is None:
            continue
        try:
            for tcfg, folder, extra in pending_trials(cfg, run_dir):
                pending.setdefault(folder, (tcfg, extra))
        except ConfigError:
            continue  # the cell records the bad search itself
    folders = list(pending)
    groups, _ = group_cells([pending[f][0] for f in folders])
    trained = 0
    for members in groups:
        with ExitStack() as locks:
            mine = []
            for i in members:
                lock = trial_lock(folders[i])
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    continue  # another process trains it
                locks.callback(lock.release)
                tcfg = pending[folders[i]][0]
                if read_trial(folders[i] / TRIAL_FILE, config_hash(tcfg)) is None:
                    mine.append(i)
            if len(mine) > 1:
                train_group(
                    [pending[folders[i]][0] for i in mine],
                    [folders[i] for i in mine],
                    result_file=TRIAL_FILE,
                    report=False,
                    extras=[pending[folders[i]][1] for i in mine],
                )
                trained += len(mine)
    return trained
