"""``last4_concat``: first-token states of the last four layers concatenated (4H) → linear.

With ``mlp: true`` a dense → activation → dropout block sits before the output layer.
"""

from __future__ import annotations

from typing import Any, ClassVar

from bench.model.heads.base import LSTM_OPTIONS, SequenceHead
from bench.model.heads.options import preset_defaults


class Last4ConcatHead(SequenceHead):
    """Concatenation of the last four layers (Devlin et al. 2019, Sun et al. 2019)."""

    fixed_options: ClassVar[frozenset[str]] = LSTM_OPTIONS

    def __init__(self, hidden_size: int, num_layers: int, num_labels: int, **options: Any) -> None:
        options = preset_defaults("last4_concat", options)
        super().__init__(hidden_size, num_layers, num_labels, **options)
