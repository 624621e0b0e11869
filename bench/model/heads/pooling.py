"""How a head reads a sequence of token states: summary token, mean, max, or a BiLSTM.

The *summary token* is where an encoder family sums a sequence up: the first token for
BERT, RoBERTa, DeBERTa and ELECTRA ([CLS] / ``<s>``), the last real token for GPT-2, XLNet
and decoder LMs (:data:`bench.axes.encoders.SUMMARY_POSITIONS`). Every function here works
under right and left padding alike: positions are read off the attention mask, never
assumed.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bench.axes.encoders import SUMMARY_POSITIONS
from bench.errors import ConfigError

#: ``head.pool`` values of a sequence head: ``cls`` reads the summary token (the name is
#: kept from BERT: it is the first token there, the last on GPT-2-style models).
POOLS = ("cls", "mean", "max")
LSTM_POOLS = ("final", "mean", "max", "cls")


def summary_index(attention_mask: Tensor, summary: str) -> Tensor:
    """Position of each row's first or last real token, under any padding side.

    Args:
        attention_mask: (B, T), 1 for real tokens, 0 for padding.
        summary: ``first`` or ``last``.

    Returns:
        (B,) int64 positions (0 for a row without real tokens).

    Raises:
        ConfigError: For another ``summary``.
    """
    real = attention_mask.bool()
    if summary == "first":
        return real.to(torch.uint8).argmax(dim=1).to(torch.int64)
    if summary == "last":
        flipped = real.flip(1).to(torch.uint8).argmax(dim=1).to(torch.int64)
        last = attention_mask.shape[1] - 1 - flipped
        return torch.where(real.any(dim=1), last, torch.zeros_like(last))
    raise ConfigError(f"encoder.summary={summary!r}; valid choices: {', '.join(SUMMARY_POSITIONS)}")


def masked_pool(
    states: Tensor, attention_mask: Tensor, pool: str, summary: str = "first"
) -> Tensor:
    """Pool token states (B, T, D) into (B, D) ignoring padding.

    Padding positions are never multiplied in: an encoder may leave non-finite values
    there (a causal model's left padding attends to nothing).

    Args:
        states: Token states, (B, T, D).
        attention_mask: 1 for real tokens, 0 for padding, (B, T); either padding side.
        pool: ``cls`` (the summary token), ``mean`` or ``max`` over real tokens.
        summary: Where the summary token is: ``first`` or ``last`` real token.

    Returns:
        The pooled states, (B, D).
    """
    if pool == "cls":
        index = summary_index(attention_mask, summary)
        return states[torch.arange(states.shape[0], device=states.device), index]
    real = attention_mask.bool().unsqueeze(-1)  # (B, T, 1)
    if pool == "mean":
        total = torch.where(real, states, torch.zeros((), dtype=states.dtype, device=states.device))
        count = real.sum(dim=1).to(states.dtype).clamp(min=1.0)
        return total.sum(dim=1) / count
    if pool == "max":
        filled = states.masked_fill(~real, torch.finfo(states.dtype).min)
        return filled.max(dim=1).values
    raise ConfigError(f"head.pool={pool!r}; valid choices: {', '.join(POOLS)}")


def real_tokens_first(attention_mask: Tensor) -> Tensor:
    """For each row, the positions of its real tokens in order, then its padding positions.

    Gathering with this order turns any padding (left, right, or gaps) into right padding;
    scattering with it puts the states back.

    Args:
        attention_mask: (B, T) mask.

    Returns:
        (B, T) int64 permutation of ``0..T-1`` per row.
    """
    pad = (~attention_mask.bool()).to(torch.uint8)
    return torch.sort(pad, dim=1, stable=True).indices


class BiLSTMEncoder(nn.Module):
    """A (multi-layer) bidirectional LSTM over token states, packed by the mask.

    Padding never reaches the recurrent state: each row's real tokens are moved to the
    front (whatever the padding side), packed with their true lengths, and the outputs put
    back in place, so adding padding on either side leaves every output unchanged.

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
            attention_mask: (B, T) mask, padded on either side.

        Returns:
            ``(outputs, final)``: outputs (B, T, hidden) with zeros at padding, and the
            final states (B, hidden): forward at the last real token, backward at the first.
        """
        lengths = attention_mask.sum(dim=1)
        positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
        right = (positions.unsqueeze(0) < lengths.unsqueeze(1)).to(attention_mask.dtype)
        order = None if torch.equal(right, attention_mask) else real_tokens_first(attention_mask)
        if order is not None:  # left padding (or gaps): real tokens to the front first
            states = states.gather(1, order.unsqueeze(-1).expand_as(states))
        packed = pack_padded_sequence(
            states, lengths.to("cpu", torch.int64), batch_first=True, enforce_sorted=False
        )
        out, (h_n, _) = self.lstm(packed)
        outputs, _ = pad_packed_sequence(out, batch_first=True, total_length=states.shape[1])
        if order is not None:
            placed = torch.zeros_like(outputs)
            outputs = placed.scatter(1, order.unsqueeze(-1).expand_as(outputs), outputs)
        final = torch.cat([h_n[-2], h_n[-1]], dim=-1)  # (B, hidden): last layer fwd ++ bwd
        return outputs, final
