"""``mean_linear``: mean over the last layer's token states (padding excluded) → dropout → linear.

The control beside the four named heads (DESIGN.md, evaluation protocol 3): it reads every
token like the BiLSTM but adds nothing to it, so it tells "the BiLSTM is better" from
"reading all tokens is better" (MiniLM was trained with mean pooling).
"""

from __future__ import annotations

from typing import Any, ClassVar

from bench.errors import ConfigError
from bench.model.heads.base import LSTM_OPTIONS, SequenceHead
from bench.model.heads.options import preset_defaults


class MeanLinearHead(SequenceHead):
    """The single linear layer on the masked mean of the token states.

    ``pool`` is part of the name: anything but ``mean`` is refused (``head=linear`` with
    ``head.pool=...`` reads the tokens another way).
    """

    fixed_options: ClassVar[frozenset[str]] = (
        frozenset({"mlp", "mlp_hidden", "activation"}) | LSTM_OPTIONS
    )

    def __init__(self, hidden_size: int, num_layers: int, num_labels: int, **options: Any) -> None:
        options = preset_defaults("mean_linear", options)
        if options["pool"] != "mean":
            raise ConfigError(
                f"head.pool={options['pool']!r}: head mean_linear pools by mean; valid "
                "choice: mean (head=linear takes head.pool=cls|mean|max)"
            )
        super().__init__(hidden_size, num_layers, num_labels, mlp=False, **options)
