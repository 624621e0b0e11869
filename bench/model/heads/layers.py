"""Which hidden states a head reads: the modules that select and combine layers.

Names, indices and combines are checked in :mod:`bench.axes.layers`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from bench.axes.layers import COMBINES, LayerSpec, resolve_layers
from bench.errors import ConfigError


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
        layers: Layer indices (0 = embeddings, negative from the top) or a name from
            :data:`LAYER_CHOICES`, which also sets the combine.
        combine: ``concat`` (width = n * H), ``mean``, ``max`` (element-wise over the
            layers, Sun et al. 2019), ``sum`` or ``scalar_mix`` (width H).
        hidden_size: Encoder width H.
        num_layers: Encoder depth L.
    """

    def __init__(self, layers: LayerSpec, combine: str, hidden_size: int, num_layers: int) -> None:
        super().__init__()
        if combine not in COMBINES:
            raise ConfigError(f"head.combine={combine!r}; valid choices: {', '.join(COMBINES)}")
        self.layers, combine = resolve_layers(layers, combine, num_layers)
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
        if self.combine == "max":
            return torch.stack(states, dim=0).amax(dim=0)
        if self.combine == "sum":
            return torch.stack(states, dim=0).sum(dim=0)
        assert self.mix is not None
        return self.mix(states)
