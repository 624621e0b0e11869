"""A linear-chain CRF whose transitions are constrained to valid IOB2 sequences.

Written here rather than taken from a package: the usual one (``pytorch-crf``) has had
no release since 2019, needs the first position of every row unmasked, and has no hard
transition constraints. Constraints are added as ``-inf`` to the learned scores, so the
forward algorithm and Viterbi only ever see valid paths: a decoded path never has
``I-X`` after ``O``, after another type, or at the start. Tests check the
log-likelihood and Viterbi against brute-force enumeration.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


def iob2_constraints(label_names: Sequence[str]) -> tuple[Tensor, Tensor]:
    """Which transitions and start tags IOB2 allows.

    Args:
        label_names: Tag names (``O``, ``B-X``, ``I-X``).

    Returns:
        ``(allowed, allowed_start)``: (C, C) bool, ``allowed[i, j]`` is True when tag
        j may follow tag i; (C,) bool, True when a sentence may start with the tag.
    """
    n = len(label_names)
    allowed = torch.ones(n, n, dtype=torch.bool)
    start = torch.ones(n, dtype=torch.bool)
    for j, tag in enumerate(label_names):
        if not tag.startswith("I-"):
            continue
        start[j] = False
        kind = tag[2:]
        for i, prev in enumerate(label_names):
            allowed[i, j] = prev in (f"B-{kind}", f"I-{kind}")
    return allowed, start


class CRF(nn.Module):
    """Linear-chain CRF over per-word emissions, with optional hard constraints.

    Rows may be empty (length 0); lengths come from a right-padded mask.

    Args:
        num_tags: Number of tags C.
        allowed: (C, C) bool, transitions that may occur; None allows all.
        allowed_start: (C,) bool, tags a sequence may start with; None allows all.
    """

    transition_mask: Tensor  # (T, T) buffer: -inf where a transition is not allowed
    start_mask: Tensor  # (T,) buffer: -inf where a tag cannot start a sentence

    def __init__(
        self, num_tags: int, allowed: Tensor | None = None, allowed_start: Tensor | None = None
    ) -> None:
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))
        if allowed is None:
            allowed = torch.ones(num_tags, num_tags, dtype=torch.bool)
        if allowed_start is None:
            allowed_start = torch.ones(num_tags, dtype=torch.bool)
        inf = float("-inf")
        self.register_buffer(
            "transition_mask", torch.zeros(num_tags, num_tags).masked_fill(~allowed, inf)
        )
        self.register_buffer("start_mask", torch.zeros(num_tags).masked_fill(~allowed_start, inf))

    def _scores(self) -> tuple[Tensor, Tensor]:
        return self.transitions + self.transition_mask, self.start + self.start_mask

    def log_likelihood(self, emissions: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        """Log-probability of the gold paths.

        Args:
            emissions: (B, W, C) scores per word and tag.
            tags: (B, W) gold tag ids (any value where masked).
            mask: (B, W) bool, right-padded.

        Returns:
            (B,) log-likelihoods; 0 for empty rows.
        """
        return self._gold_score(emissions, tags, mask) - self._log_partition(emissions, mask)

    def _gold_score(self, emissions: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        transitions, start = self._scores()
        tags = tags.masked_fill(~mask, 0)  # (B, W)
        emitted = emissions.gather(-1, tags.unsqueeze(-1)).squeeze(-1)  # (B, W)
        moves = transitions[tags[:, :-1], tags[:, 1:]]  # (B, W-1)
        zero = emitted.new_zeros(())
        score = start[tags[:, 0]] + emitted[:, 0]
        score = score + torch.where(mask[:, 1:], moves + emitted[:, 1:], zero).sum(dim=1)
        lengths = mask.sum(dim=1)
        last = tags.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)  # (B,)
        score = score + self.end[last]
        return torch.where(lengths > 0, score, zero)

    def _log_partition(self, emissions: Tensor, mask: Tensor) -> Tensor:
        transitions, start = self._scores()
        alpha = start + emissions[:, 0]  # (B, C)
        for t in range(1, emissions.shape[1]):
            # (B, C_prev, 1) + (C_prev, C_next) -> logsumexp over C_prev -> (B, C_next)
            step = torch.logsumexp(alpha.unsqueeze(2) + transitions, dim=1) + emissions[:, t]
            alpha = torch.where(mask[:, t].unsqueeze(1), step, alpha)
        log_z = torch.logsumexp(alpha + self.end, dim=1)  # (B,)
        return torch.where(mask.sum(dim=1) > 0, log_z, log_z.new_zeros(()))

    @torch.no_grad()
    def decode(self, emissions: Tensor, mask: Tensor) -> list[list[int]]:
        """Viterbi: the highest-scoring allowed path of each row.

        Args:
            emissions: (B, W, C) scores per word and tag.
            mask: (B, W) bool, right-padded.

        Returns:
            One list of tag ids per row, as long as the row's mask.
        """
        transitions, start = self._scores()
        score = start + emissions[:, 0]  # (B, C)
        history = []
        for t in range(1, emissions.shape[1]):
            best, index = (score.unsqueeze(2) + transitions).max(dim=1)  # (B, C_next)
            history.append(index)
            score = torch.where(mask[:, t].unsqueeze(1), best + emissions[:, t], score)
        last = (score + self.end).argmax(dim=1).tolist()
        lengths = mask.sum(dim=1).tolist()
        paths: list[list[int]] = []
        for row, length in enumerate(lengths):
            if length == 0:
                paths.append([])
                continue
            path = [last[row]]
            for t in range(length - 1, 0, -1):
                path.append(int(history[t - 1][row, path[-1]]))
            paths.append(path[::-1])
        return paths
