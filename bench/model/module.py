"""The ``LightningModule``: an encoder, a head, a freezing strategy, the task's metrics.

It takes plain values (dicts, ints, floats) and builds every module inside, so
``save_hyperparameters()`` records the whole grid cell and checkpoints load back.
What differs between sequence tasks (GLUE) and token tasks (CoNLL-2003): the head family,
the loss and the evaluation, comes from the task's :mod:`~bench.model.task_types` type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from torch import Tensor, nn
from torchmetrics import Metric

from bench.data.encoder_inputs import SECOND_SENTENCE
from bench.data.tasks import get_task
from bench.errors import DivergedError, EncoderError
from bench.model.adaptation import Adaptation, StageCallback, build_adaptation
from bench.model.cached_forward import FeaturePlan
from bench.model.compiled import compile_encoder
from bench.model.encoders import EncoderInfo, load_encoder, pooler_weights, run_encoder
from bench.model.freezing import FreezeReport
from bench.model.heads import count_parameters
from bench.model.matmul import DEFAULT_MATMUL_PRECISION
from bench.model.ranks import sum_across_ranks
from bench.model.running_loss import RunningLoss
from bench.model.task_types import Evaluation, task_type

#: ``trainer.precision`` values whose gradients a scaler scales: a fused AdamW unscales them
#: inside its step, after clipping, so there ``optim.fused`` gets the foreach update.
SCALED_PRECISIONS = ("16-mixed", "16")


class HeadbenchModule(L.LightningModule):
    """One grid cell: encoder × head × freezing strategy on a task.

    Args:
        encoder: The ``encoder`` config group (``name``, ``source``, ``pooler``...).
        head: The ``head`` config group (``name`` plus head options).
        freeze: The ``freeze`` config group (``name`` plus the strategy's keys; see
            :mod:`bench.model.adaptation`).
        task: Task name.
        optim: ``encoder_lr``, ``head_lr`` (encoder training), ``frozen_head_lr``
            (encoder frozen), ``weight_decay``, ``warmup_ratio``, ``adam_eps``, ``betas``.
        dev_names: Names of the splits evaluated every epoch, in dataloader order; the
            first one selects the best epoch (the held-out ``select`` slice, or ``dev``).
        report_names: Reporting splits evaluated once, after training, on the best
            epoch's weights (:meth:`evaluate_reporting_splits`); none when the first
            evaluation split is itself the reporting split (``selection=dev``).
        frozen_encoder: An encoder already loaded from ``encoder`` and frozen, with its
            info, shared instead of loading another copy (lock-step groups of frozen
            cells: :mod:`bench.run.lockstep`), when loading it drew no random numbers
            (:attr:`encoder_drew_random`), so that the head's initial weights are the same
            either way. Not recorded as a hyperparameter.
        pair_encoding: How a pair task's pairs are posed: ``cross`` (or None: one sequence)
            or ``siamese`` (each sentence encoded alone; batches carry the second sentences
            under :data:`~bench.data.encoder_inputs.SECOND_SENTENCE`, and the head's
            :meth:`~bench.model.heads.SequenceHead.pair_forward` combines them).
    """

    def __init__(
        self,
        encoder: dict[str, Any],
        head: dict[str, Any],
        freeze: dict[str, Any],
        task: str,
        optim: dict[str, Any],
        dev_names: list[str] | None = None,
        report_names: list[str] | None = None,
        frozen_encoder: tuple[nn.Module, EncoderInfo] | None = None,
        pair_encoding: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["frozen_encoder"])
        self.spec = get_task(task)
        before = torch.get_rng_state()
        self.encoder, self.encoder_info = frozen_encoder or load_encoder(encoder)
        #: Whether loading the encoder drew random numbers (weights missing from the
        #: checkpoint are initialised): sharing it would then change the head's initial weights.
        self.encoder_drew_random = not torch.equal(before, torch.get_rng_state())
        info = self.encoder_info
        self.task_type = task_type(self.spec)
        self.head: nn.Module = self.task_type.build_head(
            head, info.hidden_size, info.num_layers, info.summary, pair_encoding == "siamese"
        )
        if head.get("init") == "pretrained":
            self._copy_pretrained_pooler()
        if getattr(self.encoder, "pooler", None) is not None:
            setattr(self.encoder, "pooler", None)  # noqa: B010  # the head is the only pooler
        self.adaptation: Adaptation = build_adaptation(self.encoder, freeze)
        self.encoder = self.adaptation.encoder  # LoRA wraps the model
        self.dev_names = list(dev_names or ["dev"])
        self.evaluation = self.task_type.evaluation(self.dev_names)
        self.feature_plan: FeaturePlan | None = None  # see use_cached_states
        self.history: list[dict[str, Any]] = []
        self.report_names = list(report_names or [])
        self.best: dict[str, Any] | None = None
        # The best epoch's weights (CPU copies), while reporting splits wait for them.
        self._best_state: dict[str, Tensor] | None = None
        self.report: dict[str, Any] | None = None  # reporting-split metrics and predictions
        self.running_loss = RunningLoss()  # the epoch's training loss, on the device
        #: Read the training loss for NaN/inf every this many steps (and before each
        #: evaluation), not every step: reading it waits for the GPU (``runtime.loss_check_steps``).
        self.loss_check_steps = 1
        #: ``trainer.compile``'s mode (:mod:`bench.model.compiled`), set by the run; None: eager.
        self.compile_mode: str | None = None
        #: The mode the encoder was compiled with when training started, or None.
        self.compiled: str | None = None
        #: ``trainer.matmul_precision`` (:mod:`bench.model.matmul`), set by the run.
        self.matmul_precision = DEFAULT_MATMUL_PRECISION
        #: torch's float32 matmul precision in force when training ended (rank 0's).
        self.applied_matmul_precision: str | None = None
        self.train()  # from_pretrained returns eval mode; frozen parts stay in eval

    def _copy_pretrained_pooler(self) -> None:
        info = self.encoder_info
        if info.pooler_declared != "trained" or info.pooler_detected != "trained":
            raise EncoderError(
                f"head.init=pretrained needs a trained pooler, but encoder {info.name!r} "
                f"declares pooler={info.pooler_declared} and its weights look "
                f"{info.pooler_detected}; use head.init=random (RoBERTa-style head)"
            )
        self.head.load_pretrained_pooler(*pooler_weights(self.encoder))  # type: ignore[operator]

    def use_cached_states(self, plan: FeaturePlan) -> None:
        """Read batches' ``cached_states`` through ``plan`` instead of running the encoder.

        The run calls this with the plan :func:`bench.cache.serve.serve_features` returns,
        together with handing the cached splits to the data module.

        Args:
            plan: Which hidden states the cache holds and, for ``top_k``, where the
                trainable top of the encoder starts.
        """
        self.feature_plan = plan

    @property
    def freeze_report(self) -> FreezeReport:
        """The strategy's current trainable set (phased strategies change it)."""
        return self.adaptation.report

    @property
    def encoder_frozen(self) -> bool:
        """True when no encoder parameter trains."""
        return self.freeze_report.encoder_trainable == 0

    def parameter_counts(self) -> dict[str, int]:
        """Trainable and total parameters of the encoder, the head and both.

        ``trainable`` and ``encoder_trainable`` are the maximum over training when the
        trainable set changed (LP-FT, gradual unfreezing): the cost axis.
        """
        counts = {
            "encoder_trainable": self.freeze_report.encoder_trainable,
            "encoder_total": self.freeze_report.encoder_total,
            "head": count_parameters(self.head),
            "trainable": count_parameters(self, trainable_only=True),
            "total": count_parameters(self),
        }
        peak = max(self.adaptation.trainable_history, key=lambda h: h["trainable"], default=None)
        if peak is not None and peak["trainable"] > counts["trainable"]:
            counts.update(encoder_trainable=peak["encoder_trainable"], trainable=peak["trainable"])
        return counts

    def learning_rates(self) -> dict[str, Any]:
        """The learning rates to record: encoder and head, plus the strategy's own."""
        return self.adaptation.learning_rates(self.hparams["optim"])

    def on_fit_start(self) -> None:
        """Compile the encoder when it trains, and set this process's matmul precision.

        ``trainer.compile`` and ``trainer.matmul_precision``. A cell that reads cached states
        (:meth:`use_cached_states`) runs no encoder forward (``freeze=frozen``) or calls the
        top layers one by one (``top_k``): nothing to compile.
        """
        if self.compile_mode and self.feature_plan is None and self.compiled is None:
            compile_encoder(self.encoder, self.compile_mode)
            self.compiled = self.compile_mode
        # each rank sets it (ddp_spawn starts fresh processes); the run restores it after
        torch.set_float32_matmul_precision(self.matmul_precision)

    def configure_callbacks(self) -> list[L.Callback]:
        """The strategy's stage callback (records trainable counts; unfreezes phases)."""
        return [StageCallback(self.adaptation)]

    def train(self, mode: bool = True) -> HeadbenchModule:
        """Switch modes but keep frozen encoder parts in eval mode (no dropout)."""
        super().train(mode)
        for module in self.freeze_report.frozen_modules:
            module.eval()
        return self

    def forward(self, batch: dict[str, Any]) -> Tensor:
        """Return logits for a padded batch: (B, C), or (B, T, C) for a token task.

        A siamese pair batch (:data:`~bench.data.encoder_inputs.SECOND_SENTENCE`) runs the
        encoder (or reads the cache) on each sentence alone, then the head on both.
        """
        second = batch.get(SECOND_SENTENCE)
        if second is not None:
            return self.head.pair_forward(  # type: ignore[operator]
                self._hidden_states(batch),
                batch["attention_mask"],
                self._hidden_states(second),
                second["attention_mask"],
            )
        return self.head(self._hidden_states(batch), batch["attention_mask"])

    def _hidden_states(self, batch: dict[str, Any]) -> Any:
        """All hidden states of a batch's inputs: from the cache, or an encoder forward."""
        if "cached_states" in batch:  # states from bench.cache: no (or a partial) forward
            assert self.feature_plan is not None, "cached states without a feature plan"
            return self.feature_plan.hidden_states(
                self.encoder, batch["cached_states"], batch["attention_mask"]
            )
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.encoder_frozen):
            return run_encoder(self.encoder, batch, self.encoder_info.causal).hidden_states

    def _loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return self.task_type.loss(self.head, logits, batch)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """One optimisation step; a non-finite loss stops the run as diverged.

        The loss is read back (a host sync on a GPU) only every :attr:`loss_check_steps`
        steps and before each evaluation; the step recorded is the first non-finite one.
        """
        loss = self._loss(self(batch), batch)
        size = batch["attention_mask"].shape[0]
        self.running_loss.add(loss, size, self.global_step)
        if (batch_idx + 1) % self.loss_check_steps == 0:
            self.running_loss.check()  # raises DivergedError naming the first bad step
        self.log("train/loss", loss, on_step=True, on_epoch=True, batch_size=size, sync_dist=True)
        return loss

    def add_train_loss(self, loss: float, size: int) -> None:
        """Add a training batch's mean loss to the epoch's running mean (``train_loss``)."""
        self.running_loss.add(loss, size)

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Any = None,
    ) -> None:
        """Step, then free the gradients at once (as the HF ``Trainer`` does).

        Lightning zeroes gradients inside the next step's closure, after its forward
        pass, so that forward would run with the last step's gradients (one more copy of
        every trainable parameter) still allocated: a higher memory peak, and activations
        that cannot reuse the freed gradient memory. Freeing them here changes no number:
        the next backward starts from no gradients either way.
        """
        try:
            super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        except RuntimeError as err:  # torch: an update beyond the parameters' float range
            if "without overflow" not in str(err):
                raise
            raise DivergedError(
                self.global_step, math.inf, "update (beyond float32's range)"
            ) from err
        optimizer.zero_grad(set_to_none=True)

    def configure_gradient_clipping(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: Any = None,
    ) -> None:
        """Clip as Lightning does, also for a fused AdamW under ``bf16-mixed``.

        Lightning's mixed precision refuses to clip for any fused optimizer, because under
        ``16-mixed`` the fused step unscales the gradients itself, after clipping would have
        seen them scaled. ``bf16-mixed`` has no gradient scaler: the gradients are the true
        ones, and clipping them is what the base precision plugin does.
        """
        plugin = self.trainer.precision_plugin
        if (
            optimizer.defaults.get("fused")
            and isinstance(plugin, MixedPrecision)
            and plugin.scaler is None
        ):
            if gradient_clip_val:
                algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
                Precision.clip_gradients(plugin, optimizer, float(gradient_clip_val), algorithm)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_train_epoch_start(self) -> None:
        """Enter training mode (frozen parts stay in eval); reset the running loss."""
        self.train()
        self.running_loss.reset()

    def on_train_epoch_end(self) -> None:
        """Stop a run whose last steps since a check had a non-finite loss."""
        self.running_loss.check()

    def on_validation_epoch_start(self) -> None:
        """Stop a diverged run before it is evaluated (its weights may be NaN)."""
        self.running_loss.check()

    def validation_step(
        self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Update the split's metrics and keep its predictions."""
        name = self.dev_names[dataloader_idx]
        logits = self(batch)
        self.log(
            f"{name}/loss",
            self._loss(logits, batch),
            batch_size=batch["attention_mask"].shape[0],
            add_dataloader_idx=False,
            sync_dist=True,  # a mean over all ranks under DDP; nothing to sync otherwise
        )
        self.evaluation.update(name, self.head, logits, batch)

    def on_validation_epoch_end(self) -> None:
        """Compute metrics per split, record the epoch, keep the best epoch's predictions."""
        if self.trainer.world_size > 1:  # every rank scores the whole split, each example once
            self.evaluation.gather()
        record = self.close_epoch(self.current_epoch, self.global_step, self.trainer.world_size)
        for name in self.dev_names:
            self.log_dict(  # the same on every rank: sync_dist only averages equal values
                {f"{name}/{k}": v for k, v in record[name].items() if v is not None},
                sync_dist=True,
            )

    def close_epoch(
        self,
        epoch: int,
        step: int,
        world_size: int = 1,
        snapshot: Callable[[], dict[str, Tensor]] | None = None,
    ) -> dict[str, Any]:
        """Score the epoch's evaluation splits, append the record, keep the best epoch.

        The best epoch is the one with the highest main metric on the first evaluation
        split (ties: the earlier one); its predictions are kept, and, when reporting splits
        wait for them, its weights.

        Args:
            epoch: The epoch just evaluated.
            step: Optimizer steps taken so far.
            world_size: Ranks whose predictions :attr:`evaluation` holds (gathered).
            snapshot: Returns CPU copies of the weights to restore for the reporting splits
                (lock-step training keeps the head's weights outside this module); None:
                the module's whole ``state_dict``.

        Returns:
            The epoch's record (as appended to :attr:`history`).
        """
        record: dict[str, Any] = {"epoch": epoch, "step": step}
        for name in self.dev_names:
            record[name] = self.evaluation.scores(name, world_size)
        total, count = sum_across_ranks(self.running_loss.totals())  # all ranks under DDP
        record["train_loss"] = total / count if count else None  # mean over the epoch so far
        self.history.append(record)
        main = record[self.dev_names[0]][self.spec.main_metric]
        main = -math.inf if main is None else main
        if self.best is None or main > self.best["main"]:
            self.best = {
                "epoch": epoch,
                "main": main,
                "metrics": {n: record[n] for n in self.dev_names},
                "predictions": {n: self.evaluation.collect(n) for n in self.dev_names},
            }
            if self.report_names:  # the reporting splits are scored on these weights later
                self._best_state = (
                    snapshot()
                    if snapshot is not None
                    else {k: v.detach().to("cpu", copy=True) for k, v in self.state_dict().items()}
                )
        self.evaluation.clear()
        return record

    def take_best_state(self) -> dict[str, Tensor] | None:
        """The weights kept at the best epoch (once: the module forgets them)."""
        state, self._best_state = self._best_state, None
        return state

    def on_train_end(self) -> None:
        """Score the reporting splits once, on the selected epoch's weights.

        Also records the float32 matmul precision still in force (``trainer.matmul_precision``).
        """
        self.applied_matmul_precision = torch.get_float32_matmul_precision()
        if self.report_names and self._best_state is not None:
            self.load_state_dict(self._best_state)
            self._best_state = None
            self.report = self.evaluate_reporting_splits()

    @torch.no_grad()
    def evaluate_reporting_splits(self) -> dict[str, Any]:
        """Metrics and predictions of every reporting split, in eval mode, each example once.

        Runs in the training process (every rank under DDP scores the whole split, with no
        cross-rank sync), with the trainer's precision context, on the data module's
        :meth:`~bench.data.sequence_datamodule.SplitLoaders.report_dataloaders`.

        Returns:
            ``{"metrics": {split: scores}, "predictions": {split: columns}}``.
        """
        datamodule: Any = self.trainer.datamodule  # type: ignore[attr-defined]
        loaders = datamodule.report_dataloaders()
        evaluation = self.reporting_evaluation(self.device)
        was_training = self.training
        self.eval()
        report: dict[str, Any] = {"metrics": {}, "predictions": {}}
        try:
            with self.trainer.precision_plugin.forward_context():
                for name, loader in zip(self.report_names, loaders, strict=True):
                    for batch in loader:
                        batch = move_data_to_device(batch, self.device)
                        evaluation.update(name, self.head, self(batch), batch)
                    report["metrics"][name] = evaluation.scores(name, 1)
                    report["predictions"][name] = evaluation.collect(name)
        finally:
            self.train(was_training)
        return report

    def reporting_evaluation(self, device: torch.device) -> Evaluation:
        """A fresh evaluation of the reporting splits that scores this process's predictions.

        Args:
            device: Where the in-loop metrics live (the logits' device).

        Returns:
            The evaluation, its metrics never synced across ranks (each holds the whole split).
        """
        evaluation = self.task_type.evaluation(self.report_names).to(device)
        for metric in evaluation.modules():
            if isinstance(metric, Metric):
                metric.sync_on_compute = False  # each rank holds the whole split
        return evaluation

    def run_record(self) -> dict[str, Any]:
        """What training recorded on the module (plain values): history, best epoch, stages.

        ``ddp_spawn`` trains in child processes; :mod:`bench.run.distributed` sends this back
        to the cell's own process, which writes the result.
        """
        return {
            "history": self.history,
            "best": self.best,
            "report": self.report,
            "trainable_history": self.adaptation.trainable_history,
            "compiled": self.compiled,
            "matmul_precision": self.applied_matmul_precision,
        }

    def restore_run_record(self, record: dict[str, Any]) -> None:
        """Adopt a :meth:`run_record` made in another process."""
        self.history = record["history"]
        self.best = record["best"]
        self.report = record.get("report")
        self.adaptation.trainable_history = record["trainable_history"]
        self.compiled = record.get("compiled")
        self.applied_matmul_precision = record.get("matmul_precision")

    def configure_optimizers(self) -> dict[str, Any]:  # type: ignore[override]
        """AdamW with separate encoder/head learning rates (groups from the strategy).

        See :meth:`build_optimizer`; the schedule is stepped every optimizer step.
        """
        total = int(self.trainer.estimated_stepping_batches)
        per_epoch = math.ceil(
            self.trainer.num_training_batches / self.trainer.accumulate_grad_batches
        )
        optimizer, scheduler = self.build_optimizer(total, per_epoch, str(self.trainer.precision))
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    def build_optimizer(
        self, total: int, per_epoch: int, precision: str = "32-true"
    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """The cell's AdamW and its learning-rate schedule.

        Matrices decay, biases and norm weights do not (nanoGPT's grouping).
        Warm-up then linear decay to zero, stepped every optimizer step (LP-FT restarts
        it for its fine-tuning phase; see :mod:`bench.model.adaptation`).

        Args:
            total: Optimizer steps of the whole run.
            per_epoch: Optimizer steps per epoch.
            precision: The trainer's precision (no fused kernel under ``16-mixed``).

        Returns:
            The optimizer and the scheduler.
        """
        optim = self.hparams["optim"]
        groups = self.adaptation.param_groups(self.head, optim)
        beta1, beta2 = optim.get("betas", (0.9, 0.999))  # torch takes floats only (not 0)
        betas, eps = (float(beta1), float(beta2)), optim.get("adam_eps", 1e-8)
        # optim.fused: one fused kernel per step (~4x faster than foreach on CPU; the HF
        # Trainer's default). Off by default because it rounds differently, and committed
        # results were made without it. Under 16-mixed the fused step unscales the gradients
        # itself, after clipping (Lightning refuses that), so there a fused request gets the
        # multi-tensor (foreach) update instead: a handful of operators per step, where
        # torch's default on a CPU is a loop of about ten per parameter tensor (and a host
        # read of each parameter's step count). bf16-mixed has no scaler: fused, and
        # configure_gradient_clipping clips.
        wants_fused = bool(optim.get("fused", False))
        fused = wants_fused and str(precision) not in SCALED_PRECISIONS
        foreach = True if wants_fused and not fused else None
        try:
            optimizer = torch.optim.AdamW(
                groups, betas=betas, eps=eps, fused=fused or None, foreach=foreach
            )
        except RuntimeError:  # a device or torch build without the fused kernel
            optimizer = torch.optim.AdamW(groups, betas=betas, eps=eps, foreach=foreach)
        return optimizer, self.adaptation.scheduler(optimizer, optim, total, per_epoch)
