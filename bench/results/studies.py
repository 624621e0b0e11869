"""A preset's ``studies`` (each its own Holm family) and ``equivalence`` margins.

``- {name: full fine-tuning study, where: {freeze: full}}``: a setting belongs to the first
study whose every ``where`` column matches, else to the :data:`HEADLINE`. Neither key
changes a cell's hash.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from bench.errors import ConfigError
from bench.paths import config_dir

#: The family of every setting that is in no study.
HEADLINE = "headline"
#: The preset keys that name the studies and declare the equivalence margins.
STUDIES_KEY, EQUIVALENCE_KEY = "studies", "equivalence"
#: ``where`` keys -> the column of the settings and comparison tables they match.
STUDY_COLUMNS = dict(task="task", encoder="encoder", freeze="freeze_label", train_size="train_size")
_EXPERIMENT = re.compile(r"(?:^|\s)\+{0,2}experiment=([\w.-]+)")


def preset_path(command: str, conf_dir: Path | None = None) -> Path | None:
    """``<conf_dir>/experiment/<name>.yaml`` of the preset a launch command names (None: none)."""
    found = _EXPERIMENT.findall(command or "")
    preset = (conf_dir or config_dir()) / "experiment" / f"{found[-1]}.yaml" if found else None
    return preset if preset is not None and preset.is_file() else None


def _spelling(key: str, value: object) -> str:
    """A ``where`` or table value in one spelling (a training size as a whole number)."""
    text = str(value)
    if key != "train_size" or text in ("null", "None", "", "nan"):
        return text if key != "train_size" else "null"
    try:
        return str(int(float(text)))
    except ValueError:
        return text


@dataclass(frozen=True)
class Study:
    """Settings reported apart from the headline: per ``where`` key, the values it matches."""

    name: str
    where: tuple[tuple[str, tuple[str, ...]], ...]

    def matches(self, frame: pd.DataFrame) -> np.ndarray:
        """Per row of ``frame`` (with the :data:`STUDY_COLUMNS` it matches on): in the study."""
        inside = np.ones(len(frame), dtype=bool)
        for key, values in self.where:
            if STUDY_COLUMNS[key] not in frame:
                return np.zeros(len(frame), dtype=bool)
            column = frame[STUDY_COLUMNS[key]]
            inside &= np.array([_spelling(key, v) in values for v in column], dtype=bool)
        return inside


@dataclass(frozen=True)
class Margin:
    """Heads within ±``margin`` points of ``task``'s ``metric`` are equivalent (``reason``: why)."""

    task: str
    metric: str
    margin: float
    reason: str


def _entries(
    value: object, source: str, key: str, fields: Sequence[str]
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """A preset key's entries, each with where it is (for errors), checked to have ``fields``."""
    if value is None:
        return
    at, names = f"{source}: {key}", f"{', '.join(fields[:-1])} and {fields[-1]}"
    if not isinstance(value, list):
        raise ConfigError(
            f"{at}: expected a list of {{{', '.join(fields)}}} entries, got {value!r}"
        )
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping) or set(entry) != set(fields):
            raise ConfigError(f"{at}[{i}]: expected exactly the keys {names}, got {entry!r}")
        yield f"{at}[{i}]", entry


def _values(key: str, given: object, here: str) -> tuple[str, ...]:
    """One ``where`` entry's values (a scalar or a non-empty list of scalars) in one spelling."""
    found = list(given) if isinstance(given, list | tuple) else [given]
    if not found or any(isinstance(v, Mapping | list | tuple) for v in found):
        raise ConfigError(f"{here}: expected a value or a non-empty list of values, got {given!r}")
    return tuple(_spelling(key, str(v)) for v in found)


def parse_studies(value: object, source: str) -> tuple[Study, ...]:
    """The studies of a preset's ``studies`` key (None: none); ConfigError names what is wrong."""
    valid = ", ".join(STUDY_COLUMNS)
    studies: list[Study] = []
    for here, entry in _entries(value, source, STUDIES_KEY, ("name", "where")):
        name, where = entry["name"], entry["where"]
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{here}.name: expected a non-empty name, got {name!r}")
        if name == HEADLINE or name in {s.name for s in studies}:
            raise ConfigError(f"{here}.name: {name!r} is taken (the headline or another study)")
        if not isinstance(where, Mapping) or not where:
            raise ConfigError(
                f"{here}.where: expected a mapping of columns ({valid}) to values, got {where!r}"
            )
        unknown = ", ".join(str(k) for k in where if k not in STUDY_COLUMNS)
        if unknown:
            raise ConfigError(f"{here}.where: unknown column {unknown}; valid choices: {valid}")
        matched = tuple((k, _values(k, v, f"{here}.where.{k}")) for k, v in where.items())
        studies.append(Study(name, matched))
    return tuple(studies)


def parse_margins(value: object, source: str) -> tuple[Margin, ...]:
    """The margins of a preset's ``equivalence`` key (None: none); ConfigError as above."""
    margins: list[Margin] = []
    fields = ("task", "metric", "margin", "reason")
    for here, entry in _entries(value, source, EQUIVALENCE_KEY, fields):
        margin, pair = entry["margin"], (str(entry["task"]), str(entry["metric"]))
        if not isinstance(margin, int | float) or not 0 < float(margin) < 100:
            raise ConfigError(f"{here}.margin: expected points in (0, 100), got {margin!r}")
        if not str(entry["reason"]).strip():
            raise ConfigError(f"{here}.reason: say why this margin")
        if pair in {(m.task, m.metric) for m in margins}:
            raise ConfigError(f"{here}: a second margin for {pair[0]} {pair[1]}")
        margins.append(Margin(*pair, float(margin), str(entry["reason"])))
    return tuple(margins)


def _from_preset(preset: Path | None, key: str, parse: Callable[[object, str], tuple]) -> tuple:
    """A preset file's ``key``, parsed (``()``: no preset)."""
    if preset is None:
        return ()
    config = OmegaConf.load(preset)
    value = OmegaConf.select(config, key, default=None) if OmegaConf.is_dict(config) else None
    plain = OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value
    return parse(plain, str(preset))


def studies_of(command: str, conf_dir: Path | None = None) -> tuple[Study, ...]:
    """The studies of the preset a launch command names (``()``: no preset, or none named)."""
    return _from_preset(preset_path(command, conf_dir), STUDIES_KEY, parse_studies)


def margins_of(command: str, conf_dir: Path | None = None) -> tuple[Margin, ...]:
    """The margins of the preset a launch command names (``()``: no preset, or none declared)."""
    return _from_preset(preset_path(command, conf_dir), EQUIVALENCE_KEY, parse_margins)


def family_of(frame: pd.DataFrame, studies: Sequence[Study]) -> pd.Series:
    """Per row (a setting or a comparison): its family, the first study's name or the headline."""
    family = np.full(len(frame), HEADLINE, dtype=object)
    for study in reversed(studies):
        family[study.matches(frame)] = study.name
    return pd.Series(family, index=frame.index, name="family", dtype=object)
