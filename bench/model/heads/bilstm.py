"""``bilstm``: a BiLSTM over the token states, packed by the mask, pooled, → linear."""

from __future__ import annotations

from typing import Any, ClassVar

from bench.model.heads.base import SequenceHead
from bench.model.heads.options import preset_defaults


class BiLSTMHead(SequenceHead):
    """BiLSTM over tokens; ``pool`` is ``final`` (default), ``mean``, ``max`` or ``cls``."""

    fixed_options: ClassVar[frozenset[str]] = frozenset({"lstm"})

    def __init__(self, hidden_size: int, num_layers: int, num_labels: int, **options: Any) -> None:
        options = preset_defaults("bilstm", options)
        super().__init__(hidden_size, num_layers, num_labels, lstm=True, **options)
