"""Classification heads: the one registry of the named presets, their labels and order.

A preset is a composition of parts (DESIGN.md, convention 3): which hidden states
(``layers`` and ``combine``), how to read them (``pool``; the BiLSTM reads the token
states with an LSTM first), and a classifier.

Torch-free: :mod:`bench.model.heads` builds the modules (sequence and token variants of
every preset); preflight, the label resolver, the tables and the report read this registry.
A preset's label is its name, or ``<name>-<variant>`` for presets with a variant key
(``pooler-random``), plus the layer selection when it is not the preset's default
(:func:`head_label`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.axes.layers import LayerSpec, describe_selection
from bench.errors import ConfigError


@dataclass(frozen=True)
class HeadPreset:
    """One named head.

    Attributes:
        name: ``head.name`` (and the option file ``conf/head/<name>.yaml``).
        layers: The hidden states it reads by default (``head.layers``).
        combine: How it combines several layers by default (``head.combine``).
        pool: How it reads the selected states of a sequence by default (``head.pool``:
            ``cls``, ``mean``, ``max``, or ``final`` for the BiLSTM); token tasks pool
            nothing.
        variant_key: An option whose value joins the label (``pooler``: ``init``).
        variants: The values of ``variant_key``, in table order.
    """

    name: str
    layers: tuple[int, ...] = (-1,)
    combine: str = "concat"
    pool: str = "cls"
    variant_key: str | None = None
    variants: tuple[str, ...] = ()


#: In table order: the single linear layer, the dense+tanh pooler, the last four layers
#: concatenated, the BiLSTM over the token states, then the control: the single linear
#: layer on the mean of the token states (it reads every token as the BiLSTM does).
HEADS: dict[str, HeadPreset] = {
    p.name: p
    for p in (
        HeadPreset("linear"),
        HeadPreset("pooler", variant_key="init", variants=("random", "pretrained")),
        HeadPreset("last4_concat", layers=(-4, -3, -2, -1)),
        HeadPreset("bilstm", pool="final"),
        HeadPreset("mean_linear", pool="mean"),
    )
}


def validate(name: object) -> HeadPreset:
    """The registered head called ``name``.

    Raises:
        ConfigError: For an unknown name, listing the valid choices.
    """
    if not isinstance(name, str) or name not in HEADS:
        raise ConfigError(f"unknown head {name!r} (head.name); valid choices: {', '.join(HEADS)}")
    return HEADS[name]


def _is_default(preset: HeadPreset, layers: LayerSpec, combine: str) -> bool:
    items = [layers] if isinstance(layers, int) else layers
    return (
        not isinstance(items, str)
        and tuple(items) == preset.layers
        and (len(preset.layers) == 1 or combine == preset.combine)
    )


def head_label(name: str, layers: LayerSpec, combine: str, variant: str | None = None) -> str:
    """The label of a head's cells: the run directory's and the tables' name for it.

    Args:
        name: The preset.
        layers: ``head.layers`` as configured (a name, an index or a list).
        combine: ``head.combine``.
        variant: The value of the preset's variant key (``pooler``: ``init``), if any.

    Returns:
        ``linear``; ``pooler-random``; ``linear-L3``; ``linear-last4_mean``;
        ``bilstm-concat_last4`` (see :func:`bench.axes.layers.describe_selection`).
    """
    preset = validate(name)
    base = f"{name}-{variant}" if preset.variant_key and variant is not None else name
    if _is_default(preset, layers, combine):
        return base
    return f"{base}-{describe_selection(layers, combine)}"


def head_order() -> list[str]:
    """Head labels in table order: each preset, then its variants."""
    order = []
    for preset in HEADS.values():
        order.append(preset.name)
        order.extend(f"{preset.name}-{v}" for v in preset.variants)
    return order
