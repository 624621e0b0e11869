"""The tuning budget in words: what every head was allowed before it was compared.

A verdict between heads is only fair when every head of a comparison had the same
budget: the same search (sampler, seed, number of trials, space), the same selection
(held-out slice or dev), the same maximum number of epochs and training data. This
module reads that budget from each cell's resolved config (``cells.json``), says it in
plain words, and flags a comparison whose heads did not share it (the device they trained
on is flagged by :mod:`bench.report.devices`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.data.selection import DEFAULT_CARVE
from bench.results.curves import size_key, size_text, whole_number

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
        selection_size: Examples in the held-out slice, as the cell's result recorded them
            (the configured ``selection.size`` where it recorded none; None on dev).
        max_epochs: The maximum number of epochs.
        train_size: Training examples (None: the whole training split).
        carve: Where a held-out slice was carved (``selection.carve``): ``last`` from what
            the training subset left, ``first`` before the subsets (one slice for every
            training size); None on dev.
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
    carve: str | None = None


def _family(freeze: str) -> str:
    return "frozen" if freeze == "frozen" else "finetune"


def _selection_size(mode: str, configured: dict[str, Any], recorded: dict[str, Any]) -> int | None:
    """Examples a cell's held-out slice had: what its result recorded, else the config's.

    The configured ``selection.size`` is a request: a training subset can leave fewer
    examples for the slice (RTE with 2,000 training examples selects on its other 490,
    docs/protocol.md), and the result records the size it used.

    Args:
        mode: ``heldout`` or ``dev``.
        configured: The cell config's ``selection``.
        recorded: The result's ``selection`` record (empty when it has none).

    Returns:
        The size, or None on dev or when neither says.
    """
    if mode != "heldout":
        return None
    size = recorded.get("size", configured.get("size"))
    return int(size) if size is not None else None


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
    recorded = record.get("selection")
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
        selection_size=_selection_size(
            mode, selection, recorded if isinstance(recorded, dict) else {}
        ),
        max_epochs=(config.get("trainer") or {}).get("max_epochs"),
        train_size=(config.get("data") or {}).get("train_size"),
        carve=str(selection.get("carve", DEFAULT_CARVE)) if mode == "heldout" else None,
    )


#: A setting whose heads must share one budget: task, encoder, freezing label, training
#: size (:data:`bench.results.stats.WHOLE_SPLIT` for the whole split).
Setting = tuple[str, str, str, int]


def _setting(record: dict[str, Any]) -> Setting:
    """(task, encoder, freeze_label, training size): the size of the cell, else its config's."""
    cell = record.get("cell") or {}
    data = (record.get("config") or {}).get("data") or {}
    size = cell.get("train_size", data.get("train_size"))
    return (
        str(cell.get("task")),
        str(cell.get("encoder")),
        str(cell.get("freeze_label")),
        whole_number(size),
    )


def budgets_by_setting(
    cells: Iterable[dict[str, Any]],
) -> dict[Setting, dict[Budget, set[str]]]:
    """Per (task, encoder, freeze_label, training size): each budget and the heads that had it."""
    out: dict[Setting, dict[Budget, set[str]]] = defaultdict(lambda: defaultdict(set))
    for record in cells:
        if not isinstance(record, dict):
            continue
        head = str((record.get("cell") or {}).get("head_label"))
        out[_setting(record)][cell_budget(record)].add(head)
    return {k: dict(v) for k, v in out.items()}


def unequal_settings(cells: Iterable[dict[str, Any]]) -> list[str]:
    """One line per setting whose heads did not share one budget (empty: all fair)."""
    lines = []
    budgets = budgets_by_setting(cells)
    sizes: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    for task, encoder, freeze, size in budgets:
        sizes[(task, encoder, freeze)].add(size)
    for (task, encoder, freeze, size), found in sorted(budgets.items()):
        if len(found) > 1:
            parts = "; ".join(
                f"{', '.join(sorted(heads))}: {describe_search(budget)}"
                for budget, heads in sorted(found.items(), key=lambda kv: sorted(kv[1]))
            )
            where = f"{task} / {encoder} / {freeze}"
            if len(sizes[(task, encoder, freeze)]) > 1:  # one size of a learning curve
                where += f" / {size_text(size)}"
            lines.append(f"{where}: unequal budgets ({parts})")
    return lines


def missing_heads(cells: Iterable[dict[str, Any]]) -> list[str]:
    """One line per setting that lacks heads other settings of the experiment have.

    A setting is a task, encoder, freezing strategy and training size; its verdict compares
    only the heads that ran there, which a reader of a partly run experiment must be told.

    Args:
        cells: Per-cell provenance records (``cell`` with ``task``, ``encoder``,
            ``head_label``, ``freeze_label``, ``train_size``).

    Returns:
        Lines such as ``cola / minilm / frozen: no bilstm cells (its verdict compares the
        other 4 heads)``; empty when every setting has every head.
    """
    heads: dict[tuple[str, str, str, Any], set[str]] = defaultdict(set)
    for c in cells:
        cell = c.get("cell") or {}
        key = (
            str(cell.get("task")),
            str(cell.get("encoder")),
            str(cell.get("freeze_label")),
            cell.get("train_size"),
        )
        heads[key].add(str(cell.get("head_label")))
    every = set().union(*heads.values()) if heads else set()
    sizes: dict[tuple[str, str, str], set[Any]] = defaultdict(set)
    for task, encoder, freeze, size in heads:
        sizes[(task, encoder, freeze)].add(size)
    lines = []
    for (task, encoder, freeze, size), found in sorted(
        heads.items(), key=lambda kv: (kv[0][:3], whole_number(kv[0][3]))
    ):
        absent = sorted(every - found)
        if not absent:
            continue
        where = f"{task} / {encoder} / {freeze}"
        if len(sizes[(task, encoder, freeze)]) > 1:  # one size of a learning curve
            where += f" / {size_text(size)}"
        others = f"the other {len(found)} heads" if len(found) > 1 else "one head"
        lines.append(f"{where}: no {', '.join(absent)} cells (its verdict compares {others})")
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
        first = (
            " before the training subsets were drawn, the same slice at every training size"
            if budget.carve == "first"
            else ""
        )
        chosen = "epoch" if budget.search == "none" else "epoch and trial"  # no trial to choose
        return (
            f"{chosen} chosen on {size} held out from train{first} (never on the "
            "reported split, which is scored once per selected model)"
        )
    return (
        "epoch chosen on dev, the split that is reported (selection=dev: optimistic, and it "
        "favours noisy heads)"
    )


def describe_training(budget: Budget, sizes: Sequence[int | None] = ()) -> str:
    """Epochs and training data in words.

    Args:
        budget: The budget.
        sizes: The training sizes of a learning curve that shares this budget otherwise
            (two or more: named together); else the budget's own ``train_size``.
    """
    if len(sizes) > 1:
        named = [f"{s:,}" if s else "the whole split" for s in sizes]
        data = f"{', '.join(named[:-1])} or {named[-1]} training examples (a learning curve)"
    elif budget.train_size:
        data = f"{budget.train_size:,} training examples"
    else:
        data = "the whole training split"
    epochs = f"at most {budget.max_epochs} epochs" if budget.max_epochs else "the default epochs"
    return f"{data}, {epochs}"


def budget_lines(cells: Iterable[dict[str, Any]]) -> list[str]:
    """One sentence per freezing strategy and budget: search, selection, training.

    Settings with the same freezing strategy and budget are described once, naming
    their tasks. Settings whose heads did not all train on one device are a caveat of their
    own (:func:`bench.report.devices.device_caveat`), shown beside these lines by the
    README and the report.

    Args:
        cells: ``cells.json`` records.

    Returns:
        Plain-text sentences (empty without cells).
    """
    # Budgets that differ only by training size are one learning curve: said once.
    grouped: dict[tuple[str, Budget], dict[str, set[int | None]]] = defaultdict(
        lambda: defaultdict(set)
    )
    for (task, _encoder, freeze, _size), found in budgets_by_setting(cells).items():
        for budget in found:
            grouped[(freeze, replace(budget, train_size=None))][task].add(budget.train_size)
    found_lines = []
    for (freeze, budget), by_task in grouped.items():
        curves: dict[tuple[int | None, ...], set[str]] = defaultdict(set)
        for task, task_sizes in by_task.items():
            curves[tuple(sorted(task_sizes, key=size_key))].add(task)
        for sizes, tasks in curves.items():
            own = replace(budget, train_size=sizes[0])
            found_lines.append(
                (
                    (freeze, sorted(tasks)),
                    f"{freeze} ({', '.join(sorted(tasks))}): {describe_search(own)}; "
                    f"{describe_selection(own)}; {describe_training(own, list(sizes))}.",
                )
            )
    return [line for _, line in sorted(found_lines, key=lambda kv: kv[0])]


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
        key = json.dumps([*_setting(record), (record.get("cell") or {}).get("head_label")])
        seen[key] = (float(search.get("train_time_s") or 0.0), len(search.get("scores") or {}))
    return sum(s for s, _ in seen.values()), sum(n for _, n in seen.values())
