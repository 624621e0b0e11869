"""The classifier at the end of every head: linear, or dense → activation → dropout → linear."""

from __future__ import annotations

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
    """

    def __init__(
        self,
        in_dim: int,
        num_labels: int,
        dropout: float,
        mlp: bool = False,
        mlp_hidden: int | None = None,
        activation: str = "tanh",
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
        self.out = nn.Linear(in_dim, num_labels)

    def forward(self, pooled: Tensor) -> Tensor:
        """Return logits (B, C) for pooled features (B, D)."""
        if self.dense is not None and self.activation is not None:
            pooled = self.activation(self.dense(pooled))
        return self.out(self.dropout(pooled))
