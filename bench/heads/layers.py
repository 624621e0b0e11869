"""Which hidden states a head reads: layer selection and how the layers are combined."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from bench.errors import ConfigError

COMBINES = ("concat", "mean", "sum", "scalar_mix")


def normalise_layers(layers: int | Sequence[int], num_layers: int) -> list[int]:
    """Check layer indices against the encoder depth.

    Hidden states are ``num_layers + 1`` tensors: index 0 is the embedding output,
    ``num_layers`` (or -1) the last transformer layer. Negative indices count from the top.

    Args:
        layers: One index or a list of indices.
        num_layers: The encoder's number of transformer layers L.

    Returns:
        The indices as non-negative positions in ``0..L``, in the given order.

    Raises:
        ConfigError: If the list is empty or an index is out of range.
    """
    items = [layers] if isinstance(layers, int) else list(layers)
    if not items:
        raise ConfigError("head.layers is empty; give at least one layer index")
    out = []
    for index in items:
        if not isinstance(index, int) or not -(num_layers + 1) <= index <= num_layers:
            raise ConfigError(
                f"head.layers contains {index!r}; valid indices for this {num_layers}-layer "
                f"encoder are 0..{num_layers} (0 = embeddings) or -{num_layers + 1}..-1"
            )
        out.append(index % (num_layers + 1))
    return out


class ScalarMix(nn.Module):
    """Learned softmax-weighted sum of layers times a learned scale (ELMo, Peters et al.)."""

    def __init__(self, n_layers: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(n_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, states: list[Tensor]) -> Tensor:
        """Mix ``n_layers`` tensors of shape (B, T, H) into one (B, T, H)."""
        weights = torch.softmax(self.weights, dim=0)
        stacked = torch.stack(states, dim=0)  # (n, B, T, H)
        return self.gamma * torch.einsum("n,nbth->bth", weights, stacked)


class LayerSelect(nn.Module):
    """Pick hidden states by index and combine them into one (B, T, width) tensor.

    Args:
        layers: Layer indices (0 = embeddings, negative from the top).
        combine: ``concat`` (width = n * H), ``mean``, ``sum`` or ``scalar_mix`` (width H).
        hidden_size: Encoder width H.
        num_layers: Encoder depth L.
    """

    def __init__(
        self, layers: int | Sequence[int], combine: str, hidden_size: int, num_layers: int
    ) -> None:
        super().__init__()
        if combine not in COMBINES:
            raise ConfigError(f"head.combine={combine!r}; valid choices: {', '.join(COMBINES)}")
        self.layers = normalise_layers(layers, num_layers)
        self.combine = combine
        n = len(self.layers)
        self.out_dim = hidden_size * n if combine == "concat" else hidden_size
        self.mix = ScalarMix(n) if combine == "scalar_mix" else None

    def forward(self, hidden_states: Sequence[Tensor]) -> Tensor:
        """Return the combined states, (B, T, out_dim)."""
        states = [hidden_states[i] for i in self.layers]  # n x (B, T, H)
        if len(states) == 1 and self.mix is None:
            return states[0]
        if self.combine == "concat":
            return torch.cat(states, dim=-1)  # (B, T, n*H)
        if self.combine == "mean":
            return torch.stack(states, dim=0).mean(dim=0)
        if self.combine == "sum":
            return torch.stack(states, dim=0).sum(dim=0)
        assert self.mix is not None
        return self.mix(states)
