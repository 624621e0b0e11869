"""Several devices for one cell (``trainer=ddp``): Lightning's ``ddp_spawn``, made whole.

Why ``ddp_spawn`` and not ``ddp``: Lightning's ``ddp`` starts ranks 1..N-1 by re-running
the command line (``python -m bench <argv> hydra.run.dir=...``). Under ``-m`` that argv is
the whole sweep, so every extra rank would launch the sweep again with its own Hydra
output directories (the known "Hydra + DDP duplicate output dir" problem); under the
joblib, submitit and Ray launchers the cell's process is not even started from that
command line. ``ddp_spawn`` forks nothing from the command line: the cell's own process
(rank 0's parent) composes the config, owns the run directory, spawns the ranks with
``torch.multiprocessing`` just for ``trainer.fit`` and writes ``result.json`` once,
after they joined.

What Lightning's spawn launcher brings back to the parent is the weights and
``trainer.callback_metrics``. :class:`SpawnDDPStrategy` also brings the module's run
record (per-epoch history, best epoch with its predictions, trainable-parameter history)
and the callbacks' ``state_dict()`` (the training-loop timer) in a temp file, through the launcher's
``get_extra_results`` / ``update_main_process_results`` hooks.

Evaluation: Lightning gives each rank a ``DistributedSampler`` shard of every dev split,
padded with repeated examples to equal length. :func:`bench.model.ranks.gather_rows`
all-gathers the predictions each rank kept and keeps every example once (by its ``idx``),
so metrics, prediction files and the degenerate check see the whole dev set exactly once.

Private Lightning API, on purpose and only here: Lightning has no public hook to send more
than the weights and ``callback_metrics`` back from spawned ranks, so
:class:`SpawnDDPStrategy` overrides ``DDPStrategy._configure_launcher`` and subclasses
``_MultiProcessingLauncher`` (its ``get_extra_results`` / ``update_main_process_results``
hooks). ``tests/test_private_api.py`` pins their shape, so a Lightning release that
changes them fails a fast test with the reason instead of a DDP run; pyproject bounds
Lightning below 3.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from typing import Any

from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from torch import nn

#: ``trainer.strategy`` values that run a cell on several devices through this module.
SPAWN_STRATEGIES = ("ddp_spawn",)
_RECORD = "headbench_record"
_CALLBACKS = "headbench_callbacks"
_PAYLOAD = "headbench_payload"
_CAPTURE_HOOK = "output_capturing_hook"  # transformers.utils.output_capturing


def drop_output_capturing_hooks(module: nn.Module) -> int:
    """Remove the forward hooks transformers 5 installs to record hidden states.

    transformers installs them (closures, which cannot be pickled) on a model's first
    forward pass and marks the model; ``spawn`` pickles the module for every rank. With the
    mark cleared, each process installs its own hooks again on its next forward pass.

    Args:
        module: Any module; every submodule is visited.

    Returns:
        The number of hooks removed.
    """
    removed = 0
    for sub in module.modules():
        for handle_id, hook in list(sub._forward_hooks.items()):
            if getattr(hook, "__qualname__", "").endswith(_CAPTURE_HOOK):
                del sub._forward_hooks[handle_id]
                removed += 1
        if getattr(sub, "_output_capturing_hooks_installed", False):
            setattr(sub, "_output_capturing_hooks_installed", False)  # noqa: B010
    return removed


class _RecordLauncher(_MultiProcessingLauncher):
    """Lightning's spawn launcher, also returning the module's run record and callback state."""

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Make the module picklable, then spawn the ranks as Lightning does."""
        trainer = kwargs.get("trainer")
        if trainer is not None and trainer.lightning_module is not None:
            drop_output_capturing_hooks(trainer.lightning_module)
        return super().launch(function, *args, **kwargs)

    def get_extra_results(self, trainer: Trainer) -> dict[str, Any]:
        """Add the run record and callback states to what rank 0 sends back.

        They travel in a temp file, only its path through the queue: Lightning joins the
        ranks before it reads the queue, so rank 0 would block forever putting more than
        a pipe buffer (64 KiB) into it, and a CoNLL run record (every dev and test
        sentence's predicted tags) is megabytes.
        """
        extra = super().get_extra_results(trainer)
        module: Any = trainer.lightning_module
        callbacks: list[Any] = trainer.callbacks  # type: ignore[attr-defined]
        payload = {
            _RECORD: module.run_record() if hasattr(module, "run_record") else None,
            _CALLBACKS: {cb.state_key: s for cb in callbacks if (s := cb.state_dict())},
        }
        fd, path = tempfile.mkstemp(prefix="headbench-ddp-", suffix=".pkl")
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(payload, handle)
        extra[_PAYLOAD] = path
        return extra

    def update_main_process_results(self, trainer: Trainer, extra: dict[str, Any]) -> None:
        """Restore the run record and callback states in the launching process."""
        super().update_main_process_results(trainer, extra)
        path = extra.get(_PAYLOAD)
        if path is None:
            return
        try:
            with open(path, "rb") as handle:
                payload = pickle.load(handle)  # written by our own rank 0 just now
        finally:
            os.unlink(path)
        module: Any = trainer.lightning_module
        if payload[_RECORD] is not None and hasattr(module, "restore_run_record"):
            module.restore_run_record(payload[_RECORD])
        states = payload[_CALLBACKS]
        callbacks: list[Any] = trainer.callbacks  # type: ignore[attr-defined]
        for cb in callbacks:
            if cb.state_key in states:
                cb.load_state_dict(states[cb.state_key])


class SpawnDDPStrategy(DDPStrategy):
    """``ddp_spawn`` whose launcher brings the run record back (see the module docstring).

    Args:
        **kwargs: Passed to :class:`~lightning.pytorch.strategies.DDPStrategy`
            (``process_group_backend``, ``find_unused_parameters``...).
    """

    def __init__(self, **kwargs: Any) -> None:
        # The ranks are this process's children on this node: the local environment (free
        # port on localhost), never SLURM's, which would report the job's one task as the
        # world size when a cell runs in a submitit/SLURM task.
        kwargs.setdefault("cluster_environment", LightningEnvironment())
        super().__init__(start_method="spawn", **kwargs)

    def _configure_launcher(self) -> None:
        self._launcher = _RecordLauncher(self, start_method="spawn")  # __init__ sets spawn


def trainer_strategy(trainer_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Replace ``strategy: ddp_spawn`` in Trainer arguments by :class:`SpawnDDPStrategy`.

    Args:
        trainer_kwargs: The ``trainer`` config as Trainer keyword arguments; may carry
            ``process_group_backend`` (null = gloo on CPU, NCCL on GPUs).

    Returns:
        The arguments to pass to ``lightning.Trainer``.
    """
    kwargs = dict(trainer_kwargs)
    backend = kwargs.pop("process_group_backend", None)
    if kwargs.get("strategy") in SPAWN_STRATEGIES:
        kwargs["strategy"] = SpawnDDPStrategy(process_group_backend=backend)
    return kwargs
