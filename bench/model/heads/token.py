"""Token-classification heads: the same parts and names as the sequence heads, per token.

layers → combine → (optional BiLSTM over the sub-tokens, packed by the mask) →
classifier applied to every token → (optional CRF over the words). Each word is scored
at its first sub-token (the BERT paper's setup); the other sub-tokens never reach the
loss or the predictions.

The presets reuse the sequence heads' names: ``linear`` (dropout → linear per token),
``pooler`` (dense → tanh → dropout → linear per token, random init), ``last4_concat``
(linear over the last four layers concatenated), ``bilstm`` (the BERT paper's
frozen-feature model: a 2-layer BiLSTM, 768 wide in total) and ``mean_linear`` (the
sequence control; with nothing to pool it is ``linear`` per token). ``crf: true`` works on all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.nn import functional as F

from bench.axes.layers import LayerSpec
from bench.errors import ConfigError
from bench.model.heads.base import StatesHead
from bench.model.heads.crf import CRF, iob2_constraints
from bench.model.heads.options import head_options

_LSTM_OPTIONS = frozenset({"lstm_hidden", "lstm_layers", "lstm_dropout"})
_MLP_OPTIONS = frozenset({"mlp", "mlp_hidden", "activation"})


def gather_words(logits: Tensor, word_pos: Tensor) -> tuple[Tensor, Tensor]:
    """Pick each word's first sub-token.

    Args:
        logits: (B, T, C) per-token scores.
        word_pos: (B, W) position of each word's first sub-token; -1 for padding and for
            words cut off by truncation (always at the end of a row).

    Returns:
        ``(emissions, mask)``: (B, W, C) per-word scores and (B, W) bool mask.

    Raises:
        ValueError: If a row's present words are not a prefix of the row.
    """
    mask = word_pos >= 0  # (B, W)
    lengths = mask.sum(dim=1, keepdim=True)
    prefix = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0) < lengths
    if not torch.equal(prefix, mask):
        raise ValueError("word_pos must hold the present words first, then -1 padding")
    index = word_pos.clamp(min=0).unsqueeze(-1).expand(-1, -1, logits.shape[-1])
    return logits.gather(1, index), mask  # (B, W, C), (B, W)


class TokenHead(StatesHead):
    """A token-classification head over an encoder's hidden states.

    Args:
        hidden_size: Encoder width H.
        num_layers: Encoder depth L.
        label_names: Tag names (IOB2); their number is C and they constrain the CRF.
        layers: Indices or a named choice (``last``, ``concat_last4``, ``sum_all``...).
        combine: ``concat``, ``mean``, ``sum`` or ``scalar_mix``.
        pool: Must be None: every token is classified, nothing is pooled.
        dropout: Dropout in the classifier.
        mlp: Put ``dense → activation → dropout`` before the output layer.
        mlp_hidden: Width of that dense layer (default H).
        activation: Activation of the dense layer.
        lstm: Run a BiLSTM over the sub-tokens (packed by the mask) first.
        lstm_hidden: Total BiLSTM width (both directions).
        lstm_layers: Stacked BiLSTM layers.
        lstm_dropout: Dropout between stacked BiLSTM layers.
        crf: Put an IOB2-constrained linear-chain CRF over the words.
    """

    fixed_options: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        label_names: Sequence[str],
        layers: LayerSpec = -1,
        combine: str = "concat",
        pool: str | None = None,
        dropout: float = 0.1,
        mlp: bool = False,
        mlp_hidden: int | None = None,
        activation: str = "tanh",
        lstm: bool = False,
        lstm_hidden: int = 768,
        lstm_layers: int = 2,
        lstm_dropout: float = 0.0,
        crf: bool = False,
    ) -> None:
        if pool is not None:
            raise ConfigError(
                f"head.pool={pool!r} makes no sense for a token task: every token is "
                "classified, nothing is pooled; set head.pool=null"
            )
        super().__init__(
            hidden_size,
            num_layers,
            len(label_names),
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
        )
        self.crf = CRF(len(label_names), *iob2_constraints(label_names)) if crf else None

    def forward(self, hidden_states: Sequence[Tensor], attention_mask: Tensor) -> Tensor:
        """Return per-token logits (B, T, C) from all hidden states ((L+1) x (B, T, H))."""
        states = self.select(hidden_states)  # (B, T, D)
        if self.lstm is not None:
            states, _ = self.lstm(states, attention_mask)  # (B, T, lstm_hidden)
        return self.classifier(states)  # (B, T, C)

    def loss(self, logits: Tensor, word_pos: Tensor, word_labels: Tensor) -> Tensor:
        """Mean loss per word: cross-entropy, or the CRF's negative log-likelihood.

        Args:
            logits: (B, T, C) from :meth:`forward`.
            word_pos: (B, W) first sub-token of each word, -1 where absent.
            word_labels: (B, W) gold tag ids (ignored where ``word_pos`` is -1).

        Returns:
            A scalar loss.
        """
        emissions, mask = gather_words(logits, word_pos)  # (B, W, C), (B, W)
        n_words = mask.sum().clamp(min=1)
        if self.crf is not None:
            return -self.crf.log_likelihood(emissions, word_labels, mask).sum() / n_words
        return F.cross_entropy(emissions[mask], word_labels[mask], reduction="sum") / n_words

    @torch.no_grad()
    def decode(self, logits: Tensor, word_pos: Tensor) -> Tensor:
        """Predicted tag id per word: argmax, or the CRF's Viterbi path.

        Args:
            logits: (B, T, C) from :meth:`forward`.
            word_pos: (B, W) first sub-token of each word, -1 where absent.

        Returns:
            (B, W) tag ids, -1 where the word has no sub-token.
        """
        emissions, mask = gather_words(logits, word_pos)
        if self.crf is None:
            return emissions.argmax(dim=-1).masked_fill(~mask, -1)
        out = torch.full(mask.shape, -1, dtype=torch.long, device=mask.device)
        for row, path in enumerate(self.crf.decode(emissions, mask)):
            out[row, : len(path)] = torch.tensor(path, dtype=torch.long)
        return out


class TokenLinearHead(TokenHead):
    """``linear``: dropout → linear on every token of the chosen layer(s)."""

    fixed_options: ClassVar[frozenset[str]] = _MLP_OPTIONS | _LSTM_OPTIONS

    def __init__(
        self, hidden_size: int, num_layers: int, label_names: Sequence[str], **options: Any
    ) -> None:
        super().__init__(hidden_size, num_layers, label_names, mlp=False, lstm=False, **options)


class TokenPoolerHead(TokenHead):
    """``pooler``: dense(H, H) → tanh → dropout → linear per token, randomly initialised.

    ``init: pretrained`` is refused: the checkpoint's pooler was trained on [CLS] for
    next-sentence prediction, not on tokens.
    """

    fixed_options: ClassVar[frozenset[str]] = frozenset({"mlp", "mlp_hidden"}) | _LSTM_OPTIONS

    def __init__(
        self,
        hidden_size: int,
        num_layers: int,
        label_names: Sequence[str],
        init: str = "random",
        **options: Any,
    ) -> None:
        if init != "random":
            raise ConfigError(
                f"head.init={init!r} makes no sense for a token task: the checkpoint's "
                "pooler was trained on [CLS] only; valid choice: random"
            )
        super().__init__(
            hidden_size,
            num_layers,
            label_names,
            mlp=True,
            mlp_hidden=hidden_size,
            lstm=False,
            **options,
        )


class TokenLast4ConcatHead(TokenHead):
    """``last4_concat``: the last four layers concatenated (4H) → linear, per token."""

    fixed_options: ClassVar[frozenset[str]] = _LSTM_OPTIONS

    def __init__(
        self, hidden_size: int, num_layers: int, label_names: Sequence[str], **options: Any
    ) -> None:
        options.setdefault("layers", [-4, -3, -2, -1])
        options.setdefault("combine", "concat")
        super().__init__(hidden_size, num_layers, label_names, lstm=False, **options)


class TokenBiLSTMHead(TokenHead):
    """``bilstm``: a 2-layer BiLSTM (768 wide) over the sub-tokens → linear per token."""

    fixed_options: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self, hidden_size: int, num_layers: int, label_names: Sequence[str], **options: Any
    ) -> None:
        super().__init__(hidden_size, num_layers, label_names, lstm=True, **options)


class TokenMeanLinearHead(TokenLinearHead):
    """``mean_linear``: on a token task nothing is pooled, so dropout → linear per token.

    The same module as ``linear``: a sweep over heads keeps the control's name on every task.
    """


TOKEN_HEADS: dict[str, type[TokenHead]] = {
    "linear": TokenLinearHead,
    "pooler": TokenPoolerHead,
    "last4_concat": TokenLast4ConcatHead,
    "bilstm": TokenBiLSTMHead,
    "mean_linear": TokenMeanLinearHead,
}


def build_token_head(
    cfg: dict[str, Any], hidden_size: int, num_layers: int, label_names: Sequence[str]
) -> TokenHead:
    """Build a token head from its config group.

    Args:
        cfg: The ``head`` config as a plain dict: ``name`` plus the head's options.
        hidden_size: Encoder width H.
        num_layers: Encoder depth L.
        label_names: The task's tag names.

    Returns:
        The head module.

    Raises:
        ConfigError: For an unknown head name, an option the head does not take, or an
            option that makes no sense for tokens (``pool``, ``init: pretrained``).
    """
    cls, options = head_options(
        cfg, TOKEN_HEADS, TokenHead, " on a token task", internal=frozenset({"lstm"})
    )
    return cls(hidden_size, num_layers, label_names, **options)
