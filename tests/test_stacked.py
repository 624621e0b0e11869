"""The stacked computation of lock-step heads against torch's own per-cell kernels.

:class:`~bench.model.stacked.StackedHeads` updates every cell of a stack at once; each
cell's numbers must stay those of ``torch.optim.AdamW``, ``clip_grad_norm_`` and the task's
loss run on that cell alone: bit for bit on CPU, with real heads and real schedules
(different learning rates and weight decay per cell, clipping that bites).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import log_softmax

from bench.data.tasks import get_task
from bench.model.heads import build_head
from bench.model.stacked import StackedHeads, optimizer_hypers
from bench.model.task_types import task_type


def _heads(n: int, name: str = "pooler", labels: int = 3) -> list:
    heads = []
    for seed in range(n):
        torch.manual_seed(seed)
        heads.append(build_head({"name": name}, hidden_size=24, num_layers=4, num_labels=labels))
    return heads


def _optimizer(head, lr: float, weight_decay: float) -> torch.optim.AdamW:
    decay = [p for n, p in head.named_parameters() if n.endswith("weight")]
    rest = [p for n, p in head.named_parameters() if not n.endswith("weight")]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr)


@pytest.mark.parametrize("clip", [[0.05] * 5, [0.05, None, 1e4, 0.05, None]])
def test_stacked_adamw_and_clipping_are_each_cells_own_bit_for_bit(clip):
    """Five cells with their own rates, decay and clipping, eight steps of a decaying
    schedule: the stack's weights and moments equal AdamW's on each cell alone."""
    n, steps = 5, 8
    alone = _heads(n)
    stacked = StackedHeads(_heads(n), torch.device("cpu"))
    rates = [1e-3, 3e-3, 1e-2, 1e-3, 3e-2]
    decays = [0.0, 0.01, 0.01, 0.1, 0.0]
    optimizers = [_optimizer(h, r, d) for h, r, d in zip(alone, rates, decays, strict=True)]
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1 - s / 10) for o in optimizers]
    names = [{id(p): k for k, p in h.named_parameters()} for h in alone]
    generator = torch.Generator().manual_seed(0)
    clipped = 0
    for _ in range(steps):
        grads = {k: torch.randn(p.shape, generator=generator) for k, p in stacked.params.items()}
        records = [optimizer_hypers(o, m) for o, m in zip(optimizers, names, strict=True)]
        for k, p in stacked.params.items():
            p.grad = grads[k].clone()
        stacked.clip_gradients(clip, [r["order"] for r in records])
        stacked.adamw_step([r["hypers"] for r in records])
        for i, head in enumerate(alone):
            for k, p in head.named_parameters():
                p.grad = grads[k][i].clone()
            if clip[i]:
                norm = torch.nn.utils.clip_grad_norm_(list(head.parameters()), clip[i])
                clipped += bool(norm > clip[i])
            optimizers[i].step()
            schedules[i].step()
    assert clipped > steps  # the clipping did scale gradients
    for i, head in enumerate(alone):
        for k, p in head.named_parameters():
            assert torch.equal(stacked.params[k][i], p.detach()), (i, k)
            state = optimizers[i].state[p]
            assert torch.equal(stacked.exp_avg[k][i], state["exp_avg"]), (i, k)
            assert torch.equal(stacked.exp_avg_sq[k][i], state["exp_avg_sq"]), (i, k)


def test_cells_with_other_betas_are_updated_run_by_run():
    """Cells whose betas differ take torch's own adamw call per run: still each its own."""
    alone = _heads(3, "linear")
    stacked = StackedHeads(_heads(3, "linear"), torch.device("cpu"))
    optimizers = [
        torch.optim.AdamW(h.parameters(), lr=1e-2, betas=(b, 0.999))
        for h, b in zip(alone, (0.9, 0.8, 0.9), strict=True)
    ]
    names = [{id(p): k for k, p in h.named_parameters()} for h in alone]
    for _ in range(3):
        grads = {k: torch.randn(p.shape) for k, p in stacked.params.items()}
        for k, p in stacked.params.items():
            p.grad = grads[k].clone()
        stacked.adamw_step(
            [optimizer_hypers(o, m)["hypers"] for o, m in zip(optimizers, names, strict=True)]
        )
        for i, head in enumerate(alone):
            for k, p in head.named_parameters():
                p.grad = grads[k][i].clone()
            optimizers[i].step()
    for i, head in enumerate(alone):
        for k, p in head.named_parameters():
            assert torch.equal(stacked.params[k][i], p.detach()), (i, k)


@pytest.mark.parametrize("task", ["sst2", "mnli", "stsb"])
@pytest.mark.parametrize("batch", [1, 6, 32, 45])
def test_stacked_loss_gives_each_cells_gradient_bit_for_bit(task, batch):
    """One flat loss for N heads: each row's gradient is the cell's own loss's gradient,
    and the values agree with each cell's to float32 rounding."""
    kind = task_type(get_task(task))
    classes = 1 if kind.spec.is_regression else kind.spec.num_labels
    generator = torch.Generator().manual_seed(batch)
    logits = (torch.randn(7, batch, classes, generator=generator) * 3).requires_grad_()
    if kind.spec.is_regression:
        labels = torch.rand(batch, generator=generator) * 5
    else:
        labels = torch.randint(0, classes, (batch,), generator=generator)
    each = torch.stack([kind.loss(None, logits[i], {"labels": labels}) for i in range(7)])
    (expected,) = torch.autograd.grad(each.sum(), logits)
    values = kind.stacked_loss(logits, {"labels": labels})
    (got,) = torch.autograd.grad(values.sum(), logits)
    assert torch.equal(got, expected)
    torch.testing.assert_close(values, each.detach(), rtol=1e-6, atol=0)
    # the reference values, by an independent implementation (SciPy, float64)
    x, y = logits.detach().double().numpy(), labels.numpy()
    if kind.spec.is_regression:
        reference = ((x[..., 0] - y) ** 2).mean(axis=1)
    else:
        reference = -np.take_along_axis(log_softmax(x, axis=-1), y[None, :, None], -1).mean(
            axis=(1, 2)
        )
    np.testing.assert_allclose(values.detach().double().numpy(), reference, rtol=1e-6, atol=1e-6)
