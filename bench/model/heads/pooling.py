"""How a head reads a sequence of token states: first token, mean, max, or a BiLSTM."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bench.errors import ConfigError

POOLS = ("cls", "mean", "max")
LSTM_POOLS = ("final", "mean", "max", "cls")


def masked_pool(states: Tensor, attention_mask: Tensor, pool: str) -> Tensor:
    """Pool token states (B, T, D) into (B, D) ignoring padding.

    Args:
        states: Token states, (B, T, D).
        attention_mask: 1 for real tokens, 0 for padding, (B, T).
        pool: ``cls`` (first token), ``mean`` or ``max`` over real tokens.

    Returns:
        The pooled states, (B, D).
    """
    if pool == "cls":
        return states[:, 0]
    mask = attention_mask.unsqueeze(-1).to(states.dtype)  # (B, T, 1)
    if pool == "mean":
        return (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    if pool == "max":
        filled = states.masked_fill(mask == 0, torch.finfo(states.dtype).min)
        return filled.max(dim=1).values
    raise ConfigError(f"head.pool={pool!r}; valid choices: {', '.join(POOLS)}")


def sequence_lengths(attention_mask: Tensor) -> Tensor:
    """Number of real tokens per row; checks that padding is on the right.

    Args:
        attention_mask: (B, T) mask of 1s followed by 0s.

    Returns:
        Lengths as a CPU int64 tensor, (B,).

    Raises:
        ValueError: If a row has padding before a real token (left padding).
    """
    lengths = attention_mask.sum(dim=1)
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    expected = (positions.unsqueeze(0) < lengths.unsqueeze(1)).to(attention_mask.dtype)
    if not torch.equal(expected, attention_mask):
        raise ValueError("attention_mask is not right-padded; headbench tokenizers pad right")
    return lengths.to("cpu", torch.int64)


class BiLSTMEncoder(nn.Module):
    """A (multi-layer) bidirectional LSTM over token states, packed by the mask.

    Padding never reaches the recurrent state: sequences are packed with their true
    lengths, so appending more padding leaves every output unchanged.

    Args:
        input_size: Width of the input token states.
        hidden_size: Total output width (both directions); must be even.
        num_layers: Stacked LSTM layers.
        dropout: Dropout between stacked LSTM layers.
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int, dropout: float) -> None:
        super().__init__()
        if hidden_size % 2:
            raise ConfigError(f"head.lstm_hidden={hidden_size} must be even (two directions)")
        self.lstm = nn.LSTM(
            input_size,
            hidden_size // 2,
            num_layers=num_layers,
            bidirectional=True,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.out_dim = hidden_size

    def forward(self, states: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Run the BiLSTM.

        Args:
            states: (B, T, D) token states.
            attention_mask: (B, T) right-padded mask.

        Returns:
            ``(outputs, final)``: outputs (B, T, hidden) with zeros at padding, and the
            final states (B, hidden): forward at the last real token, backward at the first.
        """
        lengths = sequence_lengths(attention_mask)
        packed = pack_padded_sequence(states, lengths, batch_first=True, enforce_sorted=False)
        out, (h_n, _) = self.lstm(packed)
        outputs, _ = pad_packed_sequence(out, batch_first=True, total_length=states.shape[1])
        final = torch.cat([h_n[-2], h_n[-1]], dim=-1)  # (B, hidden): last layer fwd ++ bwd
        return outputs, final
