"""HeadbenchModule's optimizer step: gradients freed after it; fused AdamW clipped in bf16."""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch

from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.model.encoders import load_tokenizer
from bench.model.module import HeadbenchModule
from conftest import ENCODERS

TINY = ENCODERS["tiny_bert"]
OPTIM = {
    "encoder_lr": 1e-3,
    "head_lr": 1e-2,
    "frozen_head_lr": 2e-2,
    "weight_decay": 0.01,
    "warmup_ratio": 0.1,
}


class _LightningDefaultStep(HeadbenchModule):
    """Lightning's own ``optimizer_step``: gradients live until the next step's forward."""

    optimizer_step = L.LightningModule.optimizer_step  # type: ignore[assignment]


class _Grads(L.Callback):
    """Whether any trainable parameter holds a gradient at the end of each batch."""

    def __init__(self) -> None:
        self.held: list[bool] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.held.append(any(p.grad is not None for p in pl_module.parameters()))


def _train(
    cls: type[HeadbenchModule],
    data_dir,
    head: dict,
    optim: dict,
    train_size: int,
    callbacks: Sequence[L.Callback] = (),
    **trainer_kwargs,
) -> tuple[HeadbenchModule, L.Trainer]:
    """A tiny full fine-tuning cell on real SST-2 with a real Trainer (seed 3)."""
    L.seed_everything(3, workers=True, verbose=False)
    module = cls(encoder=TINY, head=head, freeze={"name": "full"}, task="sst2", optim=optim)
    data = GlueDataModule(
        get_task("sst2"),
        load_tokenizer(TINY),
        data_dir=data_dir,
        train_size=train_size,
        data_seed=0,
        max_length=32,
        batch_size=8,
        eval_batch_size=64,
    )
    trainer = L.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        enable_model_summary=False,
        limit_val_batches=1,
        **trainer_kwargs,
    )
    trainer.fit(module, datamodule=data)
    return module, trainer


def _fit(cls: type[HeadbenchModule], data_dir, accumulate: int) -> tuple[HeadbenchModule, _Grads]:
    grads = _Grads()
    module, _ = _train(
        cls,
        data_dir,
        {"name": "pooler", "init": "random"},
        OPTIM,
        64,
        [grads],
        max_epochs=2,
        gradient_clip_val=1.0,
        accumulate_grad_batches=accumulate,
    )
    return module, grads


def test_gradients_are_freed_after_each_step_and_training_is_bit_identical(data_dir):
    for accumulate in (1, 2):
        ours, grads = _fit(HeadbenchModule, data_dir, accumulate)
        # 8 batches per epoch: gradients survive only the accumulating batches of a window
        assert grads.held == [(i + 1) % accumulate != 0 for i in range(16)]
        default, default_grads = _fit(_LightningDefaultStep, data_dir, accumulate)
        assert all(default_grads.held)  # Lightning alone keeps them into the next step
        theirs = dict(default.named_parameters())
        for name, param in ours.named_parameters():
            assert torch.equal(param, theirs[name]), name
        assert ours.history == default.history


def test_a_fused_request_is_fused_unless_a_scaler_scales_the_gradients():
    """Under 16-mixed a fused step unscales after clipping (foreach there); bf16 has no scaler."""
    module = HeadbenchModule(
        encoder=TINY,
        head={"name": "linear"},
        freeze={"name": "full"},
        task="sst2",
        optim={**OPTIM, "fused": True},
    )
    kinds = {}
    for precision in ("32-true", "bf16-mixed", "16-mixed"):
        optimizer, _ = module.build_optimizer(10, 5, precision)
        kinds[precision] = (optimizer.defaults["fused"], optimizer.defaults["foreach"])
    assert kinds == {"32-true": (True, None), "bf16-mixed": (True, None), "16-mixed": (None, True)}
    plain = HeadbenchModule(
        encoder=TINY, head={"name": "linear"}, freeze={"name": "full"}, task="sst2", optim=OPTIM
    )
    for precision in ("32-true", "bf16-mixed"):  # nothing requested: torch's default, as before
        optimizer, _ = plain.build_optimizer(10, 5, precision)
        assert (optimizer.defaults["fused"], optimizer.defaults["foreach"]) == (None, None)


class _ForeachUnderMixed(HeadbenchModule):
    """``optim.fused=true`` as it was under bf16-mixed before: the foreach update."""

    def build_optimizer(self, total, per_epoch, precision="32-true"):
        return super().build_optimizer(total, per_epoch, "16-mixed")


def test_a_fused_adamw_under_bf16_mixed_clips_as_the_foreach_one_does(data_dir):
    """Lightning would refuse to clip here; the module clips, with the same effect."""
    runs = {}
    for name, cls, clip in (
        ("fused", HeadbenchModule, 0.05),
        ("foreach", _ForeachUnderMixed, 0.05),
        ("unclipped", HeadbenchModule, None),
    ):
        module, trainer = _train(
            cls,
            data_dir,
            {"name": "linear"},
            {**OPTIM, "fused": True},
            32,
            max_epochs=1,
            precision="bf16-mixed",
            accelerator="cpu",
            gradient_clip_val=clip,
        )
        assert bool(trainer.optimizers[0].defaults["fused"]) is (name != "foreach"), name
        runs[name] = {n: p.detach().clone() for n, p in module.named_parameters()}
    moved = 0
    for n, fused in runs["fused"].items():
        torch.testing.assert_close(fused, runs["foreach"][n], rtol=1e-4, atol=1e-6, msg=n)
        moved += not torch.allclose(fused, runs["unclipped"][n], rtol=1e-4, atol=1e-6)
    assert moved > 0  # clipping at 0.05 did change the update
