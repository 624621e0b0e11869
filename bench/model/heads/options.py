"""Check a head's config options against what its preset class accepts."""

from __future__ import annotations

import inspect
from typing import Any

from bench.axes.heads import validate
from bench.errors import ConfigError

# Config keys that describe the cell rather than the module.
META_KEYS = ("name", "label")
# Constructor arguments that come from the encoder, the task and the cell, never from the config.
_SIZE_ARGS = frozenset(
    {"self", "options", "hidden_size", "num_layers", "num_labels", "label_names", "summary", "pair"}
)


def valid_options(cls: type, base: type, internal: frozenset[str] = frozenset()) -> list[str]:
    """Options a preset accepts: its own and its base's arguments, minus fixed and internal ones."""
    names: set[str] = set()
    for klass in (cls, base):
        names |= set(inspect.signature(klass).parameters)
    return sorted(names - _SIZE_ARGS - internal - getattr(cls, "fixed_options", frozenset()))


def head_options(
    cfg: dict[str, Any],
    registry: dict[str, Any],
    base: type,
    kind: str = "",
    internal: frozenset[str] = frozenset(),
) -> tuple[Any, dict[str, Any]]:
    """Look a head up by ``cfg['name']`` and check its options.

    Args:
        cfg: The ``head`` config as a plain dict.
        registry: Head name → preset class.
        base: The class every preset extends (its arguments are valid options too).
        kind: Words for the messages (``""`` or ``" on a token task"``).
        internal: Constructor arguments the presets set themselves.

    Returns:
        The preset class and the options to construct it with.

    Raises:
        ConfigError: For an unknown name or an option the preset does not take.
    """
    name = cfg.get("name")
    if name not in registry:
        raise ConfigError(
            f"unknown head {name!r} (head.name){kind}; valid choices: {', '.join(registry)}"
        )
    cls = registry[name]
    options = {k: v for k, v in cfg.items() if k not in META_KEYS}
    valid = valid_options(cls, base, internal)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(
            f"head {name!r}{kind} does not take option(s) {unknown}; "
            f"valid options: {', '.join(valid)}"
        )
    return cls, options


def preset_defaults(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Fill a sequence head's unset parts from its preset in :data:`bench.axes.heads.HEADS`.

    Args:
        name: The preset.
        options: The head's options as given (left unchanged).

    Returns:
        The options with ``layers``, ``combine`` and ``pool`` defaulted to the preset's.
    """
    preset = validate(name)
    layers = preset.layers[0] if len(preset.layers) == 1 else list(preset.layers)
    defaults = {"layers": layers, "combine": preset.combine, "pool": preset.pool}
    return {**defaults, **options}
