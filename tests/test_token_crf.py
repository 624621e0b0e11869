"""The IOB2-constrained CRF against brute-force enumeration of every tag path."""

from __future__ import annotations

import itertools

import pytest
import torch

from bench.data.conll import is_valid_iob2
from bench.model.heads.crf import CRF, iob2_constraints

NAMES = ("O", "B-A", "I-A", "B-B", "I-B")
C = len(NAMES)


def random_crf(seed: int, constrained: bool = True) -> CRF:
    crf = CRF(C, *iob2_constraints(NAMES)) if constrained else CRF(C)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in (crf.transitions, crf.start, crf.end):
            param.copy_(torch.randn(param.shape, generator=gen))
    return crf


def path_score(crf: CRF, emissions: torch.Tensor, path: tuple[int, ...]) -> float:
    """Score of one path, straight from the definition (constraints as -inf)."""
    allowed, start_ok = iob2_constraints(NAMES)
    constrained = crf.transition_mask.isinf().any()
    if constrained and (
        not start_ok[path[0]] or any(not allowed[a, b] for a, b in itertools.pairwise(path))
    ):
        return float("-inf")
    score = crf.start[path[0]] + emissions[0, path[0]] + crf.end[path[-1]]
    for t in range(1, len(path)):
        score = score + crf.transitions[path[t - 1], path[t]] + emissions[t, path[t]]
    return float(score)


@torch.no_grad()
def brute_force(crf: CRF, emissions: torch.Tensor) -> tuple[float, tuple[int, ...]]:
    scores = {
        p: path_score(crf, emissions, p) for p in itertools.product(range(C), repeat=len(emissions))
    }
    log_z = torch.logsumexp(torch.tensor(list(scores.values()), dtype=torch.float64), dim=0)
    return float(log_z), max(scores, key=scores.get)


def test_constraints_are_iob2():
    allowed, start = iob2_constraints(NAMES)
    assert start.tolist() == [True, True, False, True, False]
    assert allowed[NAMES.index("B-A"), NAMES.index("I-A")]
    assert allowed[NAMES.index("I-A"), NAMES.index("I-A")]
    assert not allowed[NAMES.index("O"), NAMES.index("I-A")]
    assert not allowed[NAMES.index("B-B"), NAMES.index("I-A")]
    assert allowed[NAMES.index("I-B"), NAMES.index("B-A")]


@pytest.mark.parametrize("constrained", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_log_likelihood_and_viterbi_match_brute_force(seed, constrained):
    crf = random_crf(seed, constrained).double()
    gen = torch.Generator().manual_seed(100 + seed)
    lengths = [4, 1, 3, 0]
    emissions = torch.randn(len(lengths), 4, C, generator=gen, dtype=torch.float64) * 2
    mask = torch.tensor([[t < n for t in range(4)] for n in lengths])
    gold = torch.tensor([[1, 2, 0, 3], [3, -100, -100, -100], [0, 1, 2, -100], [-100] * 4])
    ll = crf.log_likelihood(emissions, gold, mask)
    paths = crf.decode(emissions, mask)
    for row, n in enumerate(lengths):
        if n == 0:
            assert ll[row] == 0 and paths[row] == []
            continue
        log_z, best = brute_force(crf, emissions[row, :n])
        with torch.no_grad():
            expected = path_score(crf, emissions[row, :n], tuple(gold[row, :n].tolist())) - log_z
        assert float(ll[row]) == pytest.approx(expected, abs=1e-9)
        assert tuple(paths[row]) == best


def test_gradients_are_finite_with_constraints():
    crf = random_crf(0)
    emissions = torch.randn(3, 5, C, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    gold = torch.tensor([[1, 2, 2, 0, 3], [0, 3, 0, 0, 0], [0, 0, 0, 0, 0]])
    loss = -crf.log_likelihood(emissions, gold, mask).sum()
    loss.backward()
    for grad in (emissions.grad, crf.transitions.grad, crf.start.grad, crf.end.grad):
        assert torch.isfinite(grad).all()


def test_decoded_paths_are_always_valid_iob2():
    """Emissions that scream for invalid tags (I-X first, I-A after B-B) still decode validly."""
    crf = random_crf(3)
    gen = torch.Generator().manual_seed(7)
    emissions = torch.randn(64, 9, C, generator=gen) * 5
    emissions[:, :, [2, 4]] += 20.0  # I-A and I-B dominate every position
    lengths = torch.randint(0, 10, (64,), generator=gen)
    mask = torch.arange(9).unsqueeze(0) < lengths.unsqueeze(1)
    for path, n in zip(crf.decode(emissions, mask), lengths.tolist(), strict=True):
        assert len(path) == n
        assert is_valid_iob2([NAMES[t] for t in path])
