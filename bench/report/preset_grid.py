"""What an experiment preset sweeps that its results do not hold yet.

A reference experiment on a GPU runs in parts (``freeze=frozen`` first, then fine-tuning),
each launch narrowing the preset's sweep on the command line. The launch log plans only what
was launched, so a results README built between parts would describe the parts that ran as
if they were the experiment. This module reads the preset named by the newest launch
(``experiment=<name>`` → ``conf/experiment/<name>.yaml``), expands its swept values with
Hydra's own override grammar, and names each value of a results axis (task, encoder, head,
freezing strategy, seed) that no cell has yet.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from bench.paths import config_dir

#: Sweep keys whose values are a column of the results table, in the order shown.
AXES = ("task", "encoder", "head", "freeze", "seed")
_EXPERIMENT = re.compile(r"(?:^|\s)\+{0,2}experiment=([\w.-]+)")


def preset_of(command: str) -> str | None:
    """The experiment preset a launch command names (``experiment=fair_heads_gpu``), if any."""
    found = _EXPERIMENT.findall(command or "")
    return found[-1] if found else None


def swept_values(preset: Path) -> dict[str, list[str]]:
    """Per results axis, every value a preset's sweep gives it (its params and grids).

    Args:
        preset: ``conf/experiment/<name>.yaml``.

    Returns:
        Axis -> values in the preset's order; only the axes of :data:`AXES` it sweeps.
    """
    sweeper = OmegaConf.select(OmegaConf.load(preset), "hydra.sweeper", default=None)
    if sweeper is None:
        return {}
    params = sweeper.get("params")
    layers: list[Mapping[str, Any]] = []
    if params:
        layers.append(OmegaConf.to_container(params, resolve=False))  # type: ignore[arg-type]
    layers += [
        OmegaConf.to_container(grid, resolve=False)  # type: ignore[misc]
        for grid in (sweeper.get("grids") or [])
    ]
    parser = OverridesParser.create()
    values: dict[str, list[str]] = {}
    for layer in layers:
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


def unrun_text(table: pd.DataFrame, command: str, conf_dir: Path | None = None) -> str:
    """:func:`unrun_values` in words (plain text); empty when nothing is missing.

    Returns:
        ``the preset conf/experiment/fair_heads_gpu.yaml also sweeps freeze=full, ...``.
    """
    name, missing = unrun_values(table, command, conf_dir)
    if not missing:
        return ""
    absent = "; ".join(f"{axis}={','.join(values)}" for axis, values in missing.items())
    return (
        f"the preset conf/experiment/{name}.yaml also sweeps {absent}, with no cell yet; "
        "the verdict below covers only what ran."
    )
