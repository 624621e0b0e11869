"""``pooler``: dense(H, H) → tanh → dropout → linear on the first token.

``init: random`` is RoBERTa's classification head; ``init: pretrained`` copies the
checkpoint's NSP-trained pooler into the dense layer, which is BERT's head.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from bench.axes.heads import HEADS
from bench.errors import ConfigError
from bench.model.heads.base import LSTM_OPTIONS, SequenceHead
from bench.model.heads.options import preset_defaults

#: ``head.init``: the preset's variants (:data:`bench.axes.heads.HEADS`).
POOLER_INITS = HEADS["pooler"].variants


class PoolerHead(SequenceHead):
    """The dense + tanh pooler-style head."""

    fixed_options: ClassVar[frozenset[str]] = frozenset({"mlp", "mlp_hidden"}) | LSTM_OPTIONS

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        num_labels: int,
        init: str = "random",
        activation: str = "tanh",
        **options: Any,
    ) -> None:
        if init not in POOLER_INITS:
            raise ConfigError(f"head.init={init!r}; valid choices: {', '.join(POOLER_INITS)}")
        options = preset_defaults("pooler", options)
        super().__init__(
            hidden_size,
            num_layers,
            num_labels,
            mlp=True,
            mlp_hidden=hidden_size,
            activation=activation,
            **options,
        )
        self.init = init
        if init == "pretrained" and self.in_dim != hidden_size:
            raise ConfigError(
                f"head.init=pretrained needs input width H={hidden_size} to reuse the "
                f"checkpoint's (H, H) pooler, but head.layers/combine give {self.in_dim}"
            )

    def load_pretrained_pooler(self, weight: Tensor, bias: Tensor) -> None:
        """Copy a checkpoint's pooler dense layer into this head's dense layer.

        Args:
            weight: (H, H) pooler weight.
            bias: (H,) pooler bias.
        """
        assert self.classifier.dense is not None
        with torch.no_grad():
            self.classifier.dense.weight.copy_(weight)
            self.classifier.dense.bias.copy_(bias)
