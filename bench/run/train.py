"""Train and evaluate one grid cell; write its ``result.json`` atomically.

:func:`run` is plain Python (testable without Hydra's entry point); ``bench.run.cli``
wraps it in ``@hydra.main``. A failing cell never raises out of :func:`run`: its result
records ``status`` (``ok``, ``failed``, ``diverged``) and the reason, so a sweep goes on.
A process told to stop (SIGTERM, SIGINT) records nothing for the cell it was training and
raises :class:`bench.run.interrupts.Interrupted`: the cell stays pending.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping
from omegaconf import DictConfig, OmegaConf

from bench.atomic import atomic_write_json
from bench.axes.heads import ANCHOR
from bench.cache.serve import ServedFeatures, StatesCollate, serve_features
from bench.cell import (
    HASH_RECIPE,
    RESULT_FILE,
    RESULT_SCHEMA,
    batch_order_seed,
    cell_of,
    cell_path,
    config_hash,
    slice_seed,
)
from bench.clock import utc_now
from bench.data.baselines import best_constant
from bench.data.selection import SELECTION_SPLIT
from bench.data.tasks import get_task
from bench.errors import DivergedError, HeadbenchError
from bench.model.compiled import check_compile_mode
from bench.model.encoders import load_tokenizer
from bench.model.matmul import check_matmul_precision
from bench.model.module import HeadbenchModule
from bench.model.task_types import task_type
from bench.paths import cache_dir
from bench.results.degenerate import prediction_summary
from bench.run import interrupts, loky_worker, provenance
from bench.run.allocator import configure_malloc
from bench.run.distributed import trainer_strategy
from bench.run.failures import failure_reason, is_environmental
from bench.run.packing import estimate_cell
from bench.run.preflight import check_cell, check_max_length
from bench.run.timing import TrainLoopTimer, phase
from bench.run.trackers import CellTracker, cell_loggers, check_logger, open_tracker

log = logging.getLogger(__name__)


class SearchFailed(HeadbenchError):
    """The cell's search could not select a configuration (every trial failed)."""


def _main_metric(cfg: DictConfig) -> str | None:
    try:
        return get_task(cfg.task.name).main_metric
    except KeyError:
        return None  # the unknown task is reported by the run itself


def _cache_config(cfg: DictConfig) -> dict[str, Any] | None:
    cache = OmegaConf.to_container(cfg.cache, resolve=True) if "cache" in cfg else None
    return {str(k): v for k, v in cache.items()} if isinstance(cache, dict) else None


def _selection_config(cfg: DictConfig) -> dict[str, Any]:
    """The ``selection`` group as plain values; a config without one selects on dev."""
    node = OmegaConf.select(cfg, "selection", default=None)
    if node is None:
        return {"name": "dev"}
    plain = OmegaConf.to_container(node, resolve=True)
    assert isinstance(plain, dict)
    return {str(k): v for k, v in plain.items()}


def _selection_record(
    selection: dict[str, Any], datamodule: Any, best: dict[str, Any], data_seed: int
) -> dict[str, Any]:
    """What chose the epoch: the split, its size and example ids, its scores."""
    split = datamodule.eval_names[0]
    record: dict[str, Any] = {
        "mode": selection["name"],
        "split": split,
        "best_epoch": best["epoch"],
        "metrics": best["metrics"][split],
    }
    if datamodule.heldout:
        ids = datamodule.selection_ids
        record.update(size=len(ids), seed=data_seed, carve=datamodule.carve, ids=ids)
        if datamodule.slice_seed is not None:  # the cell's own slice (search.pairing: seed)
            record["slice_seed"] = datamodule.slice_seed
    return record


def memory_estimate(cfg: DictConfig) -> dict[str, Any] | None:
    """The cell's estimated peak device memory (:func:`bench.run.packing.estimate_cell`).

    None where it cannot be made (the estimate never fails a cell).
    """
    try:
        return estimate_cell(cfg).to_dict()
    except Exception as err:
        log.warning("no memory estimate for %s: %s", cell_path(cfg), err)
        return None


@dataclass
class CellSetup:
    """A cell ready to train: its task, data module, module and served features.

    Attributes:
        spec: The task.
        kind: The task's type (:mod:`bench.model.task_types`).
        datamodule: The data module, set up, serving the cached splits where the cell
            reads the cache.
        module: The training module (cached states plugged in where used).
        served: What the feature cache served.
        report: Whether the reporting splits are scored (not for a search trial).
    """

    spec: Any
    kind: Any
    datamodule: Any
    module: HeadbenchModule
    served: ServedFeatures
    report: bool


def build_datamodule(cfg: DictConfig) -> Any:
    """The cell's data module, as configured (not yet set up).

    Args:
        cfg: The cell's config.

    Returns:
        The task kind's data module (:func:`bench.model.task_types.task_type`), with the
        cell's tokenizer, data subset, selection slice and batch order.
    """
    encoder = OmegaConf.to_container(cfg.encoder, resolve=True)
    cache = OmegaConf.to_container(cfg.cache, resolve=True) if "cache" in cfg else None
    assert isinstance(encoder, dict) and (cache is None or isinstance(cache, dict))
    kind = task_type(get_task(cfg.task.name))
    pair = OmegaConf.select(cfg, "pair_encoding", default=None)  # pair tasks only (preflight)
    return kind.datamodule(
        load_tokenizer(cast(dict[str, Any], encoder)),
        data_dir=cfg.data.dir,
        train_size=cfg.data.train_size,
        data_seed=int(cfg.data_seed),
        max_length=int(cfg.data.max_length),
        batch_size=int(cfg.data.batch_size),
        eval_batch_size=int(cfg.data.eval_batch_size),
        num_workers=int(cfg.data.num_workers),
        group_by_length=cfg.data.get("group_by_length", False),
        token_cache_dir=cache_dir(cast(dict[str, Any] | None, cache), "tokenized"),
        selection=_selection_config(cfg),
        order_seed=batch_order_seed(cfg),
        pad_to_multiple_of=cfg.data.get("pad_to_multiple_of"),
        slice_seed=slice_seed(cfg),
        **({"pair_encoding": pair} if pair == "siamese" else {}),
    )


def prepare_cell(
    cfg: DictConfig,
    result: dict[str, Any],
    report: bool,
    shared: CellSetup | None = None,
) -> CellSetup:
    """Everything before training: seed, data module, module, cache; fills ``result``.

    Args:
        cfg: The cell's config.
        result: The result being built (``runtime``, ``encoder_info``, ``params``,
            ``learning_rates``, ``adaptation``, ``data``, ``cache``, ``baseline``,
            ``best_constant`` are set here).
        report: Whether the reporting splits are scored.
        shared: A cell of the same lock-step group already prepared (same data settings,
            data order, frozen encoder and cache): its data module, served features and
            encoder are reused; this cell only builds its own head, as :func:`run` would.

    Returns:
        The prepared cell.
    """
    malloc = str(OmegaConf.select(cfg, "runtime.malloc", default="default"))
    result["runtime"] = {"malloc": configure_malloc(malloc)}
    if (loky := loky_worker.record()) is not None:
        result["runtime"]["loky_worker"] = loky  # how much it may grow before loky replaces it
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    # Frozen encoder parts are in eval mode on purpose (no dropout); Lightning warns about it.
    warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
    spec = get_task(cfg.task.name)
    kind = task_type(spec)  # everything that differs between sequence and token tasks
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    with phase(result, "data"):
        datamodule = shared.datamodule if shared is not None else build_datamodule(cfg)
    frozen_encoder = None
    first = shared.module if shared is not None else None
    if (
        first is not None
        and not first.encoder_drew_random
        and plain["head"].get("init") != "pretrained"
    ):
        # the group's frozen encoder; loading another copy would draw nothing either (a
        # pretrained-pooler head reads the pooler the first module removed: its own copy)
        frozen_encoder = (first.encoder, first.encoder_info)
    with phase(result, "model"):
        module = HeadbenchModule(
            encoder=plain["encoder"],
            head=plain["head"],
            freeze=plain["freeze"],
            task=spec.name,
            optim=plain["optim"],
            dev_names=datamodule.eval_names,
            # a search trial is never scored on a reporting split: it only selects
            report_names=datamodule.report_names if report else [],
            frozen_encoder=frozen_encoder,
            pair_encoding=plain.get("pair_encoding"),
        )
    info = module.encoder_info
    check_max_length(
        int(cfg.data.max_length),
        info.name,
        info.model_type,
        info.max_positions,
        datamodule.pad_to_multiple_of,
    )
    result["encoder_info"] = module.encoder_info.to_dict()
    result["params"] = module.parameter_counts()
    result["learning_rates"] = module.learning_rates()
    result["adaptation"] = module.adaptation.record
    # What packing (bench/run/packing.py) assumes this cell needs, beside its measured peak.
    result["memory_estimate"] = memory_estimate(cfg)
    with phase(result, "data"):
        if shared is None:
            datamodule.setup("fit")
    assert datamodule.train is not None
    result["data"] = {
        "source": str(cfg.data.dir) if cfg.data.dir else "hub",
        **datamodule.describe(),
        "order_seed": datamodule.order_seed,  # None: the batch order came from `seed`
    }
    with phase(result, "features"):  # a group's later cells reuse the first one's
        if shared is None:
            served = serve_features(module, datamodule, plain.get("cache"))
            if served.plan is not None:  # frozen layers are read from the cache
                datamodule.use_splits(served.splits, StatesCollate)
        else:
            served = shared.served
    result["cache"] = served.record
    if served.plan is not None:
        module.use_cached_states(served.plan)
    reporting = datamodule.dev_names if report else []
    result["baseline"] = {
        name: kind.majority_baseline(datamodule.train_labels, datamodule.dev_labels[name])
        for name in reporting
    }
    result["best_constant"] = {
        name: best_constant(spec, datamodule.dev_labels[name]) for name in reporting
    }
    return CellSetup(spec, kind, datamodule, module, served, report)


class ConfigureMalloc(L.Callback):
    """Applies ``runtime.malloc`` (:mod:`bench.run.allocator`) in every training process.

    With ``ddp_spawn`` each rank is a new process; ``setup`` runs in each of them before the
    first step (in a single process, :func:`configure_malloc` has already run: no change).
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Apply the mode in this (possibly newly spawned) process."""
        configure_malloc(self.mode)


def early_stopping(
    patience: int | None, eval_names: list[str], metric: str
) -> EarlyStopping | None:
    """Lightning's early stopping on the selecting split's main metric; None when off.

    Args:
        patience: ``trainer.early_stopping.patience``: evaluations without improvement
            before training stops; None = off (train every epoch).
        eval_names: The evaluated splits; the first selects (the selection slice).
        metric: The task's main metric (higher is better), as the module logs it.
    """
    if patience is None:
        return None
    # strict=False: an epoch whose metric is undefined (e.g. constant predictions) is not
    # logged, and counts as no evaluation rather than failing the cell.
    return EarlyStopping(
        monitor=f"{eval_names[0]}/{metric}", mode="max", patience=int(patience), strict=False
    )


def _train(
    cfg: DictConfig,
    run_dir: Path,
    result: dict[str, Any],
    report: bool,
    tracker: CellTracker | None,
) -> None:
    setup = prepare_cell(cfg, result, report)
    module, datamodule = setup.module, setup.datamodule
    # checked by preflight (an integer >= 1); a config from before the key: every step
    module.loss_check_steps = int(OmegaConf.select(cfg, "runtime.loss_check_steps", default=1))
    malloc = str(OmegaConf.select(cfg, "runtime.malloc", default="default"))
    trainer_kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    assert isinstance(trainer_kwargs, dict)
    trainer_kwargs.pop("name", None)
    stopping = cast(dict[str, Any], trainer_kwargs.pop("early_stopping", None) or {})
    stopper = early_stopping(
        stopping.get("patience"), datamodule.eval_names, setup.spec.main_metric
    )
    module.compile_mode = check_compile_mode(trainer_kwargs.pop("compile", False))
    module.matmul_precision = check_matmul_precision(trainer_kwargs.pop("matmul_precision", None))
    process_precision = torch.get_float32_matmul_precision()  # put back after the cell
    timer = TrainLoopTimer()
    with phase(result, "trainer"):
        trainer = L.Trainer(
            **trainer_strategy({str(k): v for k, v in trainer_kwargs.items()}),  # ddp_spawn
            callbacks=[timer, ConfigureMalloc(malloc), *([stopper] if stopper else [])],
            default_root_dir=run_dir,
            logger=cell_loggers(cfg, run_dir, tracker),  # CSV, TensorBoard, the tracker
            enable_checkpointing=False,
            num_sanity_val_steps=0,
            enable_progress_bar=sys.stderr.isatty(),
            enable_model_summary=False,
        )
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        with phase(result, "fit"):
            trainer.fit(module, datamodule=datamodule)
    finally:
        torch.set_float32_matmul_precision(process_precision)
        result["matmul_precision"] = module.applied_matmul_precision
        result["train_time_s"] = time.perf_counter() - started
        result["throughput"] = timer.summary()
        result["history"] = module.history
        # trainable parameters at the start and at every change; params: the maximum
        result["trainable_params_history"] = module.adaptation.trainable_history
        result["params"] = module.parameter_counts()
        if module.compile_mode:  # trainer.compile: whether the encoder's forward was compiled
            result["compile"] = {"mode": module.compile_mode, "applied": bool(module.compiled)}
    with phase(result, "conclude"):
        conclude_cell(cfg, run_dir, result, setup)
    if stopper is not None:  # read by the adequacy check (bench/results/adequacy.py)
        result["selection"]["stopped_early"] = stopper.stopped_epoch > 0


def conclude_cell(cfg: DictConfig, run_dir: Path, result: dict[str, Any], setup: CellSetup) -> None:
    """After training: the selection record, the best epoch's scores, predictions written.

    Args:
        cfg: The cell's config.
        run_dir: Where predictions are written.
        result: The result being built (``selection``, ``best``, ``predictions_summary``,
            ``degenerate`` are set here).
        setup: The trained cell (its module holds ``best`` and, with reporting splits
            scored on the best epoch, ``report``).
    """
    module, datamodule, spec, kind = setup.module, setup.datamodule, setup.spec, setup.kind
    report = setup.report
    assert module.best is not None, "no validation epoch ran"
    selection = _selection_config(cfg)
    result["selection"] = _selection_record(selection, datamodule, module.best, int(cfg.data_seed))
    if datamodule.heldout:  # the reporting splits, scored once on the selected epoch
        assert module.report is not None or not report, "the reporting splits were not scored"
        metrics = module.report["metrics"] if module.report else {}
        predictions = module.report["predictions"] if module.report else {}
    else:  # selection=dev: the selecting epoch's own dev scores (optimistic; marked)
        metrics, predictions = module.best["metrics"], module.best["predictions"]
    result["best"] = {"epoch": module.best["epoch"], "metrics": metrics}
    summary = prediction_summary(spec, predictions or module.best["predictions"])
    result["predictions_summary"] = summary
    result["degenerate"] = summary["degenerate"]
    if summary["degenerate"]:
        log.warning(
            "cell %s is degenerate: one prediction for all of %s: %s",
            cell_path(cfg),
            summary["split"],
            summary,
        )
    if predictions:
        kind.write_predictions(run_dir, predictions, datamodule)
        selecting = module.best["predictions"].get(SELECTION_SPLIT)
        if datamodule.heldout and spec.kind == "sequence" and selecting is not None:
            # The held-out slice at the selected epoch (probabilities: temperature scaling).
            kind.write_predictions(run_dir, {SELECTION_SPLIT: selecting}, datamodule)


def run(
    cfg: DictConfig,
    run_dir: str | Path,
    *,
    result_file: str = RESULT_FILE,
    report: bool = True,
    extra: dict[str, Any] | None = None,
    cell_hash: str | None = None,
    failure: str | None = None,
) -> dict[str, Any]:
    """Train and evaluate one cell and write ``<run_dir>/result.json``.

    Args:
        cfg: The composed config (``task``, ``encoder``, ``head``, ``freeze``, ``seed``,
            ``data``, ``optim``, ``trainer``, ``selection``).
        run_dir: Directory for the result, predictions and logs.
        result_file: The file written (a search trial writes ``trial.json``).
        report: Whether the reporting splits are scored (and predictions written); a
            search trial only selects, so it never sees them.
        extra: Fields added to the result (a trial's number and configuration, the
            search that chose this configuration).
        cell_hash: The config hash to record, when ``cfg`` is not the cell's own config
            (a search trains the cell's config with the selected trial's values).
        failure: Record the cell as failed for this reason without training (its search
            could not select a configuration).

    With ``logger=mlflow`` or ``logger=wandb`` a cell (not a search trial) is one run of the
    sweep's tracker experiment: the curves go there during training, and the final numbers
    of the result once, before it is written (:mod:`bench.run.trackers`; the result's
    ``tracker`` says where the run is).

    Returns:
        The result dict as written: ``status`` is ``ok``, ``failed`` or ``diverged``.

    Raises:
        Interrupted: When the process was told to stop, before or while training (nothing
            is recorded: the cell stays pending).
    """
    run_dir = Path(run_dir)
    interrupts.starting()  # a process told to stop starts no cell (a launcher's worker would)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result = new_result(cfg, cell_hash=cell_hash, extra=extra)
    tracker: CellTracker | None = None
    try:
        if failure is None:
            check_cell(cfg)  # a bad value fails here with a clear message, before any loading
            check_logger(cfg)
        # A cell (not a search trial) is one run of the sweep's tracker experiment, if any.
        tracker = open_tracker(cfg, result) if report else None
        if failure is not None:
            raise SearchFailed(failure)
        if OmegaConf.select(cfg, "head.name") == ANCHOR:  # fitted by scikit-learn, not trained
            from bench.run import anchors  # scikit-learn: imported for an anchor only

            setup = prepare_cell(anchors.stand_in(cfg), result, report)
            anchors.fit_anchor(cfg, setup, result)
            conclude_cell(cfg, run_dir, result, setup)
        else:
            _train(cfg, run_dir, result, report, tracker)
        result["status"] = "ok"
    except BaseException as err:
        stop = interrupts.as_interruption(err)
        if isinstance(stop, Exception):  # a failing cell is recorded, never fatal to the sweep
            record_failure(cfg, run_dir, result, stop)
        else:  # interrupted: nothing recorded, the tracker's run ends as killed, the stop goes on
            if tracker is not None:
                tracker.abort()
            if stop is err:
                raise
            raise stop from err
    return finish_result(run_dir, result, started, result_file, tracker)


def new_result(
    cfg: DictConfig, *, cell_hash: str | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The start of a cell's result: identity, config and hash, status ``running``.

    Args:
        cfg: The cell's config.
        cell_hash: The config hash to record, when ``cfg`` is not the cell's own config.
        extra: Fields added to the result.

    Returns:
        The result dict, filled in by training and :func:`finish_result`.
    """
    return {
        "schema": RESULT_SCHEMA,
        "cell": cell_of(cfg),
        "cell_path": cell_path(cfg),
        "status": "running",
        "reason": None,
        "config_hash": cell_hash or config_hash(cfg),
        "hash_recipe": HASH_RECIPE,
        "main_metric": _main_metric(cfg),
        "config": OmegaConf.to_container(cfg, resolve=True),
        **(extra or {}),
    }


def record_failure(cfg: DictConfig, run_dir: Path, result: dict[str, Any], err: Exception) -> None:
    """Record why a cell stopped: ``diverged`` (non-finite loss) or ``failed`` with its reason.

    Args:
        cfg: The cell's config.
        run_dir: The cell's directory (named in the reason when it cannot be written).
        result: The result being built.
        err: What stopped the cell (called from its ``except`` block: the traceback is kept).

    Raises:
        Interrupted: Instead of recording anything, when the process was told to stop
            (:mod:`bench.run.interrupts`): ``err`` is then what the stop broke.
    """
    stop = interrupts.as_interruption(err)
    if stop is not err:
        raise stop from err
    if isinstance(err, DivergedError):
        result.update(status="diverged", reason=str(err), diverged_step=err.step)
        log.error("cell %s diverged: %s", cell_path(cfg), err)
        return
    writes = {"run_dir": run_dir, "cache": cache_dir(_cache_config(cfg), "features")}
    result.update(status="failed", reason=failure_reason(err, writes))
    result["retryable"] = is_environmental(err)  # retried by the next launch
    result["traceback"] = traceback.format_exc()
    log.error("cell %s failed: %s", cell_path(cfg), result["reason"])


def finish_result(
    run_dir: Path,
    result: dict[str, Any],
    started: float,
    result_file: str = RESULT_FILE,
    tracker: CellTracker | None = None,
    git: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Add wall time and provenance, tell the tracker, write the result atomically.

    Args:
        run_dir: The cell's directory.
        result: The result (``status`` set).
        started: ``time.perf_counter()`` when the cell started.
        result_file: The file written in ``run_dir``.
        tracker: The cell's tracker run, if any.
        git: The checkout's :func:`~bench.run.provenance.git_commit`, where the caller
            read it for several cells that ran together (a lock-step group); else read here.

    Returns:
        The result as written.
    """
    result["wall_time_s"] = time.perf_counter() - started
    result["finished_at"] = utc_now()
    result["peak_memory"] = provenance.peak_memory()
    result["git"] = dict(git) if git is not None else provenance.git_commit()
    result["versions"] = provenance.versions()
    result["hardware"] = provenance.hardware()
    if tracker is not None:
        result["tracker"] = _finish_tracker(tracker, result)
    atomic_write_json(run_dir / result_file, result)
    return result


def _finish_tracker(tracker: CellTracker, result: dict[str, Any]) -> dict[str, Any]:
    """Log the cell's final numbers to its tracker run; a tracker error changes no result."""
    record = dict(tracker.record)
    try:
        tracker.finish(result)
    except Exception as err:  # the numbers are in result.json whatever the tracker does
        record["error"] = f"{type(err).__name__}: {err}"
        log.error("cell %s: logger=%s: %s", result["cell_path"], tracker.name, record["error"])
    return record
