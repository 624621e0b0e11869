"""The selection slice: examples held out from train to choose the epoch and the trial.

Selection is not reporting (DESIGN.md, "Evaluation protocol"): the best epoch and the best
hyperparameter trial are chosen on a slice carved from the training split, disjoint from
the examples the head trains on, so the reporting split (GLUE dev; CoNLL dev and test) is
evaluated once per selected model and never steers a choice.

The slice is drawn with a fixed seed (``data_seed``), independent of the training seed, so
every cell of a sweep (every head, trial and seed) selects on the same examples:

- ``carve: last`` (the default): with a training subset (``data.train_size``), the subset
  is drawn first exactly as without a selection slice
  (:func:`bench.data.sequence_datamodule.subset`), and the slice comes from the examples
  left over (at most ``size``: RTE with 2,000 training examples keeps its other 490, which
  the run logs and ``result.json``'s ``selection.size`` records, and a dry run lists where
  the training file is local: :func:`capped_size`); the slice therefore changes with the
  training size;
- ``carve: first`` (learning curves, :func:`carve_first`): the slice is drawn from the whole
  training split first, and every training subset is a prefix of one fixed permutation of
  the examples left: subsets of one task are nested, and every training size selects on the
  same slice, disjoint from all of them;
- with the whole training split, the slice is drawn first and the rest trains (both ways).

**One slice per seed** (``search.pairing: seed``, :func:`bench.cell.slice_seed`): the slice
is drawn from a stream of ``(data_seed, 1, seed)`` instead of ``(data_seed, 1)``, so each
seed selects on its own examples, still outside the fixed training subset. Where the
examples outside the subset are no more than ``size`` (RTE trained on 2,000 of its 2,490
keeps 490: every seed's slice would be the same 490), subset and slice are re-partitioned
per seed instead: the slice (as many examples as the subset leaves) is drawn, stratified,
from the whole split with that stream, and the other examples train, so both keep their
sizes but the training subset is no longer the same for every seed. ``result.json``'s
``selection`` records ``slice_seed`` and the slice's ids; ``data.n_train`` the subset size.

Classification slices are stratified by label (each class keeps its share, largest
remainders first), regression slices by quantile bins of the score, token-task slices
(sentences) are a plain random draw. Torch-free.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.errors import ConfigError

log = logging.getLogger(__name__)
#: The evaluation split name of the selection slice.
SELECTION_SPLIT = "select"
#: Selection modes: ``heldout`` (the slice above) and ``dev`` (the old behaviour: the epoch is
#: chosen on the reporting split itself, whose score is then optimistic; always marked).
MODES = ("heldout", "dev")
#: Quantile bins that stratify a regression slice (STS-B scores 0..5).
REGRESSION_BINS = 5
#: The smallest slice worth selecting on.
MIN_SIZE = 20
#: Where the slice is carved (``selection.carve``): ``last`` = from what the training subset
#: leaves (the default, as before the option existed), ``first`` = from the whole training
#: split, before the training subsets (one slice for every point of a learning curve).
CARVES = ("last", "first")
#: ``selection.carve`` when a config does not say (results made before the option).
DEFAULT_CARVE = CARVES[0]


def capped_size(n: int, train_size: int | None, size: int, carve: str = DEFAULT_CARVE) -> int:
    """The slice's size when a training subset leaves fewer than ``size`` examples, else ``size``.

    Only ``carve: last`` with a training subset caps the slice (the protocol: RTE trained on
    2,000 of its examples selects on the other 490); otherwise a slice that does not fit is an
    error (:func:`carve_selection`, :func:`carve_first`).

    Args:
        n: Examples in the training split.
        train_size: ``data.train_size`` (None: the whole split).
        size: ``selection.size``.
        carve: ``selection.carve``.

    Returns:
        The number of examples the slice will hold.
    """
    if train_size is None or carve != "last":
        return size
    return min(size, max(n - train_size, 0))


def capped_note(where: str, n: int, train_size: int, size: int) -> str:
    """Say that ``data.train_size`` leaves the slice fewer examples than ``selection.size``."""
    held = capped_size(n, train_size, size)
    return (
        f"selection.size={size} but data.train_size={train_size} leaves {held} of {where}'s "
        f"{n} examples: the selection slice holds {held}"
    )


def _strata(labels: Sequence[Any], stratify: str | None) -> np.ndarray:
    """One stratum id per example: its class, its score's quantile bin, or all one."""
    n = len(labels)
    if stratify == "class":
        _, ids = np.unique(np.asarray(labels), return_inverse=True)
        return np.asarray(ids).reshape(-1)
    if stratify == "bins":
        values = np.asarray(labels, dtype=float)
        edges = np.quantile(values, np.linspace(0, 1, REGRESSION_BINS + 1)[1:-1])
        return np.searchsorted(edges, values, side="right")
    return np.zeros(n, dtype=int)


def stratified_draw(
    candidates: np.ndarray, strata: np.ndarray, size: int, rng: np.random.Generator
) -> np.ndarray:
    """Draw ``size`` of ``candidates`` keeping each stratum's share (largest remainders).

    Args:
        candidates: Example indices to draw from.
        strata: Stratum id of every example (indexed by example index).
        size: How many to draw (at most ``len(candidates)``).
        rng: The random generator (a fixed seed).

    Returns:
        The drawn indices, sorted.
    """
    groups = strata[candidates]
    kinds, counts = np.unique(groups, return_counts=True)
    quota = counts * size / len(candidates)
    take = np.floor(quota).astype(int)
    short = size - int(take.sum())
    order = np.lexsort((kinds, -(quota - take)))  # largest remainder first, then stratum id
    take[order[:short]] += 1
    drawn = [
        rng.permutation(candidates[groups == kind])[:n]
        for kind, n in zip(kinds, take, strict=True)
        if n
    ]
    return np.sort(np.concatenate(drawn)) if drawn else np.zeros(0, dtype=int)


def carve_selection(
    labels: Sequence[Any],
    train: np.ndarray | None,
    size: int,
    seed: int,
    stratify: str | None,
    where: str,
    slice_seed: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Split a training split's examples into training examples and a selection slice.

    Args:
        labels: Every example's label (class id, score, or anything for token tasks).
        train: The training subset's indices when ``data.train_size`` drew one, else None.
        size: The slice's size; fewer when a training subset leaves fewer examples.
        seed: The data seed.
        stratify: ``"class"``, ``"bins"`` (regression) or None.
        where: The split, for messages (``"rte train"``).
        slice_seed: The cell's seed for a slice of its own (module docstring); None: one
            slice per data seed.

    Returns:
        ``(train indices, selection indices)``, both sorted and disjoint.

    Raises:
        ConfigError: When the slice would be smaller than :data:`MIN_SIZE`.
    """
    n = len(labels)
    _check_size(size)
    strata = _strata(labels, stratify)
    if train is None:
        return _slice_first(strata, size, seed, where, slice_seed)
    # A generator of its own (seed, 1): never the stream that drew the training subset.
    rng = _slice_rng(seed, slice_seed)
    rest = np.setdiff1d(np.arange(n), train)
    if len(rest) < MIN_SIZE:
        raise ConfigError(
            f"selection=heldout needs at least {MIN_SIZE} of {where}'s {n} examples outside "
            f"the training subset, but data.train_size={len(train)} leaves {len(rest)}; lower "
            f"data.train_size or use selection=dev"
        )
    if len(rest) < size:  # the protocol, but said: the slice is smaller than asked
        log.info(capped_note(where, n, len(train), size))
    if slice_seed is not None and len(rest) <= size:  # re-partitioned per seed (docstring)
        select = stratified_draw(np.arange(n), strata, len(rest), rng)
        return np.setdiff1d(np.arange(n), select), select
    return np.sort(train), stratified_draw(rest, strata, min(size, len(rest)), rng)


def _slice_rng(seed: int, slice_seed: int | None) -> np.random.Generator:
    """The slice's stream: ``(seed, 1)``, or ``(seed, 1, slice_seed)`` for a seed's own slice."""
    return np.random.default_rng([seed, 1] if slice_seed is None else [seed, 1, slice_seed])


def carve_first(
    labels: Sequence[Any],
    train_size: int | None,
    size: int,
    seed: int,
    stratify: str | None,
    where: str,
    slice_seed: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The slice first, from the whole split; then a training subset of what is left.

    The slice is the one :func:`carve_selection` draws without a training subset, so it is
    the same whatever ``train_size`` is; the training subset is the first ``train_size``
    examples of one fixed-seed permutation of the examples outside the slice, so the
    subsets of a learning curve are nested (a smaller one is inside every larger one).

    Args:
        labels: Every example's label (class id, score, or anything for token tasks).
        train_size: ``data.train_size``; None trains on every example outside the slice.
        size: The slice's size.
        seed: The data seed.
        stratify: ``"class"``, ``"bins"`` (regression) or None.
        where: The split, for messages (``"rte train"``).
        slice_seed: The cell's seed for a slice of its own; the subsets are then nested
            within that seed only.

    Returns:
        ``(train indices, selection indices)``, both sorted and disjoint.

    Raises:
        ConfigError: For a slice below :data:`MIN_SIZE`, or a ``train_size`` that is not a
            positive integer or exceeds the examples outside the slice (naming the maximum).
    """
    _check_size(size)
    n = len(labels)
    rest, select = _slice_first(_strata(labels, stratify), size, seed, where, slice_seed)
    if train_size is None:
        return rest, select
    if isinstance(train_size, bool) or not isinstance(train_size, int) or train_size < 1:
        raise ConfigError(f"data.train_size={train_size!r}: must be a positive integer or null")
    if train_size > len(rest):
        raise ConfigError(
            f"data.train_size={train_size} but {where} has {n} examples and selection.carve="
            f"first holds out {len(select)} of them first: at most {len(rest)} remain to train "
            f"on (valid: 1..{len(rest)}); lower data.train_size or selection.size"
        )
    # A stream of its own (seed, 2): neither the slice's nor carve=last's subset's.
    order = np.random.default_rng([seed, 2]).permutation(rest)
    return np.sort(order[:train_size]), select


def _check_size(size: object) -> None:
    """``selection.size`` is an integer of at least :data:`MIN_SIZE`."""
    if isinstance(size, bool) or not isinstance(size, int) or size < MIN_SIZE:
        raise ConfigError(f"selection.size={size!r}: must be an integer >= {MIN_SIZE}")


def _slice_first(
    strata: np.ndarray, size: int, seed: int, where: str, slice_seed: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The slice drawn from the whole split, and every other example (both sorted)."""
    n = len(strata)
    if n - size < MIN_SIZE:
        raise ConfigError(
            f"selection.size={size} leaves {max(n - size, 0)} of {where}'s {n} examples "
            f"to train on (at least {MIN_SIZE} needed); lower selection.size or use "
            f"selection=dev"
        )
    everything = np.arange(n)
    select = stratified_draw(everything, strata, size, _slice_rng(seed, slice_seed))
    return np.setdiff1d(everything, select), select
