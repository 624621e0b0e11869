"""Freezing strategies: the one registry of their names, options, labels and order.

Torch-free: :mod:`bench.model.freezing` and :mod:`bench.model.adaptation` implement the
strategies; preflight, the config hash, the tables and the report read this registry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.errors import ConfigError


@dataclass(frozen=True)
class FreezeStrategy:
    """One freezing strategy.

    Attributes:
        name: The ``freeze.name`` (and the option file ``conf/freeze/<name>.yaml``).
        adaptive: Whether it is built on the plain strategies with phases, per-layer rates,
            re-initialisation or adapters (:mod:`bench.model.adaptation`).
        options: The keys its option file holds besides ``name`` and ``label`` (their
            defaults are the values in ``conf/freeze/<name>.yaml``); ``k`` is a number of
            top layers, 1..L.
        label_prefix: For strategies that take ``k``: the label is ``<prefix><k>``.
        ranked: Whether tables place it by the registry's order (least to most trained);
            unranked labels follow, alphabetically.
        reads_cache: Whether its cells read the frozen hidden-state cache.
    """

    name: str
    adaptive: bool = False
    options: tuple[str, ...] = ()
    label_prefix: str = ""
    ranked: bool = True
    reads_cache: bool = False

    @property
    def takes_k(self) -> bool:
        """Whether it takes ``freeze.k`` (a number of top layers, 1..L)."""
        return "k" in self.options


#: Roughly from the fewest trained parameters to the most.
STRATEGIES: dict[str, FreezeStrategy] = {
    s.name: s
    for s in (
        FreezeStrategy("frozen", reads_cache=True),
        FreezeStrategy("bitfit", options=("lr",)),
        FreezeStrategy(
            "lora", adaptive=True, options=("rank", "alpha", "dropout", "target_modules", "lr")
        ),
        FreezeStrategy("lpft", adaptive=True, options=("probe_epochs", "ft_head_lr")),
        FreezeStrategy("gradual", adaptive=True, options=("interval", "every", "group_size")),
        FreezeStrategy("embeddings"),
        FreezeStrategy("top_k", options=("k",), label_prefix="top", reads_cache=True),
        FreezeStrategy("llrd", adaptive=True, options=("factor",)),
        FreezeStrategy("full"),
        FreezeStrategy(
            "reinit_top", adaptive=True, options=("k",), label_prefix="reinit", ranked=False
        ),
    )
}


def validate(name: object) -> FreezeStrategy:
    """The registered strategy called ``name``.

    Raises:
        ConfigError: For an unknown name, listing the valid choices.
    """
    if not isinstance(name, str) or name not in STRATEGIES:
        raise ConfigError(
            f"freeze.name={name!r}: unknown freezing strategy; "
            f"valid choices: {', '.join(STRATEGIES)}"
        )
    return STRATEGIES[name]


def validate_options(cfg: Mapping[str, Any]) -> FreezeStrategy:
    """Check a ``freeze`` config group: a registered strategy and only its own keys.

    Args:
        cfg: The group as a plain mapping (``name``, optional ``label``, the options).

    Returns:
        The strategy.

    Raises:
        ConfigError: For an unknown strategy or a key it does not take, listing the valid
            choices.
    """
    strategy = validate(cfg.get("name"))
    unknown = sorted(set(cfg) - {"name", "label", *strategy.options})
    if unknown:
        valid = ", ".join(strategy.options) or "none"
        raise ConfigError(
            f"freeze.{unknown[0]}: {strategy.name} takes no option {unknown[0]!r}; "
            f"valid options: {valid}"
        )
    return strategy


def check_k(name: str, k: object, num_layers: int, encoder: str = "") -> int:
    """Check ``freeze.k`` of a strategy that takes it against the encoder's depth.

    Args:
        name: The strategy.
        k: The configured value.
        num_layers: The encoder's number of transformer layers L.
        encoder: The encoder's name, for the message ("" = this encoder).

    Returns:
        ``k``, checked.

    Raises:
        ConfigError: If ``k`` is not an integer in 1..L.
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= num_layers:
        where = f"encoder {encoder!r}" if encoder else "this encoder"
        raise ConfigError(
            f"freeze.k={k!r} for {name}; valid values for {where} are 1..{num_layers}"
        )
    return k


def freeze_label(name: str, k: int | None = None) -> str:
    """The label a strategy's cells carry: its name, or ``<prefix><k>`` (``top2``)."""
    strategy = validate(name)
    return f"{strategy.label_prefix}{k}" if strategy.takes_k else name


_K_LABEL = re.compile(r"^(?P<prefix>[a-z_]+?)(?P<k>\d+)$")


def freeze_rank(label: str) -> tuple[int, int, str]:
    """Sort key of a freeze label: registry order (``top<k>`` at ``top_k``, by k), then the rest.

    Args:
        label: A ``freeze_label`` value of a result table.
    """
    ranked = [s for s in STRATEGIES.values() if s.ranked]
    positions = {s.name: i for i, s in enumerate(ranked)}
    if label in positions:
        return (positions[label], 0, label)
    match = _K_LABEL.match(label)
    if match:
        for strategy in ranked:
            if strategy.takes_k and strategy.label_prefix == match["prefix"]:
                return (positions[strategy.name], int(match["k"]), label)
    return (len(ranked), 0, label)
