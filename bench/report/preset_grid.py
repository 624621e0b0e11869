"""What an experiment preset sweeps that its results do not hold yet.

A reference experiment on a GPU runs in parts (``freeze=frozen`` first, then fine-tuning),
each launch narrowing the preset's sweep on the command line. The launch log plans only what
was launched, so a results README built between parts would describe the parts that ran as
if they were the experiment. This module reads the preset named by the newest launch
(``experiment=<name>`` → ``conf/experiment/<name>.yaml``) and expands its sweep with the
sweeper's own expansion (:func:`bench.axes.sweep.expand`, Hydra's override grammar), with no
command line: the preset's whole grid. :func:`grid_progress` matches each of its cells with
the results (by task, encoder, head, freezing strategy, seed, order seed and training size)
and says which settings lack heads or seeds; where a preset sweeps something the results
table cannot tell apart (a layer selection), :func:`unrun_values` names each value of a
results axis that no cell has yet instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from bench.axes.sweep import expand
from bench.errors import ConfigError
from bench.paths import config_dir
from bench.results.curves import size_text, whole_number
from bench.results.studies import preset_of

#: Sweep keys whose values are a column of the results table, in the order shown.
AXES = ("task", "encoder", "head", "freeze", "seed")
#: Sweep keys that identify a cell in the results table: sweep key -> table column.
CELL_KEYS = {
    "task": "task",
    "encoder": "encoder",
    "freeze": "freeze",
    "data.train_size": "train_size",
    "head": "head",
    "seed": "seed",
    "order_seed": "order_seed",
}
#: Of :data:`CELL_KEYS`, those that vary within a setting (its heads and their runs).
_WITHIN = ("head", "seed", "order_seed")
#: Of :data:`CELL_KEYS`, the whole numbers (compared as integers).
_NUMBERS = ("seed", "order_seed", "data.train_size")


def _sweep_layers(preset: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]] | None:
    """A preset's ``hydra.sweeper`` ``params`` and ``grids`` (None: it sweeps nothing)."""
    sweeper = OmegaConf.select(OmegaConf.load(preset), "hydra.sweeper", default=None)
    if sweeper is None:
        return None
    params = sweeper.get("params")
    grids = sweeper.get("grids") or []
    return (
        OmegaConf.to_container(params, resolve=False) if params else None,  # type: ignore[return-value]
        [OmegaConf.to_container(grid, resolve=False) for grid in grids],  # type: ignore[misc]
    )


def swept_values(preset: Path) -> dict[str, list[str]]:
    """Per results axis, every value a preset's sweep gives it (its params and grids).

    Args:
        preset: ``conf/experiment/<name>.yaml``.

    Returns:
        Axis -> values in the preset's order; only the axes of :data:`AXES` it sweeps.
    """
    layers = _sweep_layers(preset)
    if layers is None:
        return {}
    params, grids = layers
    parser = OverridesParser.create()
    values: dict[str, list[str]] = {}
    for layer in [*([params] if params else []), *grids]:
        lines = [f"{key}={value}" for key, value in layer.items() if key in AXES]
        for override in parser.parse_overrides(lines):
            key = override.get_key_element()
            found = (
                list(override.sweep_string_iterator())
                if override.is_sweep_override()
                else [override.get_value_element_as_str()]
            )
            values.setdefault(key, [])
            values[key] += [v for v in found if v not in values[key]]
    return {key: values[key] for key in AXES if key in values}


def preset_cells(preset: Path) -> list[dict[str, str]] | None:
    """Every cell of a preset's whole grid, as its values of :data:`CELL_KEYS`.

    The grid is what the sweeper launches for ``experiment=<name>`` with nothing else on
    the command line (:func:`bench.axes.sweep.expand`: the union of the grids' products).

    Args:
        preset: ``conf/experiment/<name>.yaml``.

    Returns:
        One mapping per cell, sweep key -> value as the sweep spells it (``null`` for the
        whole training split), in the sweep's order; None when the preset sweeps nothing,
        sweeps something the results table cannot tell apart (two of its cells would look
        the same there, e.g. two layer selections of one head), or sweeps an interval.
    """
    layers = _sweep_layers(preset)
    if layers is None:
        return None
    params, grids = layers
    try:
        jobs = expand(OverridesParser.create(), params, grids, [])
    except ConfigError:  # a sweep no launch could run either (an interval)
        return None
    cells: list[dict[str, str]] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for job in jobs:
        pairs = (line.split("=", 1) for line in job)
        cell = {key: value for key, value in pairs if key in CELL_KEYS}
        key = tuple(sorted(cell.items()))
        if key in seen:
            return None
        seen.add(key)
        cells.append(cell)
    return cells


def _cell_value(key: str, value: object) -> str | None:
    """A sweep or table value in one spelling (whole numbers as integers; None: unreadable)."""
    if key not in _NUMBERS:
        return str(value)
    if key == "data.train_size" and (value is None or str(value) in ("null", "None", "")):
        return str(whole_number(None))
    try:
        return str(whole_number(int(float(str(value)))))
    except ValueError:
        return None


@dataclass(frozen=True)
class GridProgress:
    """How much of a preset's whole grid has a result.

    Attributes:
        name: The preset (``conf/experiment/<name>.yaml``).
        total: Cells in its whole grid.
        done: Those with a cell in the results (whatever its status).
        missing: Per setting with cells missing, its label (``rte / full``) and what is
            missing (``no cell``; ``no bilstm cells, and pooler-random has 7 of 10 seeds``),
            in the sweep's order.
    """

    name: str
    total: int
    done: int
    missing: tuple[tuple[str, str], ...]

    @property
    def complete(self) -> bool:
        """Whether every cell of the grid has a result."""
        return self.done >= self.total


def _head_names(table: pd.DataFrame) -> dict[str, str]:
    """Head name -> its label in the results where one label stands for it (``pooler``)."""
    if "head_label" not in table or "head" not in table:
        return {}
    pairs = table[["head", "head_label"]].dropna().drop_duplicates()
    labels = pairs.groupby("head")["head_label"].unique()
    return {str(h): str(found[0]) for h, found in labels.items() if len(found) == 1}


def _setting_label(cell: Mapping[str, str]) -> str:
    parts = [cell[key] for key in ("task", "encoder", "freeze") if key in cell]
    if "data.train_size" in cell:
        parts.append(size_text(int(cell["data.train_size"])))
    return " / ".join(parts)


def _listed(names: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _what_is_missing(
    cells: Sequence[Mapping[str, str]], present: Sequence[bool], names: Mapping[str, str]
) -> str:
    """One setting's missing cells in words (``""`` when none is missing).

    Args:
        cells: The setting's preset cells.
        present: Whether each has a result.
        names: Head name -> label (:func:`_head_names`).

    Returns:
        ``no cell``; ``no bilstm or mean_linear cells, and pooler-random has 7 of 10
        seeds``; ``4 of 10 seeds`` (a preset that sweeps no head); or ``""``.
    """
    if not any(present):
        return "no cell"
    if all(present):
        return ""
    varying = {k for k in ("seed", "order_seed") if len({c.get(k) for c in cells}) > 1}
    unit = "seeds" if varying == {"seed"} else "runs"
    if not any("head" in cell for cell in cells):
        return f"{sum(present)} of {len(present)} {unit}"
    by_head: dict[str, list[bool]] = {}
    for cell, has in zip(cells, present, strict=True):
        by_head.setdefault(cell.get("head", ""), []).append(has)
    absent = [names.get(h, h) for h, found in by_head.items() if not any(found)]
    fewer = [
        f"{names.get(h, h)} has {sum(found)} of {len(found)} {unit}"
        for h, found in by_head.items()
        if any(found) and not all(found)
    ]
    parts = ([f"no {_listed(absent)} cells"] if absent else []) + fewer
    return ", and ".join(parts)


def _present(table: pd.DataFrame, cells: Sequence[Mapping[str, str]]) -> list[bool] | None:
    """Whether each preset cell has a row in ``table`` (None: a value cannot be compared).

    A cell is compared on the keys its grid sets; the table's columns must hold them all.
    """
    ran: dict[tuple[str, ...], set[tuple[str | None, ...]]] = {}
    present = []
    for cell in cells:
        keys = tuple(k for k in CELL_KEYS if k in cell)
        if any(CELL_KEYS[k] not in table for k in keys):
            return None
        if keys not in ran:
            rows = table[[CELL_KEYS[k] for k in keys]].drop_duplicates()
            ran[keys] = {
                tuple(_cell_value(k, v) for k, v in zip(keys, row, strict=True))
                for row in rows.itertuples(index=False)
            }
        wanted = tuple(_cell_value(k, cell[k]) for k in keys)
        if None in wanted:
            return None
        present.append(wanted in ran[keys])
    return present


def grid_progress(
    table: pd.DataFrame, command: str, conf_dir: Path | None = None
) -> GridProgress | None:
    """How much of the newest launch's preset has a result, setting by setting.

    Args:
        table: The results table (normalised: columns ``task``, ``encoder``, ``head``,
            ``freeze``, ``seed``, ``order_seed``, ``train_size``; ``head_label`` names
            the heads where it can).
        command: The newest launch's command line.
        conf_dir: The Hydra config tree holding ``experiment/<name>.yaml``
            (default: :func:`bench.paths.config_dir`).

    Returns:
        The progress; None when the command names no preset, the preset is not in
        ``conf_dir``, or its cells cannot be told apart in the results
        (:func:`preset_cells`).
    """
    name = preset_of(command)
    if name is None:
        return None
    preset = (conf_dir or config_dir()) / "experiment" / f"{name}.yaml"
    if not preset.is_file():
        return None
    cells = preset_cells(preset)
    if cells is None:
        return None
    present = _present(table, cells)
    if present is None:
        return None
    settings: dict[str, list[int]] = {}
    for i, cell in enumerate(cells):
        outer = {k: v for k, v in cell.items() if k not in _WITHIN}
        if "data.train_size" in outer:
            outer["data.train_size"] = str(_cell_value("data.train_size", outer["data.train_size"]))
        settings.setdefault(_setting_label(outer), []).append(i)
    names = _head_names(table)
    missing = []
    for label, indices in settings.items():
        text = _what_is_missing([cells[i] for i in indices], [present[i] for i in indices], names)
        if text:
            missing.append((label, text))
    return GridProgress(name, len(cells), sum(present), tuple(missing))


def missing_text(progress: GridProgress) -> str:
    """The settings of a partial grid and what each lacks; settings alike are named together.

    Returns:
        ``sst2 / full, mrpc / full: no cell; rte / full: no bilstm cells, and pooler-random
        has 7 of 10 seeds`` (``""`` when nothing is missing).
    """
    grouped: dict[str, list[str]] = {}
    for label, what in progress.missing:
        grouped.setdefault(what, []).append(label)
    return "; ".join(f"{', '.join(labels)}: {what}" for what, labels in grouped.items())


def progress_text(progress: GridProgress, planned: int | None = None) -> str:
    """A partial grid in words (plain text, no final full stop).

    Args:
        progress: :func:`grid_progress`.
        planned: Cells the launches so far planned (said where fewer than the grid's).

    Returns:
        ``267 of the 500 cells of the preset conf/experiment/fair_heads_gpu.yaml have a
        result (its launches so far planned 450); missing: sst2 / full: no cell; ...``.
    """
    text = (
        f"{progress.done} of the {progress.total} cells of the preset "
        f"conf/experiment/{progress.name}.yaml have a result"
    )
    if planned is not None and 0 < planned < progress.total:
        text += f" (its launches so far planned {planned})"
    missing = missing_text(progress)
    return text + (f"; missing: {missing}" if missing else "")


def partial_sentence(
    table: pd.DataFrame, command: str, planned: int | None = None, conf_dir: Path | None = None
) -> str:
    """One sentence saying that an experiment is partial ("" when its grid is whole or unknown).

    Args:
        table: The results table (see :func:`grid_progress`).
        command: The newest launch's command line.
        planned: Cells the launches so far planned (:func:`progress_text`).
        conf_dir: The Hydra config tree (default: :func:`bench.paths.config_dir`).

    Returns:
        ``Partial experiment: 267 of the 500 cells of the preset ... have a result; ...``.
    """
    progress = grid_progress(table, command, conf_dir)
    if progress is None or progress.complete:
        return ""
    return f"Partial experiment: {progress_text(progress, planned)}."


def unrun_values(
    table: pd.DataFrame, command: str, conf_dir: Path | None = None
) -> tuple[str | None, dict[str, list[str]]]:
    """The values the newest launch's preset sweeps that no cell of ``table`` has.

    Args:
        table: The results table (columns ``task``, ``encoder``, ``head``, ``freeze``,
            ``seed``).
        command: The newest launch's command line.
        conf_dir: The Hydra config tree holding ``experiment/<name>.yaml``
            (default: :func:`bench.paths.config_dir`).

    Returns:
        The preset's name (None when the command names none, or it is not in
        ``conf_dir``) and, per axis, its values without a cell (empty when all ran).
    """
    name = preset_of(command)
    preset = (conf_dir or config_dir()) / "experiment" / f"{name}.yaml"
    if name is None or not preset.is_file():
        return None, {}
    missing = {}
    for axis, wanted in swept_values(preset).items():
        if axis not in table:
            continue
        ran = {str(v) for v in table[axis].dropna().unique()}
        absent = [v for v in wanted if v not in ran]
        if absent:
            missing[axis] = absent
    return name, missing


def unrun_text(
    table: pd.DataFrame, command: str, conf_dir: Path | None = None, planned: int | None = None
) -> str:
    """What the preset sweeps that has no result yet, in words; empty when nothing is missing.

    Where the preset's grid can be matched with the results (:func:`grid_progress`), the
    count of its cells with a result and the settings that lack heads or seeds; otherwise
    the values of a results axis that no cell has (:func:`unrun_values`).

    Args:
        table: The results table.
        command: The newest launch's command line.
        conf_dir: The Hydra config tree (default: :func:`bench.paths.config_dir`).
        planned: Cells the launches so far planned (said where fewer than the grid's).

    Returns:
        ``233 of the 500 cells of the preset conf/experiment/fair_heads_gpu.yaml, so the
        experiment is partial (267 have a result): sst2 / full: no cell; ...; the verdict
        below covers only what ran.``, or ``the preset
        conf/experiment/fair_table7.yaml also sweeps head=linear, with no cell yet; ...``.
    """
    progress = grid_progress(table, command, conf_dir)
    if progress is not None:
        if progress.complete:
            return ""
        so_far = f"; its launches so far planned {planned}" if planned else ""
        return (
            f"{progress.total - progress.done} of the {progress.total} cells of the preset "
            f"conf/experiment/{progress.name}.yaml, so the experiment is partial ("
            f"{progress.done} have a result{so_far}): {missing_text(progress)}; the verdict "
            "below covers only what ran."
        )
    name, missing = unrun_values(table, command, conf_dir)
    if not missing:
        return ""
    absent = "; ".join(f"{axis}={','.join(values)}" for axis, values in missing.items())
    return (
        f"the preset conf/experiment/{name}.yaml also sweeps {absent}, with no cell yet; "
        "the verdict below covers only what ran."
    )
