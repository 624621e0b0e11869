"""How an encoder adapts: one object per ``freeze`` option, static or phased.

:func:`build_adaptation` turns the ``freeze`` config group into an :class:`Adaptation`
that owns everything a strategy changes:

* which encoder parameters train now (a :class:`~bench.model.freezing.FreezeReport`, whose
  ``frozen_modules`` the training module holds in eval mode);
* the optimizer's parameter groups and the learning-rate schedule;
* the phases, for strategies whose trainable set changes during training (LP-FT,
  gradual unfreezing), driven by :class:`StageCallback`;
* the trainable-parameter history written to ``result.json``.

Strategies:

* ``frozen``, ``full``, ``top_k``, ``embeddings``, ``bitfit``: static masks
  (:func:`bench.model.freezing.apply_freezing`); the first four behave exactly as before.
* ``reinit_top``: the top ``k`` layers re-initialised with the model's own
  ``_init_weights`` (Zhang et al. 2021), then full fine-tuning.
* ``llrd``: full fine-tuning with layer-wise learning-rate decay (Sun et al. 2019).
* ``lora``: low-rank adapters (``peft``) on the attention projections, encoder frozen.
* ``lpft``: linear probe, then full fine-tuning (Kumar et al. 2022).
* ``gradual``: gradual unfreezing from the top (Howard & Ruder 2018; Peters et al. 2019).

Phased strategies put *every* encoder parameter in the optimizer from the start and
toggle ``requires_grad``. A frozen parameter never has a gradient (Lightning zeroes with
``set_to_none``), and AdamW skips parameters without one entirely: no moment update, no
weight decay, so frozen weights stay bit-identical. Its Adam state is created at its
first gradient, so a newly unfrozen layer starts with fresh moments and its own bias
correction. The schedule is one ``LambdaLR`` with a multiplier per group, so no group
ever escapes the schedule (groups added mid-run would).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from torch import nn
from transformers import get_linear_schedule_with_warmup
from transformers.pytorch_utils import Conv1D

from bench.axes.freezing import STRATEGIES, check_k, validate
from bench.errors import ConfigError
from bench.model.encoders import embedding_module, transformer_layers
from bench.model.freezing import FreezeReport, apply_freezing

LrLambda = Callable[[int], float]

# LoRA target modules per `config.model_type` when `freeze.target_modules` is null: the
# attention's query and value projections (Hu et al. 2022).
LORA_TARGETS: dict[str, list[str]] = {
    "bert": ["query", "value"],
    "roberta": ["query", "value"],
    "xlm-roberta": ["query", "value"],
    "camembert": ["query", "value"],
    "electra": ["query", "value"],
    "deberta-v2": ["query_proj", "value_proj"],
    "deberta": ["in_proj"],
    "distilbert": ["q_lin", "v_lin"],
    "mpnet": ["q", "v"],
    # Decoders (bench/model/encoders.py: their heads read the last token). GPT-2's fused
    # query-key-value projection is a transformers Conv1D (weights stored transposed).
    "gpt2": ["c_attn"],
    "qwen2": ["q_proj", "v_proj"],
    "qwen3": ["q_proj", "v_proj"],
    "llama": ["q_proj", "v_proj"],
    "mistral": ["q_proj", "v_proj"],
}


def linear_warmup_decay(warmup: int, total: int) -> LrLambda:
    """The multiplier of ``transformers.get_linear_schedule_with_warmup`` as a function.

    Args:
        warmup: Warm-up steps (multiplier rises linearly from 0 to 1).
        total: Steps until the multiplier reaches 0.

    Returns:
        ``step -> multiplier``.
    """

    def multiplier(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return multiplier


def split_decay(
    part: str, params: Sequence[nn.Parameter], lr: float, weight_decay: float
) -> list[dict[str, Any]]:
    """AdamW groups for one part: matrices decay, biases and norm weights do not.

    Args:
        part: Group name prefix (``encoder``, ``head``, ``encoder/layer3``).
        params: The part's parameters.
        lr: Its learning rate.
        weight_decay: Weight decay of the ``decay`` group.

    Returns:
        Up to two groups named ``<part>/decay`` and ``<part>/no_decay`` (empty ones omitted).
    """
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [
        {"params": group, "lr": lr, "weight_decay": wd, "name": f"{part}/{suffix}"}
        for suffix, group, wd in (("decay", decay, weight_decay), ("no_decay", no_decay, 0.0))
        if group
    ]


@dataclass
class Unit:
    """A block of encoder parameters that is frozen or unfrozen (or re-scaled) as one.

    Attributes:
        label: ``embeddings``, ``layer1`` ... ``layerL`` (1 = bottom), or ``encoder``.
        modules: The modules to hold in eval mode while the unit is frozen.
        params: The unit's parameters.
    """

    label: str
    modules: list[nn.Module]
    params: list[nn.Parameter] = field(repr=False)


def encoder_units(encoder: nn.Module) -> list[Unit]:
    """The encoder as ``embeddings``, ``layer1`` ... ``layerL``, bottom first.

    Encoder parameters in neither the embedding block nor a layer (DeBERTa's relative
    embeddings and their norm) join ``embeddings``: they feed every layer.
    """
    emb = embedding_module(encoder)
    layers = list(transformer_layers(encoder))
    units = [
        Unit(f"layer{i}", [layer], list(layer.parameters())) for i, layer in enumerate(layers, 1)
    ]
    in_layers = {id(p) for u in units for p in u.params}
    rest = [p for p in encoder.parameters() if id(p) not in in_layers]
    return [Unit("embeddings", [emb], rest), *units]


def _count(params: Sequence[nn.Parameter] | Any, trainable_only: bool = True) -> int:
    return sum(p.numel() for p in params if p.requires_grad or not trainable_only)


class Adaptation:
    """A static strategy: a fixed trainable set, one encoder learning rate.

    Subclasses override the parameter groups, the schedule or the phases.

    Args:
        encoder: The Hugging Face encoder (all parameters trainable on entry).
        cfg: The ``freeze`` config group as a plain dict.
    """

    def __init__(self, encoder: nn.Module, cfg: dict[str, Any]) -> None:
        self.name = str(cfg["name"])
        self.cfg = cfg
        self.encoder = encoder
        self.record: dict[str, Any] = {"strategy": self.name}
        self.trainable_history: list[dict[str, Any]] = []
        self.boundaries: list[int] = []  # step at which stage s + 1 begins (phased only)
        self.stage = 0
        self.report = self._freeze()

    def _freeze(self) -> FreezeReport:
        return apply_freezing(self.encoder, self.name, self.cfg.get("k"))

    # --- learning rates -----------------------------------------------------------------
    def encoder_lr(self, optim: dict[str, Any]) -> float:
        """``freeze.lr`` when the strategy sets one (LoRA, BitFit), else ``optim.encoder_lr``."""
        lr = self.cfg.get("lr")
        return float(optim["encoder_lr"] if lr is None else lr)

    def head_lr(self, optim: dict[str, Any]) -> float:
        """``optim.frozen_head_lr`` on a frozen encoder, else ``optim.head_lr``."""
        if self.report.encoder_trainable == 0:
            return float(optim.get("frozen_head_lr", optim["head_lr"]))
        return float(optim["head_lr"])

    def learning_rates(self, optim: dict[str, Any]) -> dict[str, Any]:
        """The learning rates to record in the result."""
        return {"encoder": self.encoder_lr(optim), "head": self.head_lr(optim)}

    # --- optimizer ----------------------------------------------------------------------
    def encoder_groups(self, optim: dict[str, Any]) -> list[dict[str, Any]]:
        """AdamW groups of the encoder (trainable parameters only)."""
        params = [p for p in self.encoder.parameters() if p.requires_grad]
        return split_decay("encoder", params, self.encoder_lr(optim), optim["weight_decay"])

    def param_groups(self, head: nn.Module, optim: dict[str, Any]) -> list[dict[str, Any]]:
        """Encoder groups then head groups, each split decay / no-decay."""
        head_params = [p for p in head.parameters() if p.requires_grad]
        return [
            *self.encoder_groups(optim),
            *split_decay("head", head_params, self.head_lr(optim), optim["weight_decay"]),
        ]

    def scheduler(
        self, optimizer: torch.optim.Optimizer, optim: dict[str, Any], total: int, per_epoch: int
    ) -> torch.optim.lr_scheduler.LRScheduler:
        """Linear warm-up (``optim.warmup_ratio`` of all steps) then linear decay to zero."""
        warmup = math.ceil(optim.get("warmup_ratio", 0.0) * total)
        return get_linear_schedule_with_warmup(optimizer, warmup, total)

    # --- phases -------------------------------------------------------------------------
    def stage_at(self, step: int) -> int:
        """The stage a step belongs to: how many boundaries it has reached."""
        return sum(step >= b for b in self.boundaries)

    def set_stage(self, stage: int) -> None:
        """Move to a stage (static strategies have only stage 0)."""
        self.stage = stage


class ReinitTop(Adaptation):
    """``reinit_top``: re-initialise the top ``k`` layers, then fine-tune everything.

    Zhang et al. (2021) re-initialise with the model's own initialiser; so do we, through
    ``PreTrainedModel._init_weights`` (the pretrained weights' ``_is_hf_initialized``
    flags are cleared first, else transformers 5 skips them). Seeded by the cell's seed.
    """

    def _freeze(self) -> FreezeReport:
        layers = list(transformer_layers(self.encoder))
        k = check_k(self.name, self.cfg.get("k"), len(layers))
        init = getattr(self.encoder, "_init_weights", None)
        if init is None:
            raise ConfigError(
                f"freeze=reinit_top needs a Hugging Face model with _init_weights; "
                f"{type(self.encoder).__name__} has none"
            )
        top = layers[len(layers) - k :]
        with torch.no_grad():
            for layer in top:
                for module in layer.modules():
                    tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
                    for obj in (module, *tensors):
                        if getattr(obj, "_is_hf_initialized", False):
                            setattr(obj, "_is_hf_initialized", False)  # noqa: B010
                    init(module)
        self.record["reinit_layers"] = list(range(len(layers) - k + 1, len(layers) + 1))
        report = apply_freezing(self.encoder, "full")
        report.strategy, report.k = self.name, k
        return report


class LayerwiseLrDecay(Adaptation):
    """``llrd``: full fine-tuning, learning rate decaying from the top layer down.

    With L layers and base rate ``encoder_lr``: layer l (1 = bottom) gets
    ``base * factor ** (L - l)``, so the top layer trains at the base rate; the
    embeddings (and any encoder-level extras) get ``base * factor ** L``; the head stays
    at ``optim.head_lr``. Sun et al. (2019) use factor 0.95.
    """

    def _freeze(self) -> FreezeReport:
        factor = self.cfg.get("factor")
        if not isinstance(factor, (int, float)) or not 0 < factor <= 1:
            raise ConfigError(f"freeze.factor={factor!r} for llrd; valid values: 0 < factor <= 1")
        report = apply_freezing(self.encoder, "full")
        report.strategy = self.name
        return report

    def unit_rates(self, optim: dict[str, Any]) -> list[tuple[Unit, float]]:
        """Every unit (embeddings, layer1 ... layerL) with its learning rate."""
        units = encoder_units(self.encoder)
        depth = len(units) - 1
        base, factor = self.encoder_lr(optim), float(self.cfg["factor"])
        return [(u, base * factor ** (depth - i)) for i, u in enumerate(units)]

    def encoder_groups(self, optim: dict[str, Any]) -> list[dict[str, Any]]:
        """One decay / no-decay pair per unit, ``encoder/<unit>/decay``..."""
        groups = []
        for unit, lr in self.unit_rates(optim):
            groups += split_decay(f"encoder/{unit.label}", unit.params, lr, optim["weight_decay"])
        return groups

    def learning_rates(self, optim: dict[str, Any]) -> dict[str, Any]:
        """Top-layer (base) and head rates, the factor, and every unit's rate."""
        return {
            **super().learning_rates(optim),
            "factor": float(self.cfg["factor"]),
            "per_unit": {u.label: lr for u, lr in self.unit_rates(optim)},
        }


class Lora(Adaptation):
    """``lora``: low-rank adapters on the attention projections; the encoder is frozen.

    Uses ``peft`` (``pip install 'headbench[lora]'``). ``self.encoder`` becomes a
    ``PeftModel`` whose forward is the base model's; ``merge_and_unload()`` folds the
    adapters back into plain weights. The adapters train at ``freeze.lr`` (LoRA needs a
    larger rate than full fine-tuning: Hu et al. 2022 use 4e-4 to 5e-4 on GLUE).
    """

    def _freeze(self) -> FreezeReport:
        try:
            from peft import LoraConfig, get_peft_model  # the optional extra `lora`
        except ImportError:
            raise ConfigError(
                "freeze=lora needs the optional extra: pip install 'headbench[lora]' (peft)"
            ) from None
        model_type = getattr(self.encoder.config, "model_type", "?")
        kinds = {
            n.rsplit(".", 1)[-1]: type(m)
            for n, m in self.encoder.named_modules()
            if isinstance(m, nn.Linear | Conv1D)
        }
        linear = sorted(kinds)
        targets = self.cfg.get("target_modules") or LORA_TARGETS.get(model_type)
        if not targets:
            raise ConfigError(
                f"freeze.target_modules is not set and there is no default for model type "
                f"{model_type!r}; valid module names: {', '.join(linear)}"
            )
        targets = [targets] if isinstance(targets, str) else list(targets)
        unknown = [t for t in targets if t not in linear]
        if unknown:
            raise ConfigError(
                f"freeze.target_modules: unknown module(s) {', '.join(map(repr, unknown))} "
                f"for model type {model_type!r}; valid module names: {', '.join(linear)}"
            )
        rank, alpha = int(self.cfg.get("rank", 8)), float(self.cfg.get("alpha", 16))
        dropout = float(self.cfg.get("dropout", 0.0))
        config = LoraConfig(  # lora_alpha is annotated int; peft uses it as a float scale
            r=rank,
            lora_alpha=alpha,  # type: ignore[arg-type]
            lora_dropout=dropout,
            target_modules=targets,
            bias="none",
            # GPT-2's Conv1D stores (in, out) weights: peft must transpose its update
            fan_in_fan_out=any(kinds[t] is Conv1D for t in targets),
        )
        emb = embedding_module(self.encoder)
        self.encoder = get_peft_model(self.encoder, config)  # freezes all but the adapters
        adapter = [n for n, p in self.encoder.named_parameters() if p.requires_grad]
        if not adapter or any("lora_" not in n for n in adapter):
            raise ConfigError(f"LoRA left unexpected trainable parameters: {adapter[:5]}")
        trainable = _count(self.encoder.parameters())
        self.record.update(
            rank=rank,
            alpha=alpha,
            dropout=dropout,
            target_modules=targets,
            adapter_params=trainable,
        )
        return FreezeReport(
            strategy=self.name,
            k=None,
            encoder_trainable=trainable,
            encoder_total=_count(self.encoder.parameters(), trainable_only=False),
            frozen_modules=[emb],  # no adapter there; the layers run in train mode (dropout)
        )


class Phased(Adaptation):
    """A strategy whose trainable set grows in stages: stage s unfreezes the top s units.

    Stage 0 trains the head alone (the encoder frozen, in eval mode, no encoder
    gradients computed). ``boundaries`` (set by :meth:`scheduler`, when the number of
    steps is known) are the steps at which each later stage begins.
    """

    def __init__(self, encoder: nn.Module, cfg: dict[str, Any]) -> None:
        self.units_top_first = self._units(encoder)
        super().__init__(encoder, cfg)

    def _units(self, encoder: nn.Module) -> list[Unit]:
        raise NotImplementedError

    def _freeze(self) -> FreezeReport:
        return self._report(0)

    def _report(self, stage: int) -> FreezeReport:
        for param in self.encoder.parameters():
            param.requires_grad_(False)
        for unit in self.units_top_first[:stage]:
            for param in unit.params:
                param.requires_grad_(True)
        if stage == 0:
            frozen = [self.encoder]
        else:
            frozen = [m for u in self.units_top_first[stage:] for m in u.modules]
        for module in frozen:
            module.eval()
        return FreezeReport(
            strategy=self.name,
            k=None,
            encoder_trainable=_count(self.encoder.parameters()),
            encoder_total=_count(self.encoder.parameters(), trainable_only=False),
            frozen_modules=frozen,
        )

    def set_stage(self, stage: int) -> None:
        """Unfreeze the top ``stage`` units (the module then re-applies train/eval modes)."""
        self.stage = stage
        self.report = self._report(stage)

    def unfrozen(self) -> list[str]:
        """Labels of the units that train now."""
        return [u.label for u in self.units_top_first[: self.stage]]

    def head_lr(self, optim: dict[str, Any]) -> float:
        """The head's rate once the encoder trains (``optim.head_lr``)."""
        return float(optim["head_lr"])

    def encoder_groups(self, optim: dict[str, Any]) -> list[dict[str, Any]]:
        """All encoder parameters, frozen or not: unfreezing only flips ``requires_grad``."""
        params = list(self.encoder.parameters())
        return split_decay("encoder", params, self.encoder_lr(optim), optim["weight_decay"])


class LinearProbeFineTune(Phased):
    """``lpft``: train the head on the frozen encoder, then fine-tune everything.

    Kumar et al. (2022). The probe phase (``freeze.probe_epochs`` epochs) trains the head
    at ``optim.frozen_head_lr`` under its own warm-up and linear decay. The fine-tuning
    phase restarts the schedule (warm-up ``optim.warmup_ratio`` of its steps, then decay
    to zero) with the encoder at ``optim.encoder_lr`` and the already-trained head at the
    smaller ``freeze.ft_head_lr`` (null: the encoder's rate, as Kumar et al. fine-tune
    the whole network at one small rate).
    """

    def _units(self, encoder: nn.Module) -> list[Unit]:
        return [Unit("encoder", [encoder], list(encoder.parameters()))]

    def ft_head_lr(self, optim: dict[str, Any]) -> float:
        """The head's rate in the fine-tuning phase."""
        lr = self.cfg.get("ft_head_lr")
        return self.encoder_lr(optim) if lr is None else float(lr)

    def head_lr(self, optim: dict[str, Any]) -> float:
        """The probe phase's head rate (the group's rate; the schedule rescales it later)."""
        return float(optim.get("frozen_head_lr", optim["head_lr"]))

    def learning_rates(self, optim: dict[str, Any]) -> dict[str, Any]:
        """Encoder rate, head rate in fine-tuning, head rate while probing."""
        return {
            "encoder": self.encoder_lr(optim),
            "head": self.ft_head_lr(optim),
            "head_probe": self.head_lr(optim),
        }

    def scheduler(
        self, optimizer: torch.optim.Optimizer, optim: dict[str, Any], total: int, per_epoch: int
    ) -> torch.optim.lr_scheduler.LRScheduler:
        """Two schedules back to back: probe (head only), then fine-tuning (all)."""
        epochs = self.cfg.get("probe_epochs")
        switch = epochs * per_epoch if isinstance(epochs, int) and epochs >= 1 else -1
        if not 0 < switch < total:
            raise ConfigError(
                f"freeze.probe_epochs={epochs!r} for lpft; valid values leave fine-tuning "
                f"steps: 1..{max(1, math.ceil(total / max(1, per_epoch)) - 1)} "
                f"(trainer.max_epochs minus one)"
            )
        self.boundaries = [switch]
        ratio = optim.get("warmup_ratio", 0.0)
        probe = linear_warmup_decay(math.ceil(ratio * switch), switch)
        tune = linear_warmup_decay(math.ceil(ratio * (total - switch)), total - switch)
        scale = self.ft_head_lr(optim) / self.head_lr(optim)

        def head(step: int) -> float:
            return probe(step) if step < switch else scale * tune(step - switch)

        def encoder(step: int) -> float:
            return 0.0 if step < switch else tune(step - switch)

        lambdas: list[Callable[[int], float]] = [
            head if g["name"].startswith("head") else encoder for g in optimizer.param_groups
        ]
        self.record.update(probe_steps=switch, finetune_steps=total - switch)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)


class GradualUnfreezing(Phased):
    """``gradual``: unfreeze from the top, one group of layers per interval.

    Stage 0 trains the head alone; each ``freeze.every`` steps (``interval: step``) or
    epochs (``interval: epoch``) the next ``freeze.group_size`` layers below join, top
    first, and finally the embeddings (Howard & Ruder 2018; Peters et al. 2019).
    Everything shares one warm-up/linear-decay schedule over the whole run: a layer
    joins at the schedule's current rate. The head trains at ``optim.head_lr``.
    """

    def _units(self, encoder: nn.Module) -> list[Unit]:
        size = int(self.cfg.get("group_size", 1))
        emb, *layers = encoder_units(encoder)
        top_first = layers[::-1]
        groups = []
        for i in range(0, len(top_first), size):
            chunk = top_first[i : i + size]
            modules = [m for u in chunk for m in u.modules]
            params = [p for u in chunk for p in u.params]
            groups.append(Unit("+".join(u.label for u in chunk), modules, params))
        return [*groups, emb]

    def __init__(self, encoder: nn.Module, cfg: dict[str, Any]) -> None:
        depth = len(transformer_layers(encoder))
        size = cfg.get("group_size", 1)
        if not isinstance(size, int) or not 1 <= size <= depth:
            raise ConfigError(
                f"freeze.group_size={size!r} for gradual; valid values for this encoder are "
                f"1..{depth}"
            )
        interval, every = cfg.get("interval", "epoch"), cfg.get("every", 1)
        if interval not in ("epoch", "step"):
            raise ConfigError(f"freeze.interval={interval!r} for gradual; valid: epoch, step")
        if not isinstance(every, int) or every < 1:
            raise ConfigError(f"freeze.every={every!r} for gradual; valid values: 1, 2, ...")
        self.cfg = cfg  # read by _units, before Adaptation.__init__ runs
        super().__init__(encoder, cfg)

    def scheduler(
        self, optimizer: torch.optim.Optimizer, optim: dict[str, Any], total: int, per_epoch: int
    ) -> torch.optim.lr_scheduler.LRScheduler:
        """One schedule for all; the stage boundaries every ``every`` steps or epochs."""
        every = int(self.cfg.get("every", 1))
        steps = every * per_epoch if self.cfg.get("interval", "epoch") == "epoch" else every
        self.boundaries = [steps * s for s in range(1, len(self.units_top_first) + 1)]
        self.record.update(
            stage_steps=steps,
            units=[u.label for u in self.units_top_first],
            stages_reached=self.stage_at(total - 1) + 1,
            stages=len(self.units_top_first) + 1,
        )
        return super().scheduler(optimizer, optim, total, per_epoch)


class StageCallback(L.Callback):
    """Records the trainable-parameter count and moves phased strategies between stages.

    At the start of every training batch, if the step has reached the next boundary,
    the strategy unfreezes its next units and the module re-applies train/eval modes
    (unfrozen parts train, still-frozen parts stay in eval). Each change, and the
    starting state, is appended to ``adaptation.trainable_history``.
    """

    def __init__(self, adaptation: Adaptation) -> None:
        self.adaptation = adaptation

    def _record(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        entry: dict[str, Any] = {
            "epoch": trainer.current_epoch,
            "step": trainer.global_step,
            "stage": self.adaptation.stage,
            "encoder_trainable": self.adaptation.report.encoder_trainable,
            "trainable": _count(pl_module.parameters()),
        }
        if isinstance(self.adaptation, Phased):
            entry["unfrozen"] = self.adaptation.unfrozen()
        self.adaptation.trainable_history.append(entry)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record the starting trainable set."""
        self._record(trainer, pl_module)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Advance to the stage of the current step, if it changed."""
        stage = self.adaptation.stage_at(trainer.global_step)
        if stage != self.adaptation.stage:
            self.adaptation.set_stage(stage)
            pl_module.train()  # re-applies eval mode to what is still frozen
            self._record(trainer, pl_module)


_CLASSES: dict[str, type[Adaptation]] = {
    "reinit_top": ReinitTop,
    "llrd": LayerwiseLrDecay,
    "lora": Lora,
    "lpft": LinearProbeFineTune,
    "gradual": GradualUnfreezing,
}
assert set(_CLASSES) == {name for name, s in STRATEGIES.items() if s.adaptive}


def build_adaptation(encoder: nn.Module, cfg: dict[str, Any]) -> Adaptation:
    """Apply the ``freeze`` config group to an encoder.

    Args:
        encoder: A Hugging Face encoder, all parameters trainable.
        cfg: The ``freeze`` group as a plain dict (``name`` plus the strategy's keys).

    Returns:
        The strategy; use its ``encoder`` (LoRA wraps the model) and ``report``.

    Raises:
        ConfigError: For an unknown strategy or an invalid option.
    """
    strategy = validate(cfg.get("name"))
    return _CLASSES.get(strategy.name, Adaptation)(encoder, cfg)
