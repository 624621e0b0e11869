"""Freezing strategies: which encoder parameters train.

A frozen module gets ``requires_grad=False`` *and* is kept in eval mode (no dropout);
:func:`apply_freezing` returns the modules the training module must hold in eval mode.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import nn

from bench.axes.freezing import check_k, validate
from bench.errors import ConfigError
from bench.model.encoders import embedding_module, transformer_layers


@dataclass
class FreezeReport:
    """What a freezing strategy did to an encoder.

    Attributes:
        strategy: The strategy name.
        k: Trainable top layers for ``top_k`` (None otherwise).
        encoder_trainable: Encoder parameters that require grad.
        encoder_total: All encoder parameters.
        frozen_modules: Frozen sub-modules, to be kept in eval mode during training.
    """

    strategy: str
    k: int | None
    encoder_trainable: int
    encoder_total: int
    frozen_modules: list[nn.Module] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Return the counts as a JSON-serialisable dict."""
        data = asdict(self)
        data.pop("frozen_modules")
        return data


def _freeze(module: nn.Module) -> None:
    for param in module.parameters():
        param.requires_grad_(False)
    module.eval()


def apply_freezing(encoder: nn.Module, strategy: str, k: int | None = None) -> FreezeReport:
    """Apply a freezing strategy to an encoder in place.

    Args:
        encoder: A Hugging Face encoder (all parameters trainable on entry).
        strategy: ``frozen`` (nothing trains), ``full`` (everything trains), ``top_k``
            (only the top ``k`` transformer layers train), ``embeddings`` (everything
            but the embedding block trains) or ``bitfit`` (only the encoder's bias terms
            train, Ben Zaken et al. 2022; the encoder stays in train mode).
        k: Number of trainable top layers for ``top_k``.

    Returns:
        A :class:`FreezeReport` with parameter counts and the frozen modules.

    Raises:
        ConfigError: For an unknown strategy or a ``k`` outside ``1..L``.
    """
    for param in encoder.parameters():
        param.requires_grad_(True)
    frozen: list[nn.Module] = []
    if strategy == "frozen":
        frozen = [encoder]
    elif strategy == "full":
        frozen = []
    elif strategy == "embeddings":
        frozen = [embedding_module(encoder)]
    elif strategy == "top_k":
        layers = transformer_layers(encoder)
        k = check_k(strategy, k, len(layers))
        # Everything below the top k layers is frozen: embeddings, lower layers and any
        # encoder-level extras (e.g. DeBERTa's relative embeddings).
        frozen = [embedding_module(encoder), *list(layers)[: len(layers) - k]]
        for param in encoder.parameters():
            param.requires_grad_(False)
        for layer in list(layers)[len(layers) - k :]:
            for param in layer.parameters():
                param.requires_grad_(True)
    elif strategy == "bitfit":
        # Every bias term trains (attention, feed-forward, LayerNorm); weights stay frozen.
        # No sub-module is wholly frozen, so none is held in eval mode.
        for name, param in encoder.named_parameters():
            param.requires_grad_(name == "bias" or name.endswith(".bias"))
    else:  # an adaptive strategy's own name, or an unknown one: validate() says which
        raise ConfigError(
            f"freeze.name={validate(strategy).name!r} is built by bench.model.adaptation, "
            "not by apply_freezing"
        )
    for module in frozen:
        _freeze(module)
    return FreezeReport(
        strategy=strategy,
        k=k if strategy == "top_k" else None,
        encoder_trainable=sum(p.numel() for p in encoder.parameters() if p.requires_grad),
        encoder_total=sum(p.numel() for p in encoder.parameters()),
        frozen_modules=frozen,
    )
