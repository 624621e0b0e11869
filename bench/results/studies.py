"""Which settings of an experiment form its headline, and which are studies beside it.

An experiment preset (``conf/experiment/<name>.yaml``) may name *studies*: groups of
settings that ran with a smaller budget (fewer seeds or trials) and are reported apart from
the headline, each as its own Holm family::

    studies:
      - name: full fine-tuning study
        where: {freeze: full}

``where`` maps a setting column (:data:`STUDY_COLUMNS`: ``task``, ``encoder``, ``freeze``,
``train_size``) to a value or a list of values; a setting belongs to the first study whose
every column matches, and to the headline (:data:`HEADLINE`) otherwise. The key changes no
cell (it is not hashed, :func:`bench.cell.config_hash`); the report and the tables read it
from the preset named by a results directory's newest launch (:func:`results_studies`), so
every text sees the same partition (:func:`family_of`, :func:`holm_families`). Results with
no preset or no ``studies`` are all headline, as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from bench.errors import ConfigError
from bench.paths import config_dir
from bench.results.run_records import last_launch, read_launch_log

#: The family of every setting that is in no study.
HEADLINE = "headline"
#: The preset key that names the studies.
STUDIES_KEY = "studies"
#: ``where`` keys -> the column of the settings and comparison tables they match.
STUDY_COLUMNS = {
    "task": "task",
    "encoder": "encoder",
    "freeze": "freeze_label",
    "train_size": "train_size",
}
_EXPERIMENT = re.compile(r"(?:^|\s)\+{0,2}experiment=([\w.-]+)")


def preset_of(command: str) -> str | None:
    """The experiment preset a launch command names (``experiment=fair_heads_gpu``), if any."""
    found = _EXPERIMENT.findall(command or "")
    return found[-1] if found else None


def preset_path(command: str, conf_dir: Path | None = None) -> Path | None:
    """``conf/experiment/<name>.yaml`` of the preset a launch command names (None: none there).

    Args:
        command: A launch's command line.
        conf_dir: The Hydra config tree (default: :func:`bench.paths.config_dir`).
    """
    name = preset_of(command)
    if name is None:
        return None
    preset = (conf_dir or config_dir()) / "experiment" / f"{name}.yaml"
    return preset if preset.is_file() else None


@dataclass(frozen=True)
class Study:
    """A group of settings reported apart from the headline, as its own Holm family.

    Attributes:
        name: How the texts name it (``full fine-tuning study``).
        where: Per ``where`` key (:data:`STUDY_COLUMNS`), the values it matches, as text.
    """

    name: str
    where: tuple[tuple[str, tuple[str, ...]], ...]

    def matches(self, frame: pd.DataFrame) -> np.ndarray:
        """Per row of ``frame`` (with the :data:`STUDY_COLUMNS` it matches on): in the study."""
        inside = np.ones(len(frame), dtype=bool)
        for key, values in self.where:
            column = STUDY_COLUMNS[key]
            if column not in frame:
                return np.zeros(len(frame), dtype=bool)
            found = [_spelling(key, v) for v in frame[column]]
            inside &= np.array([v in values for v in found], dtype=bool)
        return inside


def _spelling(key: str, value: object) -> str:
    """A ``where`` or table value in one spelling (a training size as a whole number)."""
    if key != "train_size":
        return str(value)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "null"
    text = str(value)
    if text in ("null", "None", "", "nan"):
        return "null"
    try:
        return str(int(float(text)))
    except ValueError:
        return text


def _values(value: object, where: str) -> tuple[str, ...]:
    """One ``where`` entry's values (a scalar or a non-empty list of scalars), as text."""
    found = list(value) if isinstance(value, list | tuple) else [value]
    if not found or any(isinstance(v, Mapping | list | tuple) for v in found):
        raise ConfigError(f"{where}: expected a value or a non-empty list of values, got {value!r}")
    return tuple(str(v) for v in found)


def parse_studies(value: object, source: str) -> tuple[Study, ...]:
    """The studies of a preset's ``studies`` key, checked.

    Args:
        value: The key's value (None or ``[]``: no study).
        source: Where it comes from, for errors (the preset file).

    Returns:
        The studies in the preset's order.

    Raises:
        ConfigError: Naming ``source``, the key and the valid choices, where the value is
            not a list of ``{name, where}`` mappings, a ``where`` names an unknown column or
            is empty, or two studies share a name (or one is named ``headline``).
    """
    if value is None:
        return ()
    key = f"{source}: {STUDIES_KEY}"
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of {{name, where}} entries, got {value!r}")
    valid = ", ".join(STUDY_COLUMNS)
    studies: list[Study] = []
    for i, entry in enumerate(value):
        here = f"{key}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) != {"name", "where"}:
            raise ConfigError(f"{here}: expected exactly the keys name and where, got {entry!r}")
        name, where = entry["name"], entry["where"]
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{here}.name: expected a non-empty name, got {name!r}")
        if name == HEADLINE or name in {s.name for s in studies}:
            raise ConfigError(f"{here}.name: {name!r} is taken (the headline or another study)")
        if not isinstance(where, Mapping) or not where:
            raise ConfigError(
                f"{here}.where: expected a mapping of columns ({valid}) to values, got {where!r}"
            )
        unknown = [str(k) for k in where if k not in STUDY_COLUMNS]
        if unknown:
            raise ConfigError(
                f"{here}.where: unknown column {', '.join(unknown)}; valid choices: {valid}"
            )
        studies.append(
            Study(
                name,
                tuple(
                    (k, tuple(_spelling(k, v) for v in _values(where[k], f"{here}.where.{k}")))
                    for k in where
                ),
            )
        )
    return tuple(studies)


#: The preset key that declares the equivalence margins.
EQUIVALENCE_KEY = "equivalence"


@dataclass(frozen=True)
class Margin:
    """An equivalence margin: two heads within ±``margin`` points are equivalent.

    Attributes:
        task: The task it applies to.
        metric: The metric (the task's main metric).
        margin: Half-width in points (the metric ×100).
        reason: Why this margin (shown beside it).
    """

    task: str
    metric: str
    margin: float
    reason: str


def parse_margins(value: object, source: str) -> tuple[Margin, ...]:
    """The margins of a preset's ``equivalence`` key, checked.

    Args:
        value: A list of ``{task, metric, margin, reason}`` (None: no margin declared).
        source: Where it comes from, for errors.

    Raises:
        ConfigError: Naming ``source``, the entry and the valid choices.
    """
    if value is None:
        return ()
    key = f"{source}: {EQUIVALENCE_KEY}"
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of {{task, metric, margin, reason}} entries")
    fields = {"task", "metric", "margin", "reason"}
    margins: list[Margin] = []
    for i, entry in enumerate(value):
        here = f"{key}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) != fields:
            raise ConfigError(f"{here}: expected exactly the keys {sorted(fields)}, got {entry!r}")
        margin = entry["margin"]
        if not isinstance(margin, int | float) or not 0 < float(margin) < 100:
            raise ConfigError(f"{here}.margin: expected points in (0, 100), got {margin!r}")
        if not str(entry["reason"]).strip():
            raise ConfigError(f"{here}.reason: say why this margin")
        pair = (str(entry["task"]), str(entry["metric"]))
        if pair in {(m.task, m.metric) for m in margins}:
            raise ConfigError(f"{here}: a second margin for {pair[0]} {pair[1]}")
        margins.append(Margin(*pair, float(margin), str(entry["reason"])))
    return tuple(margins)


def _preset_value(preset: Path, key: str) -> object:
    config = OmegaConf.load(preset)
    value = OmegaConf.select(config, key, default=None) if OmegaConf.is_dict(config) else None
    return OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value


def preset_margins(preset: Path) -> tuple[Margin, ...]:
    """The equivalence margins a preset file declares (``()`` where none)."""
    return parse_margins(_preset_value(preset, EQUIVALENCE_KEY), str(preset))


def preset_studies(preset: Path) -> tuple[Study, ...]:
    """The studies a preset file names (``()`` where it names none)."""
    return parse_studies(_preset_value(preset, STUDIES_KEY), str(preset))


def studies_of(command: str, conf_dir: Path | None = None) -> tuple[Study, ...]:
    """The studies of the preset a launch command names (``()``: no preset, or none named)."""
    preset = preset_path(command, conf_dir)
    return () if preset is None else preset_studies(preset)


def margins_of(command: str, conf_dir: Path | None = None) -> tuple[Margin, ...]:
    """The margins of the preset a launch command names (``()``: no preset, or none declared)."""
    preset = preset_path(command, conf_dir)
    return () if preset is None else preset_margins(preset)


def results_studies(folder: Path, conf_dir: Path | None = None) -> tuple[Study, ...]:
    """The studies of a results directory: those of its newest launch's preset."""
    launch = last_launch(read_launch_log([folder]))
    return studies_of(str(launch.get("command") or ""), conf_dir)


def family_of(frame: pd.DataFrame, studies: Sequence[Study]) -> pd.Series:
    """Per row (a setting or a comparison): its family, a study's name or :data:`HEADLINE`.

    A row in several studies belongs to the first of them.
    """
    family = np.full(len(frame), HEADLINE, dtype=object)
    for study in reversed(studies):
        family[study.matches(frame)] = study.name
    return pd.Series(family, index=frame.index, name="family", dtype=object)


def family_order(studies: Sequence[Study]) -> list[str]:
    """The families in the order the texts show them: the headline, then each study."""
    return [HEADLINE, *(s.name for s in studies)]
