"""The one composable head: layers → combine → pool (optionally through a BiLSTM) → classifier.

The four named heads (:mod:`bench.model.heads`) are presets of this class. Every size is
read from the encoder (``hidden_size``, ``num_layers``), never hard-coded, so a head's
input width always matches what the encoder produces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from torch import Tensor, nn

from bench.axes.encoders import SUMMARY_POSITIONS
from bench.axes.layers import LayerSpec
from bench.errors import ConfigError
from bench.model.heads.classifier import Classifier
from bench.model.heads.layers import LayerSelect
from bench.model.heads.pooling import (
    LSTM_POOLS,
    POOLS,
    BiLSTMEncoder,
    masked_pool,
)

LSTM_OPTIONS = frozenset({"lstm", "lstm_hidden", "lstm_layers", "lstm_dropout"})


class StatesHead(nn.Module):
    """The parts every head shares: layers → combine → optional BiLSTM → classifier.

    :class:`SequenceHead` pools the result per example; the token heads
    (:mod:`bench.model.heads.token`) classify every token. Arguments as :class:`SequenceHead`
    (without ``pool``).
    """

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        num_labels: int,
        *,
        layers: LayerSpec,
        combine: str,
        dropout: float,
        mlp: bool,
        mlp_hidden: int | None,
        activation: str,
        lstm: bool,
        lstm_hidden: int,
        lstm_layers: int,
        lstm_dropout: float,
        pair: bool = False,
    ) -> None:
        super().__init__()
        self.select = LayerSelect(layers, combine, hidden_size, num_layers)
        width = self.select.out_dim
        self.lstm: BiLSTMEncoder | None = None
        if lstm:
            self.lstm = BiLSTMEncoder(width, lstm_hidden, lstm_layers, lstm_dropout)
            width = self.lstm.out_dim
        self.in_dim = width
        self.classifier = Classifier(
            width, num_labels, dropout, mlp, mlp_hidden or hidden_size, activation, pair
        )


class SequenceHead(StatesHead):
    """A sequence-classification head over an encoder's hidden states.

    Args:
        hidden_size: Encoder width H.
        num_layers: Encoder depth L.
        num_labels: Outputs C (1 for regression).
        layers: Hidden-state indices to read (0 = embeddings, -1 = last layer), or a
            name (``last``, ``concat_last4``, ``sum_all``...) that also sets ``combine``.
        combine: How several layers become one: ``concat``, ``mean``, ``sum``, ``scalar_mix``.
        pool: ``cls`` (the summary token), ``mean``, ``max``; with ``lstm`` also ``final``.
        dropout: Dropout in the classifier.
        mlp: Put ``dense → activation → dropout`` before the output layer.
        mlp_hidden: Width of that dense layer (default H).
        activation: Activation of the dense layer.
        lstm: Run a BiLSTM over the token states before pooling.
        lstm_hidden: Total BiLSTM width (both directions).
        lstm_layers: Stacked BiLSTM layers.
        lstm_dropout: Dropout between stacked BiLSTM layers.
        summary: Where the encoder family's summary token is (``first`` real token for
            BERT-style encoders, ``last`` for GPT-2, XLNet and decoder LMs): what
            ``pool=cls`` reads. Comes from the encoder (``encoder.summary``), never from the
            head's config.
        pair: The task's pairs are encoded one sentence at a time (``pair_encoding=siamese``):
            the classifier reads both sentences' features (:meth:`pair_forward`). Comes from
            the cell, never from the head's config.
    """

    #: Options a preset sets itself and so does not accept from the config.
    fixed_options: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        num_labels: int,
        layers: LayerSpec = -1,
        combine: str = "concat",
        pool: str = "cls",
        dropout: float = 0.1,
        mlp: bool = False,
        mlp_hidden: int | None = None,
        activation: str = "tanh",
        lstm: bool = False,
        lstm_hidden: int = 768,
        lstm_layers: int = 1,
        lstm_dropout: float = 0.0,
        summary: str = "first",
        pair: bool = False,
    ) -> None:
        valid_pools = LSTM_POOLS if lstm else POOLS
        if summary not in SUMMARY_POSITIONS:
            raise ConfigError(
                f"encoder.summary={summary!r}; valid choices: {', '.join(SUMMARY_POSITIONS)}"
            )
        if pool not in valid_pools:
            raise ConfigError(f"head.pool={pool!r}; valid choices: {', '.join(valid_pools)}")
        super().__init__(
            hidden_size,
            num_layers,
            num_labels,
            layers=layers,
            combine=combine,
            dropout=dropout,
            mlp=mlp,
            mlp_hidden=mlp_hidden,
            activation=activation,
            lstm=lstm,
            lstm_hidden=lstm_hidden,
            lstm_layers=lstm_layers,
            lstm_dropout=lstm_dropout,
            pair=pair,
        )
        self.pool = pool
        self.summary = summary

    def features(self, hidden_states: Sequence[Tensor], attention_mask: Tensor) -> Tensor:
        """Pooled features fed to the classifier, (B, in_dim)."""
        states = self.select(hidden_states)  # (B, T, D)
        if self.lstm is None:
            return masked_pool(states, attention_mask, self.pool, self.summary)
        outputs, final = self.lstm(states, attention_mask)  # (B, T, 2h), (B, 2h)
        if self.pool == "final":
            return final
        return masked_pool(outputs, attention_mask, self.pool, self.summary)

    def forward(self, hidden_states: Sequence[Tensor], attention_mask: Tensor) -> Tensor:
        """Return logits (B, C) from all hidden states ((L+1) x (B, T, H)) and the mask."""
        return self.classifier(self.features(hidden_states, attention_mask))

    def pair_forward(
        self,
        first: Sequence[Tensor],
        first_mask: Tensor,
        second: Sequence[Tensor],
        second_mask: Tensor,
    ) -> Tensor:
        """Return logits (B, C) for a pair encoded one sentence at a time (``pair=True``).

        Layers, pooling (and the BiLSTM) run on each sentence's hidden states
        ((L+1) x (B, T_i, H)) with its own mask; :meth:`Classifier.pair_forward` combines them.
        """
        return self.classifier.pair_forward(
            self.features(first, first_mask), self.features(second, second_mask)
        )
