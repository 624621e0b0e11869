"""How a module turns cached hidden states into the hidden states its head reads.

The cache (:mod:`bench.cache`) stores the states of frozen layers; :class:`FeaturePlan`
says which layers are cached and, for ``top_k``, from which layer the trainable top of
the encoder runs again (:func:`run_top_layers`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn
from transformers.masking_utils import create_bidirectional_mask

from bench.model.encoders import transformer_layers

#: Model families whose transformer layers :func:`run_top_layers` can drive directly.
PARTIAL_FAMILIES = ("bert", "roberta")


@dataclass
class FeaturePlan:
    """How a module turns cached states into the head's hidden states.

    Attributes:
        layers: Hidden-state indices held in the cache, in storage order.
        num_layers: The encoder's depth L.
        start: For ``top_k``: index of the cached last frozen layer (L - k), from which
            the top k layers run; None for ``frozen``.
    """

    layers: list[int]
    num_layers: int
    start: int | None = None

    def hidden_states(
        self, encoder: nn.Module, cached: Tensor, attention_mask: Tensor
    ) -> list[Tensor | None]:
        """All L + 1 hidden states the head may read (None where nothing is needed).

        Args:
            encoder: The encoder (only its top layers run, for ``top_k``).
            cached: (B, T, n_layers, H) states from the cache.
            attention_mask: (B, T).

        Returns:
            A list indexed like ``output.hidden_states``.
        """
        out: list[Tensor | None] = [None] * (self.num_layers + 1)
        for j, i in enumerate(self.layers):
            out[i] = cached[:, :, j]  # (B, T, H)
        if self.start is not None:
            top = run_top_layers(
                encoder, cached[:, :, self.layers.index(self.start)], attention_mask, self.start
            )
            out[self.start + 1 :] = top
        return out


def run_top_layers(
    encoder: nn.Module, hidden: Tensor, attention_mask: Tensor, start: int
) -> list[Tensor]:
    """Run the transformer layers above hidden-state index ``start``.

    Args:
        encoder: A BERT- or RoBERTa-family encoder.
        hidden: (B, T, H) output of layer ``start`` (hidden-state index).
        attention_mask: (B, T) padding mask.
        start: Hidden-state index of ``hidden``.

    Returns:
        The hidden states ``start + 1 .. L``, each (B, T, H).
    """
    mask = create_bidirectional_mask(
        config=encoder.config,  # type: ignore[arg-type,unused-ignore]  # typed narrower before transformers 5.24
        inputs_embeds=hidden,
        attention_mask=attention_mask,
    )
    out = []
    for layer in list(transformer_layers(encoder))[start:]:
        hidden = layer(hidden, mask)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        out.append(hidden)
    return out
