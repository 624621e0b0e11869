"""The classifier at the end of every head: linear, or dense → activation → dropout → linear."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bench.errors import ConfigError

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "gelu": nn.GELU, "relu": nn.ReLU}


class Classifier(nn.Module):
    """Map pooled features (B, D) to logits (B, C).

    Args:
        in_dim: Width D of the pooled features.
        num_labels: Number of outputs C (1 for regression).
        dropout: Dropout probability.
        mlp: If true, ``dense(D, mlp_hidden) → activation → dropout → linear``;
            otherwise ``dropout → linear``.
        mlp_hidden: Width of the dense layer (the encoder's H when built by a head).
        activation: ``tanh``, ``gelu`` or ``relu``.
        pair: Classify a pair of sentences encoded apart (``pair_encoding=siamese``): the
            dense layer and activation run on each sentence's features, u and v, and
            dropout → linear sees ``[u, v, |u-v|, u*v]`` (4x the width; SentEval,
            InferSent, Sentence-BERT): :meth:`pair_forward`.
    """

    def __init__(
        self,
        in_dim: int,
        num_labels: int,
        dropout: float,
        mlp: bool = False,
        mlp_hidden: int | None = None,
        activation: str = "tanh",
        pair: bool = False,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(
                f"head.activation={activation!r}; valid choices: {', '.join(ACTIVATIONS)}"
            )
        self.dense: nn.Linear | None = None
        self.activation: nn.Module | None = None
        if mlp:
            width = mlp_hidden or in_dim
            self.dense = nn.Linear(in_dim, width)
            self.activation = ACTIVATIONS[activation]()
            in_dim = width
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(4 * in_dim if pair else in_dim, num_labels)

    def _hidden(self, pooled: Tensor) -> Tensor:
        """``dense → activation`` when there is a dense layer, else the features themselves."""
        if self.dense is not None and self.activation is not None:
            return self.activation(self.dense(pooled))
        return pooled

    def forward(self, pooled: Tensor) -> Tensor:
        """Return logits (B, C) for pooled features (B, D)."""
        return self.out(self.dropout(self._hidden(pooled)))

    def pair_forward(self, first: Tensor, second: Tensor) -> Tensor:
        """Return logits (B, C) for two sentences' pooled features (B, D) each.

        Each goes through the dense layer and activation (when there are), giving u and v;
        dropout → linear then reads ``[u, v, |u-v|, u*v]`` (B, 4D').
        """
        u, v = self._hidden(first), self._hidden(second)
        return self.out(self.dropout(torch.cat([u, v, (u - v).abs(), u * v], dim=-1)))
