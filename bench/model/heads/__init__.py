"""Classification heads, identical across encoders, chosen by name from :data:`HEADS`.

Every head has the signature ``forward(hidden_states, attention_mask) -> logits`` where
``hidden_states`` is the encoder's tuple of L + 1 tensors (B, T, H). Token tasks use
:data:`TOKEN_HEADS` (same names, logits per token, see :mod:`bench.model.heads.token`).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from bench.model.heads.base import SequenceHead
from bench.model.heads.bilstm import BiLSTMHead
from bench.model.heads.last4_concat import Last4ConcatHead
from bench.model.heads.linear import LinearHead
from bench.model.heads.mean_linear import MeanLinearHead
from bench.model.heads.options import head_options
from bench.model.heads.pooler import PoolerHead
from bench.model.heads.token import TOKEN_HEADS, TokenHead, build_token_head

HEADS: dict[str, type[SequenceHead]] = {
    "linear": LinearHead,
    "pooler": PoolerHead,
    "last4_concat": Last4ConcatHead,
    "bilstm": BiLSTMHead,
    "mean_linear": MeanLinearHead,
}


def build_head(
    cfg: dict[str, Any],
    hidden_size: int,
    num_layers: int,
    num_labels: int,
    summary: str = "first",
    pair: bool = False,
) -> SequenceHead:
    """Build a head from its config group.

    Args:
        cfg: The ``head`` config as a plain dict: ``name`` plus the head's options.
        hidden_size: Encoder width H.
        num_layers: Encoder depth L.
        num_labels: Number of outputs.
        summary: The encoder's summary token, ``first`` or ``last`` (``encoder.summary``).
        pair: Whether the pairs are encoded one sentence at a time (``pair_encoding=siamese``).

    Returns:
        The head module.

    Raises:
        ConfigError: For an unknown head name or an option the head does not take.
    """
    cls, options = head_options(cfg, HEADS, SequenceHead)
    return cls(hidden_size, num_layers, num_labels, summary=summary, pair=pair, **options)


def count_parameters(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters of a module (optionally only those requiring grad)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


__all__ = [
    "HEADS",
    "TOKEN_HEADS",
    "SequenceHead",
    "TokenHead",
    "build_head",
    "build_token_head",
    "count_parameters",
]
