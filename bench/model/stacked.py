"""Same-shape heads as one batched computation (lock-step training of frozen heads).

N cells of a lock-step group (:mod:`bench.run.lockstep`) whose heads have the same type
and shapes read the same features of the same batch. :class:`StackedHeads` stacks their
classifier parameters along a new first dimension, so one ``baddbmm`` computes every
cell's logits, one backward every cell's gradients, one clipping every cell's gradient
norm and :meth:`StackedHeads.adamw_step` updates them all at once (the operations
``torch.optim.AdamW`` runs), each cell with its own learning rate and weight decay: the
operations a step launches do not grow with the number of cells, but for dropout.

What keeps each cell's numbers its own:

- **Dropout**: each cell's masks are drawn by ``F.dropout`` (``nn.Dropout``'s kernel) with
  the cell's own random state swapped into torch's global generator (:class:`CellRng`),
  so they are the masks it draws alone.
- **Gradient clipping** per cell: the total norm of the cell's gradients, in its
  optimizer's parameter order (what ``clip_grad_norm_`` computes, from per-row norms),
  then the cell's coefficient.
- **AdamW** per cell: moments per row, each row's scalars (``1 - lr * weight_decay``,
  ``-lr / bias_correction1``) as a column.

On CPU the batched matrix products give the single cell's values bit for bit (tested).
With one output (regression) ``baddbmm`` rounds differently from the single cell's
``addmm`` in the last bits, so the output layer runs per cell there (``F.linear``: the
single cell's kernel), the rest still batched.

Only heads whose trainable parameters are all in the classifier and whose features are
parameter-free can be stacked (:func:`stack_key`): ``linear``, ``pooler``,
``mean_linear``, ``last4_concat`` and their variants, not the BiLSTM or a scalar mix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.optim.adamw import adamw

from bench.model.heads.base import SequenceHead


@dataclass(frozen=True)
class AdamHyper:
    """One parameter's AdamW hyperparameters at one step (its group's values).

    Attributes:
        lr: The learning rate after the schedule.
        weight_decay: Decoupled weight decay.
        beta1: First-moment decay.
        beta2: Second-moment decay.
        eps: Denominator epsilon.
        fused: Whether the cell uses the fused kernel (``optim.fused``).
    """

    lr: float
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    fused: bool


def optimizer_hypers(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, Any]:
    """Each parameter's current hyperparameters in an optimizer, by parameter name.

    Args:
        optimizer: A cell's ``torch.optim.AdamW`` (its scheduler sets the groups' rates).
        names: ``id(parameter) -> name``.

    Returns:
        ``{"order": [names in the optimizer's order], "hypers": {name: AdamHyper}}``.
    """
    order: list[str] = []
    hypers: dict[str, AdamHyper] = {}
    for group in optimizer.param_groups:
        beta1, beta2 = group["betas"]
        hyper = AdamHyper(
            float(group["lr"]),
            float(group["weight_decay"]),
            float(beta1),
            float(beta2),
            float(group["eps"]),
            bool(group.get("fused")),
        )
        for param in group["params"]:
            order.append(names[id(param)])
            hypers[names[id(param)]] = hyper
    return {"order": order, "hypers": hypers}


def stack_key(head: nn.Module) -> str | None:
    """What must be equal for heads to be stacked, or None when a head cannot be.

    Args:
        head: A sequence head.

    Returns:
        A key (type, feature reading, classifier shapes and dropout), or None for heads
        with a BiLSTM, a parameterised layer mix, or trainable parameters outside the
        classifier.
    """
    if not isinstance(head, SequenceHead) or head.lstm is not None:
        return None
    if any(True for _ in head.select.parameters()):
        return None  # scalar_mix: weights outside the classifier
    classifier = head.classifier
    if {n for n, _ in head.named_parameters()} != {
        f"classifier.{n}" for n, _ in classifier.named_parameters()
    }:
        return None
    shapes = {n: list(p.shape) for n, p in head.named_parameters()}
    return json.dumps(
        {
            "type": type(head).__name__,
            "layers": list(head.select.layers),
            "combine": head.select.combine,
            "pool": head.pool,
            "summary": head.summary,
            "activation": type(classifier.activation).__name__,
            "dropout": classifier.dropout.p,
            "shapes": shapes,
        },
        sort_keys=True,
    )


def _to_device(values: list[Any], like: Tensor) -> Tensor:
    """Python floats as a tensor of ``like``'s dtype on its device, without waiting for it.

    A copy from pageable host memory makes the host wait for the GPU's queue; from pinned
    memory with ``non_blocking`` it is queued like a kernel (the caching host allocator
    keeps the buffer until the copy has run).
    """
    host = torch.tensor(values, dtype=like.dtype)
    if like.device.type != "cuda":
        return host
    return host.pin_memory().to(like.device, non_blocking=True)


class CellRng:
    """A cell's own random state: what torch's global generators would hold in its single run.

    Captured when the cell's module is built (after ``seed_everything``), it is swapped in
    around the cell's random draws (:meth:`active`), so its dropout masks are drawn by
    torch's own kernels from the state they would have had. :meth:`skip` advances the CPU
    state as the single run's data loaders do (one draw each time one is iterated).
    """

    def __init__(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() else None

    @contextmanager
    def active(self, device: torch.device) -> Iterator[None]:
        """Swap this cell's state into the global generator of ``device`` for a while."""
        if device.type == "cuda":
            saved = torch.cuda.get_rng_state(device)
            assert self.cuda is not None
            torch.cuda.set_rng_state(self.cuda, device)
            try:
                yield
            finally:
                self.cuda = torch.cuda.get_rng_state(device)
                torch.cuda.set_rng_state(saved, device)
            return
        saved = torch.get_rng_state()
        torch.set_rng_state(self.cpu)
        try:
            yield
        finally:
            self.cpu = torch.get_rng_state()
            torch.set_rng_state(saved)

    def skip(self, draws: int) -> None:
        """Advance the CPU state by what iterating ``draws`` data loaders takes from it."""
        with self.active(torch.device("cpu")):
            for _ in range(draws):  # DataLoader's base seed, drawn when iteration starts
                torch.empty((), dtype=torch.int64).random_()


class StackedHeads:
    """N same-shape heads (:func:`stack_key`) as stacked parameters with AdamW state.

    Args:
        heads: The cells' heads; their current weights are copied (they stay untouched).
        device: Where the stacked tensors live.
    """

    def __init__(self, heads: Sequence[SequenceHead], device: torch.device) -> None:
        keys = {stack_key(h) for h in heads}
        if len(keys) != 1 or None in keys:
            raise ValueError("StackedHeads needs heads of one stack_key")
        self.template = heads[0]  # reads the features (parameter-free) for all
        classifier = heads[0].classifier
        self.p = float(classifier.dropout.p)
        self.activation = classifier.activation
        self.dense = classifier.dense is not None
        self.names = [n for n, _ in heads[0].named_parameters()]
        self.params: dict[str, Tensor] = {}
        for name in self.names:
            rows = [dict(h.named_parameters())[name].detach() for h in heads]
            self.params[name] = torch.stack(rows).to(device).requires_grad_()
        self.exp_avg = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.steps = 0

    def __len__(self) -> int:
        return len(self.params[self.names[0]])

    def _dropout(self, x: Tensor, rngs: Sequence[CellRng]) -> Tensor:
        """Each cell's dropout of its input (B, D) or its row of (N, B, D): (N, B, D)."""
        rows = []
        for i, rng in enumerate(rngs):
            with rng.active(x.device):  # nn.Dropout's own kernel, on the cell's generator
                rows.append(F.dropout(x if x.dim() == 2 else x[i], self.p, training=True))
        return torch.stack(rows)

    def forward(
        self,
        hidden_states: Sequence[Tensor | None],
        attention_mask: Tensor,
        rngs: Sequence[CellRng] | None = None,
    ) -> Tensor:
        """Every cell's logits (N, B, C); dropout (training) when ``rngs`` are given.

        Args:
            hidden_states: The batch's hidden states, indexed like the encoder's output.
            attention_mask: (B, T).
            rngs: One per cell (training), or None (evaluation: no dropout).
        """
        n = len(self)
        x = self.template.features(hidden_states, attention_mask)  # type: ignore[arg-type]  # (B, D)
        if self.dense:
            weight = self.params["classifier.dense.weight"]  # (N, H, D)
            bias = self.params["classifier.dense.bias"]  # (N, H)
            x = torch.baddbmm(bias.unsqueeze(1), x.expand(n, *x.shape), weight.transpose(1, 2))
            assert self.activation is not None
            x = self.activation(x)  # (N, B, H)
        if rngs is not None:
            x = self._dropout(x, rngs)
        elif x.dim() == 2:
            x = x.expand(n, *x.shape)
        weight = self.params["classifier.out.weight"]  # (N, C, D)
        bias = self.params["classifier.out.bias"]  # (N, C)
        if weight.shape[1] == 1:  # one output: baddbmm and addmm round differently here
            return torch.stack([F.linear(x[i], weight[i], bias[i]) for i in range(n)])
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))  # (N, B, C)

    @torch.no_grad()
    def clip_gradients(
        self, max_norms: Sequence[float | None], orders: Sequence[list[str]]
    ) -> None:
        """Scale each cell's gradients as ``clip_grad_norm_`` would over its parameters.

        When every cell lists its parameters in the same order (one stack: always, unless
        a cell's optimizer groups them otherwise), every cell's norm is computed at once:
        each parameter's row norms, then each row's norm over them, the values
        ``get_total_norm`` gives each cell alone (bit for bit on CPU, tested).

        Args:
            max_norms: Each cell's ``trainer.gradient_clip_val`` (None or 0: no clipping).
            orders: Each cell's parameter names in its optimizer's order.
        """
        if not any(max_norms):
            return
        grads = {n: p.grad for n, p in self.params.items() if p.grad is not None}
        if all(order == orders[0] for order in orders):
            norms = [torch.linalg.vector_norm(grads[n].flatten(1), 2.0, dim=1) for n in orders[0]]
            total = torch.linalg.vector_norm(torch.stack(norms, dim=1), 2.0, dim=1)
            # an unclipped cell's limit is infinite: its coefficient clamps to exactly 1
            limits = _to_device([float(m) if m else math.inf for m in max_norms], total)
            # max_norm / (total + 1e-6) as clip_grad_norm_ computes it (Tensor.__rtruediv__)
            coef = torch.clamp((total + 1e-6).reciprocal() * limits, max=1.0)
        else:
            coefs = []
            for i, (max_norm, order) in enumerate(zip(max_norms, orders, strict=True)):
                if not max_norm:
                    coefs.append(torch.ones((), device=self.params[order[0]].device))
                    continue
                total = torch.nn.utils.get_total_norm([grads[n][i] for n in order], 2.0)
                coefs.append(torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
            coef = torch.stack(coefs)
        for grad in grads.values():
            grad.mul_(coef.view(-1, *([1] * (grad.dim() - 1))))

    @torch.no_grad()
    def adamw_step(self, hypers: Sequence[dict[str, AdamHyper]]) -> None:
        """One AdamW step of every cell, then the gradients are freed.

        A parameter whose cells share betas and epsilon and none of which uses the fused
        kernel is updated for all cells at once (:meth:`_adamw_rows`); otherwise each run
        of cells with equal hyperparameters by one ``torch.optim.adamw.adamw`` call.

        Args:
            hypers: Per cell, each parameter's hyperparameters at this step.
        """
        self.steps += 1
        for name, param in self.params.items():
            grad = param.grad
            if grad is None:
                continue
            rows = [h[name] for h in hypers]
            first = rows[0]
            if not any(h.fused for h in rows) and all(
                (h.beta1, h.beta2, h.eps) == (first.beta1, first.beta2, first.eps) for h in rows
            ):
                self._adamw_rows(name, rows)
            else:
                self._adamw_runs(name, rows)
            param.grad = None

    def _adamw_rows(self, name: str, rows: Sequence[AdamHyper]) -> None:
        """Every cell's AdamW step of one parameter at once, each with its own rate and decay.

        The operations of ``torch.optim.adam._single_tensor_adam`` (the path
        ``torch.optim.AdamW`` takes on a CPU), on the stacked tensors, with each cell's
        scalars (``1 - lr * weight_decay`` and ``-lr / bias_correction1``, computed in
        Python floats and rounded to the parameter's dtype as the kernels round a scalar)
        as a column: the single cell's values bit for bit on CPU (tested). On a GPU the
        single run takes the ``foreach`` path, which rounds its last step otherwise.
        """
        param, grad = self.params[name], self.params[name].grad
        assert grad is not None
        exp_avg, exp_avg_sq = self.exp_avg[name], self.exp_avg_sq[name]
        first = rows[0]
        step = float(self.steps)
        bias_correction1 = 1 - first.beta1**step
        bias_correction2_sqrt = (1 - first.beta2**step) ** 0.5
        scalars = _to_device(
            [[1 - h.lr * h.weight_decay for h in rows], [-(h.lr / bias_correction1) for h in rows]],
            param,
        )
        decay, step_size = scalars.view(2, len(rows), *([1] * (param.dim() - 1))).unbind(0)
        param.mul_(decay)  # decoupled weight decay (a factor of exactly 1 without)
        exp_avg.lerp_(grad, 1 - first.beta1)
        exp_avg_sq.mul_(first.beta2).addcmul_(grad, grad, value=1 - first.beta2)
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(first.eps)
        param.add_(exp_avg.mul(step_size).div_(denom))  # addcdiv_'s order: value * a / b

    def _adamw_runs(self, name: str, rows: Sequence[AdamHyper]) -> None:
        """One parameter's AdamW step by ``torch.optim.adamw.adamw``, a call per run of cells."""
        param, grad = self.params[name], self.params[name].grad
        assert grad is not None
        start = 0
        while start < len(self):  # runs of cells with equal hyperparameters
            hyper = rows[start]
            end = start + 1
            while end < len(self) and rows[end] == hyper:
                end += 1
            step = torch.tensor(float(self.steps - 1), dtype=torch.float32)
            if hyper.fused:
                step = step.to(param.device)
            adamw(
                [param[start:end]],
                [grad[start:end]],
                [self.exp_avg[name][start:end]],
                [self.exp_avg_sq[name][start:end]],
                [],
                [step],
                fused=True if hyper.fused else None,
                amsgrad=False,
                beta1=hyper.beta1,
                beta2=hyper.beta2,
                lr=hyper.lr,
                weight_decay=hyper.weight_decay,
                eps=hyper.eps,
                maximize=False,
            )
            start = end

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only these cells (the others diverged or failed), optimizer state included."""
        index = torch.as_tensor(list(rows), dtype=torch.long)
        for name in self.names:
            device = self.params[name].device
            self.params[name] = self.params[name].detach()[index.to(device)].requires_grad_()
            self.exp_avg[name] = self.exp_avg[name][index.to(device)]
            self.exp_avg_sq[name] = self.exp_avg_sq[name][index.to(device)]

    def snapshot(self, row: int) -> dict[str, Tensor]:
        """CPU copies of one cell's head weights, named as in its head's ``state_dict``."""
        return {n: self.params[n][row].detach().to("cpu", copy=True) for n in self.names}

    @torch.no_grad()
    def load(self, row: int, state: dict[str, Tensor]) -> None:
        """Put weights (as :meth:`snapshot` returns them) into one cell's row."""
        for name in self.names:
            self.params[name][row].copy_(state[name])
