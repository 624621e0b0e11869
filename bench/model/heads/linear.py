"""``linear``: dropout → linear on the first token ([CLS] / ``<s>``) of the last layer."""

from __future__ import annotations

from typing import Any, ClassVar

from bench.model.heads.base import LSTM_OPTIONS, SequenceHead
from bench.model.heads.options import preset_defaults


class LinearHead(SequenceHead):
    """The single linear layer on [CLS]."""

    fixed_options: ClassVar[frozenset[str]] = (
        frozenset({"mlp", "mlp_hidden", "activation"}) | LSTM_OPTIONS
    )

    def __init__(self, hidden_size: int, num_layers: int, num_labels: int, **options: Any) -> None:
        options = preset_defaults("linear", options)
        super().__init__(hidden_size, num_layers, num_labels, mlp=False, **options)
