"""The tuning budget in words: what every head was allowed before it was compared.

A verdict between heads is only fair when every head of a comparison had the same
budget: the same search (sampler, seed, number of trials, space), the same selection
(held-out slice or dev), the same maximum number of epochs and training data. This
module reads that budget from each cell's resolved config (``cells.json``), says it in
plain words, and flags a comparison whose heads did not share it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Optimiser settings named when a sweep ran without a search (the fixed configuration).
FIXED_OPTIM_KEYS = ("encoder_lr", "head_lr", "frozen_head_lr", "weight_decay", "warmup_ratio")


@dataclass(frozen=True)
class Budget:
    """What one cell was allowed: its search, selection, epochs and training data.

    Attributes:
        search: ``"none"`` or the search's name (``"random"``).
        sampler: The sampler that drew the trials (None without a search).
        trials: Trials per setting (0 without a search).
        seed: The seed that drew the trials (None without a search).
        space: The searched values per key, for the cell's freezing family.
        fixed: Without a search, the fixed optimiser values every head trained with.
        selection: ``"heldout"`` (a slice of train) or ``"dev"`` (the reported split).
        selection_size: Examples in the held-out slice (None on dev).
        max_epochs: The maximum number of epochs.
        train_size: Training examples (None: the whole training split).
    """

    search: str
    sampler: str | None
    trials: int
    seed: int | None
    space: tuple[tuple[str, tuple[Any, ...]], ...]
    fixed: tuple[tuple[str, Any], ...]
    selection: str
    selection_size: int | None
    max_epochs: int | None
    train_size: int | None


def _family(freeze: str) -> str:
    return "frozen" if freeze == "frozen" else "finetune"


def cell_budget(record: dict[str, Any]) -> Budget:
    """The budget of one ``cells.json`` record (older results: no search, dev selection).

    Args:
        record: A provenance record (:func:`bench.results.run_records.provenance_records`).

    Returns:
        The cell's :class:`Budget`.
    """
    config = record.get("config") or {}
    cell = record.get("cell") or {}
    search = config.get("search") or {}
    searched = str(search.get("name", "none")) != "none" and int(search.get("trials") or 0) > 0
    family = _family(str((config.get("freeze") or {}).get("name", cell.get("freeze", ""))))
    space = ((search.get("space") or {}).get(family) or {}) if searched else {}
    optim = config.get("optim") or {}
    selection = config.get("selection") or {}
    mode = str(selection.get("name", "dev"))
    # The selected trial's values are in `optim`; only an unsearched cell's are its budget.
    fixed = () if searched else tuple((k, optim[k]) for k in FIXED_OPTIM_KEYS if k in optim)
    return Budget(
        search=str(search.get("name", "none")) if searched else "none",
        sampler=str(search.get("sampler", "random_grid")) if searched else None,
        trials=int(search.get("trials") or 0) if searched else 0,
        seed=int(search["seed"]) if searched and search.get("seed") is not None else None,
        space=tuple((str(k), tuple(v)) for k, v in space.items()),
        fixed=fixed,
        selection=mode,
        selection_size=int(selection["size"])
        if mode == "heldout" and "size" in selection
        else None,
        max_epochs=(config.get("trainer") or {}).get("max_epochs"),
        train_size=(config.get("data") or {}).get("train_size"),
    )


def _setting(record: dict[str, Any]) -> tuple[str, str, str]:
    cell = record.get("cell") or {}
    return (str(cell.get("task")), str(cell.get("encoder")), str(cell.get("freeze_label")))


def budgets_by_setting(
    cells: Iterable[dict[str, Any]],
) -> dict[tuple[str, str, str], dict[Budget, set[str]]]:
    """Per (task, encoder, freeze_label): each distinct budget and the heads that had it."""
    out: dict[tuple[str, str, str], dict[Budget, set[str]]] = defaultdict(lambda: defaultdict(set))
    for record in cells:
        if not isinstance(record, dict):
            continue
        head = str((record.get("cell") or {}).get("head_label"))
        out[_setting(record)][cell_budget(record)].add(head)
    return {k: dict(v) for k, v in out.items()}


def unequal_settings(cells: Iterable[dict[str, Any]]) -> list[str]:
    """One line per setting whose heads did not share one budget (empty: all fair)."""
    lines = []
    for (task, encoder, freeze), found in sorted(budgets_by_setting(cells).items()):
        if len(found) > 1:
            parts = "; ".join(
                f"{', '.join(sorted(heads))}: {describe_search(budget)}"
                for budget, heads in sorted(found.items(), key=lambda kv: sorted(kv[1]))
            )
            lines.append(f"{task} / {encoder} / {freeze}: unequal budgets ({parts})")
    return lines


def _values(values: tuple[Any, ...]) -> str:
    return "{" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values) + "}"


def describe_search(budget: Budget) -> str:
    """The search part of a budget in words."""
    if budget.search == "none":
        fixed = ", ".join(
            f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in budget.fixed
        )
        return f"no tuning: one fixed configuration ({fixed or 'the optim defaults'})"
    space = " × ".join(f"{k} ∈ {_values(v)}" for k, v in budget.space)
    trials = f"{budget.trials} trial{'s' if budget.trials != 1 else ''}"
    return (
        f"{trials} drawn once from {space} (sampler {budget.sampler}, seed {budget.seed}): "
        "the same configurations for every head"
    )


def describe_selection(budget: Budget) -> str:
    """The selection part of a budget in words."""
    if budget.selection == "heldout":
        size = f"{budget.selection_size:,} examples" if budget.selection_size else "a slice"
        return (
            f"epoch and trial chosen on {size} held out from train (never on the reported "
            "split, which is scored once per selected model)"
        )
    return (
        "epoch chosen on dev, the split that is reported (selection=dev: optimistic, and it "
        "favours noisy heads)"
    )


def describe_training(budget: Budget) -> str:
    """Epochs and training data in words."""
    data = (
        f"{budget.train_size:,} training examples"
        if budget.train_size
        else "the whole training split"
    )
    epochs = f"at most {budget.max_epochs} epochs" if budget.max_epochs else "the default epochs"
    return f"{data}, {epochs}"


def budget_lines(cells: Iterable[dict[str, Any]]) -> list[str]:
    """One sentence per freezing strategy and budget: search, selection, training.

    Settings with the same freezing strategy and budget are described once, naming
    their tasks.

    Args:
        cells: ``cells.json`` records.

    Returns:
        Plain-text sentences (empty without cells).
    """
    grouped: dict[tuple[str, Budget], set[str]] = defaultdict(set)
    for (task, _encoder, freeze), found in budgets_by_setting(cells).items():
        for budget in found:
            grouped[(freeze, budget)].add(task)
    lines = []
    for (freeze, budget), tasks in sorted(
        grouped.items(), key=lambda kv: (kv[0][0], sorted(kv[1]))
    ):
        lines.append(
            f"{freeze} ({', '.join(sorted(tasks))}): {describe_search(budget)}; "
            f"{describe_selection(budget)}; {describe_training(budget)}."
        )
    return lines


def dev_selected(cells: Iterable[dict[str, Any]]) -> int:
    """How many cells chose their epoch on the reported split (``selection=dev``)."""
    return sum(1 for c in cells if isinstance(c, dict) and cell_budget(c).selection == "dev")


def tuning_seconds(cells: Iterable[dict[str, Any]]) -> tuple[float, int]:
    """Wall seconds spent on search trials, and the trial trainings counted.

    Trials are shared by a setting's seeds, so each head's search is counted once.
    """
    seen: dict[str, tuple[float, int]] = {}
    for record in cells:
        search = record.get("search") if isinstance(record, dict) else None
        if not isinstance(search, dict):
            continue
        cell = record.get("cell") or {}
        key = json.dumps([cell.get(k) for k in ("task", "encoder", "head_label", "freeze_label")])
        seen[key] = (float(search.get("train_time_s") or 0.0), len(search.get("scores") or {}))
    return sum(s for s, _ in seen.values()), sum(n for _, n in seen.values())
