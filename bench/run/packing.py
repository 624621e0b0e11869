"""Several fine-tuning cells on one GPU: a memory estimate per cell that refuses to over-pack.

``hydra/launcher=gpu_pack runtime.cells_per_gpu=K`` runs K cells at once as worker
processes sharing one device (the joblib launcher). Before anything trains, the launching
process estimates every planned cell's peak device memory (:func:`estimate_cell`) and
refuses the sweep when K of the largest would not fit (:func:`check_pack`), naming the
largest K that does; ``--dry-run`` prints that number.

The estimate, in bytes, for a cell training with AdamW:

- weights: 4 per parameter (fp32 masters, also under mixed precision);
- gradients: 4 per trainable parameter; AdamW's two moments: 8 per trainable parameter;
- activations kept for the backward pass of the trainable transformer layers, per layer
  ``S·B·H·(34 + 5·A·S/H)`` bytes at 16-bit (Korthikanti et al. 2022, eq. 1, no tensor or
  sequence parallelism), twice that at 32-bit; ``S`` is ``data.max_length`` (dynamic
  padding only makes batches shorter), ``B`` the batch size, ``A`` the attention heads. A
  frozen encoder keeps none (its forward runs without gradients, or is read from the cache);
- a fixed :data:`PROCESS_OVERHEAD_BYTES` per process: CUDA context, cuBLAS/cuDNN
  workspaces and allocator slack.

The parameter counts are exact (the encoder is built from its config on the ``meta``
device, the head too, and the freezing strategy applied there); the activation and overhead
terms are an upper-bound model, recorded in every cell's result (``memory_estimate``) beside
its measured peak (``peak_memory.cuda_allocated_mb``), so GPU runs show how close it is.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from bench.cell import cell_path
from bench.data.tasks import get_task
from bench.errors import ConfigError

if TYPE_CHECKING:
    import torch

#: CUDA context, library workspaces and allocator slack per process (an assumption: about
#: what a PyTorch process holds on an H100 before its first tensor, plus cuBLAS workspace).
PROCESS_OVERHEAD_BYTES = 1 << 30
#: Share of the device's memory the packed cells may plan to use.
DEFAULT_HEADROOM = 0.9
_GIB = float(1 << 30)


@dataclass(frozen=True)
class MemoryEstimate:
    """A cell's estimated peak device memory, by part (bytes).

    Attributes:
        parameters: Encoder and head parameters.
        trainable: Trainable parameters under the cell's freezing strategy.
        trainable_layers: Transformer layers whose activations the backward pass keeps.
        weights: 4 bytes per parameter.
        gradients: 4 bytes per trainable parameter.
        optimizer: AdamW's moments, 8 bytes per trainable parameter.
        activations: Kept activations of the trainable layers.
        overhead: :data:`PROCESS_OVERHEAD_BYTES`.
    """

    parameters: int
    trainable: int
    trainable_layers: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    overhead: int

    @property
    def total(self) -> int:
        """The estimated peak, bytes."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    def to_dict(self) -> dict[str, Any]:
        """Plain values for ``result.json`` (with ``total`` and ``total_gib``)."""
        return {**asdict(self), "total": self.total, "total_gib": round(self.total / _GIB, 3)}


def activation_bytes(
    layers: int, seq: int, batch: int, hidden: int, heads: int, bytes_per_value: int
) -> int:
    """Activations a transformer's backward pass keeps (Korthikanti et al. 2022, eq. 1).

    Args:
        layers: Trainable transformer layers.
        seq: Sequence length S.
        batch: Batch size B.
        hidden: Hidden size H.
        heads: Attention heads A.
        bytes_per_value: 2 for 16-bit activations, 4 for 32-bit.

    Returns:
        ``layers · S·B·H·(34 + 5·A·S/H)`` scaled from 16-bit to ``bytes_per_value``.
    """
    per_layer_16bit = seq * batch * hidden * (34 + 5 * heads * seq / hidden)
    return math.ceil(layers * per_layer_16bit * bytes_per_value / 2)


def _plain(node: Any) -> dict[str, Any]:
    value = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    assert isinstance(value, dict)
    return {str(k): v for k, v in value.items()}


def _trainable_layers(encoder: torch.nn.Module, layer_count: int) -> int:
    """How many transformer layers have a trainable parameter (their activations are kept)."""
    from bench.model.encoders import transformer_layers

    try:
        layers = transformer_layers(encoder)
    except (AttributeError, ValueError):  # an architecture without a layer list: all
        return layer_count
    return sum(any(p.requires_grad for p in layer.parameters()) for layer in layers)


def estimate_cell(cfg: DictConfig) -> MemoryEstimate:
    """Estimate one cell's peak device memory from its config (nothing is loaded but configs).

    Args:
        cfg: A composed cell config (``encoder``, ``head``, ``freeze``, ``task``, ``data``,
            ``trainer``).

    Returns:
        The estimate.
    """
    key: dict[str, Any] = {k: _plain(cfg[k]) for k in ("encoder", "head", "freeze")}
    key["task"] = str(cfg.task.name)
    key["sizes"] = [int(cfg.data.max_length), int(cfg.data.batch_size)]
    key["precision"] = str(OmegaConf.select(cfg, "trainer.precision", default="32"))
    return _estimate(json.dumps(key, sort_keys=True))


@functools.lru_cache(maxsize=256)
def _estimate(key: str) -> MemoryEstimate:
    """:func:`estimate_cell` from what it reads (as JSON), once per process.

    The cells of a sweep that differ only in seed or learning rate share one estimate (a
    meta-device model build, about 30 ms).
    """
    # Imported here, not with the module: every sweep's start makes a PackCheck (Hydra
    # callback), and only one that packs cells needs torch and transformers (seconds).
    import torch
    from transformers import AutoConfig, AutoModel

    from bench.model.adaptation import build_adaptation
    from bench.model.encoders import resolve_source
    from bench.model.heads import count_parameters
    from bench.model.task_types import task_type

    parts = json.loads(key)
    encoder_cfg, head_cfg, freeze_cfg = parts["encoder"], parts["head"], parts["freeze"]
    max_length, batch_size = parts["sizes"]
    config = AutoConfig.from_pretrained(resolve_source(str(encoder_cfg["source"])))
    spec = get_task(parts["task"])
    with torch.device("meta"):
        encoder = AutoModel.from_config(config)
        head = task_type(spec).build_head(
            head_cfg,
            int(config.hidden_size),
            int(config.num_hidden_layers),
            str(encoder_cfg.get("summary", "first")),
        )
        if getattr(encoder, "pooler", None) is not None:
            setattr(encoder, "pooler", None)  # noqa: B010  # as HeadbenchModule: the head pools
        adaptation = build_adaptation(encoder, freeze_cfg)
    encoder = adaptation.encoder
    parameters = count_parameters(encoder) + count_parameters(head)
    trainable = count_parameters(encoder, trainable_only=True) + count_parameters(head)
    layers = (
        0
        if freeze_cfg.get("name") == "frozen"
        else _trainable_layers(encoder, int(config.num_hidden_layers))
    )
    precision = parts["precision"]
    activations = activation_bytes(
        layers,
        max_length,
        batch_size,
        int(config.hidden_size),
        int(config.num_attention_heads),
        2 if ("16" in precision) else 4,
    )
    return MemoryEstimate(
        parameters=parameters,
        trainable=trainable,
        trainable_layers=layers,
        weights=4 * parameters,
        gradients=4 * trainable,
        optimizer=8 * trainable,
        activations=activations,
        overhead=PROCESS_OVERHEAD_BYTES,
    )


def device_bytes(gpu_memory_gb: float | None) -> int:
    """The device memory to pack into: ``runtime.gpu_memory_gb``, else the visible GPU's.

    Raises:
        ConfigError: Without a GPU and without ``runtime.gpu_memory_gb``.
    """
    if gpu_memory_gb is not None:
        if isinstance(gpu_memory_gb, bool) or float(gpu_memory_gb) <= 0:
            raise ConfigError(f"runtime.gpu_memory_gb={gpu_memory_gb!r}: must be a positive number")
        return int(float(gpu_memory_gb) * _GIB)
    import torch  # here: see _estimate

    if not torch.cuda.is_available():
        raise ConfigError(
            "runtime.cells_per_gpu packs cells onto a GPU, but none is visible; give its "
            "memory with runtime.gpu_memory_gb=<GiB> (e.g. 80 for an H100) to plan anyway"
        )
    return int(torch.cuda.get_device_properties(0).total_memory)


def pack_size(largest: int, available: int, headroom: float = DEFAULT_HEADROOM) -> int:
    """How many cells of ``largest`` bytes fit in ``headroom`` of ``available`` bytes."""
    return int(headroom * available // largest)


def largest_cell(estimates: dict[str, MemoryEstimate]) -> tuple[str, MemoryEstimate]:
    """The cell with the largest estimate and its estimate (``estimates`` not empty)."""
    return max(estimates.items(), key=lambda kv: kv[1].total)


def check_pack(
    requested: object,
    estimates: dict[str, MemoryEstimate],
    available: int,
    headroom: float = DEFAULT_HEADROOM,
) -> int:
    """Check that ``requested`` cells fit on one device at once; refuse to over-pack.

    Args:
        requested: ``runtime.cells_per_gpu``, a positive integer.
        estimates: Estimate per planned cell (its run directory).
        available: Device memory, bytes.
        headroom: Share of ``available`` the cells may plan to use.

    Returns:
        The largest number of cells that fit (at least ``requested``; ``requested`` when
        nothing is planned).

    Raises:
        ConfigError: For a value that is not a positive integer, or when ``requested``
            cells of the largest estimate would not fit; the message names the cell, the
            numbers and the largest count that fits.
    """
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ConfigError(f"runtime.cells_per_gpu={requested!r}: must be a positive integer")
    if not estimates:
        return requested
    name, largest = largest_cell(estimates)
    fits = pack_size(largest.total, available, headroom)
    if requested > fits:
        budget = f"{headroom:.0%} of {available / _GIB:.1f} GiB"
        raise ConfigError(
            f"runtime.cells_per_gpu={requested} would over-pack the GPU: the largest cell, "
            f"{name}, needs an estimated {largest.total / _GIB:.2f} GiB, so "
            + (
                f"at most {fits} fit in {budget}; use runtime.cells_per_gpu={fits}"
                if fits
                else f"not even one fits in {budget} (lower data.batch_size or "
                "data.max_length, or set encoder.gradient_checkpointing=true)"
            )
        )
    return fits


class PackCheck:
    """A preflight check for :func:`bench.run.plan.plan`: estimates each cell it sees.

    It acts only on cells that set ``runtime.cells_per_gpu``. Cells with the same encoder,
    head, freezing strategy, task, data and trainer settings share one estimate. A cell
    whose estimate cannot be made (an unknown encoder, say) is left to its own preflight
    check, which records it failed.

    Attributes:
        requested: ``runtime.cells_per_gpu`` of the cells seen (None: no packing).
        gpu_memory_gb: ``runtime.gpu_memory_gb`` of the cells seen.
        estimates: Estimate per run directory.
    """

    def __init__(self) -> None:
        self.requested: object = None
        self.gpu_memory_gb: float | None = None
        self.estimates: dict[str, MemoryEstimate] = {}
        self._memo: dict[str, MemoryEstimate | None] = {}

    def __call__(self, cfg: DictConfig) -> None:
        """Estimate ``cfg``'s cell (memoised) and keep it under its run directory."""
        requested = OmegaConf.select(cfg, "runtime.cells_per_gpu", default=None)
        if requested is None:
            return
        self.requested = requested
        self.gpu_memory_gb = OmegaConf.select(cfg, "runtime.gpu_memory_gb", default=None)
        parts = ("encoder", "head", "freeze", "task", "data", "trainer")
        key = repr([OmegaConf.to_container(cfg[k], resolve=True) for k in parts])
        if key not in self._memo:
            try:
                self._memo[key] = estimate_cell(cfg)
            except Exception:  # the cell's own preflight check names what is wrong
                self._memo[key] = None
        found = self._memo[key]
        if found is not None:
            self.estimates[cell_path(cfg)] = found

    def verdict(self) -> int | None:
        """:func:`check_pack` of what was seen (None without packing).

        Raises:
            ConfigError: As :func:`check_pack` and :func:`device_bytes`.
        """
        if self.requested is None:
            return None
        return check_pack(self.requested, self.estimates, device_bytes(self.gpu_memory_gb))

    def line(self) -> str | None:
        """One line for ``--dry-run`` (None without packing)."""
        if self.requested is None:
            return None
        return pack_line(self.requested, self.estimates, device_bytes(self.gpu_memory_gb))


def pack_line(requested: object, estimates: dict[str, MemoryEstimate], available: int) -> str:
    """One line for ``--dry-run``: the largest estimate and how many cells fit."""
    if not estimates:
        return f"packing: {requested} cells per GPU; no cell to train"
    name, largest = largest_cell(estimates)
    fits = pack_size(largest.total, available)
    return (
        f"packing: {requested} cells per GPU asked, at most {fits} fit "
        f"({DEFAULT_HEADROOM:.0%} of {available / _GIB:.1f} GiB; largest estimate "
        f"{largest.total / _GIB:.2f} GiB: {name})"
    )
