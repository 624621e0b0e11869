"""Expand a sweep into its jobs: a union of cartesian grids, with Hydra's override grammar.

Hydra's basic sweeper runs one cartesian product. A paper table is often not one: BERT's
Table 7 is one fine-tuned row plus six frozen-feature rows, and a layer-wise study is
single layers plus the last four combined three ways. :func:`expand` takes the sweep's
``params`` (every job), a list of ``grids`` (each its own product) and the command line,
and returns each job's overrides. Per key, a grid's value replaces ``params``' and the
command line replaces both, so ``seed=1`` on the command line narrows every grid. With no
grids it is exactly the basic sweeper's product.

Only the public override types of ``hydra.core.override_parser`` are used, so the same
function serves the sweeper plugin (``hydra_plugins/headbench_sweeper``) and the dry run
(:mod:`bench.run.plan`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override

from bench.errors import ConfigError


def _choices(override: Override) -> list[str]:
    """The ``key=value`` strings of one override: one, or one per value of a sweep."""
    key = override.get_key_element()
    if not override.is_sweep_override():
        return [f"{key}={override.get_value_element_as_str()}"]
    if not override.is_discrete_sweep():
        raise ConfigError(
            f"{override.input_line}: only lists of values (a,b,c), choice() and range() "
            "can be swept here, not intervals"
        )
    return [f"{key}={value}" for value in override.sweep_string_iterator()]


def _as_arguments(params: Mapping[str, Any] | None) -> list[str]:
    return [f"{key}={value}" for key, value in (params or {}).items()]


def expand(
    parser: OverridesParser,
    params: Mapping[str, Any] | None,
    grids: Sequence[Mapping[str, Any]] | None,
    arguments: Sequence[str],
) -> list[list[str]]:
    """Every job of a sweep, as the override list each job is composed with.

    Args:
        parser: Hydra's override parser (``OverridesParser.create(config_loader=...)``).
        params: ``hydra.sweeper.params``: key -> value or sweep, shared by every grid.
        grids: ``hydra.sweeper.grids``: each a mapping key -> value or sweep; the jobs are
            the union of their products (in order, duplicates dropped). None or empty: one
            grid, ``params`` alone.
        arguments: The command line's overrides (they win per key).

    Returns:
        One list of ``key=value`` overrides per job.

    Raises:
        ConfigError: For a sweep that is not a discrete list of values.
    """
    jobs: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for grid in grids or [{}]:
        per_key: dict[str, list[str]] = {}
        lines = [*_as_arguments(params), *_as_arguments(grid), *arguments]
        for override in parser.parse_overrides(lines):
            per_key[override.get_key_element()] = _choices(override)
        for job in itertools.product(*per_key.values()):
            if job not in seen:
                seen.add(job)
                jobs.append(list(job))
    return jobs
