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

import math
from dataclasses import dataclass

from bench.axes.layers import LayerSpec, describe_selection
from bench.data.tasks import Task
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


def head_label(
    name: str,
    layers: LayerSpec,
    combine: str,
    variant: str | None = None,
    pair_encoding: str | None = None,
) -> str:
    """The label of a head's cells: the run directory's and the tables' name for it.

    Args:
        name: The preset.
        layers: ``head.layers`` as configured (a name, an index or a list).
        combine: ``head.combine``.
        variant: The value of the preset's variant key (``pooler``: ``init``), if any.
        pair_encoding: ``siamese`` adds ``-siamese`` (each sentence of a pair encoded alone:
            a variant of the head, compared with its cross-encoded self within a setting).

    Returns:
        ``linear``; ``pooler-random``; ``linear-L3``; ``linear-last4_mean``;
        ``bilstm-concat_last4`` (see :func:`bench.axes.layers.describe_selection`);
        ``mean_linear-siamese``.
    """
    preset = validate(name)
    base = f"{name}-{variant}" if preset.variant_key and variant is not None else name
    if not _is_default(preset, layers, combine):
        base = f"{base}-{describe_selection(layers, combine)}"
    return f"{base}-siamese" if pair_encoding == "siamese" else base


def head_order() -> list[str]:
    """Head labels in table order: each preset, then its variants."""
    order = []
    for preset in HEADS.values():
        order.append(preset.name)
        order.extend(f"{preset.name}-{v}" for v in preset.variants)
    return order


#: ``head=anchor``: a converged anchor (:mod:`bench.run.anchors`), fitted by scikit-learn, not
#: trained. It is no preset: its label is ``anchor-<features>`` and it has no module.
ANCHOR = "anchor"
#: ``head.features`` of an anchor -> the head whose pooled features it reads: ``cls`` the
#: last layer's first token (``linear``), ``mean`` its token mean (``mean_linear``), ``last4``
#: the last four layers' first tokens (``last4_concat``); ``cosine`` the cosine of the two
#: sentences' mean-pooled last layers, each sentence encoded alone (pair tasks).
ANCHOR_FEATURES = {"cls": "linear", "mean": "mean_linear", "last4": "last4_concat", "cosine": None}
#: The label of each gradient-trained head's anchor: the same features, a converged read-out.
ANCHOR_OF = {head: f"{ANCHOR}-{features}" for features, head in ANCHOR_FEATURES.items() if head}
#: The keys of an anchor's ``head`` config.
ANCHOR_KEYS = frozenset({"name", "label", "features", "C"})


def check_anchor(head: dict[str, object], spec: Task, freeze: str, cached: bool) -> None:
    """Check a ``head=anchor`` cell: its options, its task and that it reads cached features.

    Args:
        head: The ``head`` config as plain values.
        spec: The cell's task.
        freeze: ``freeze.name``.
        cached: Whether the cell reads the feature cache (``cache.enabled``).

    Raises:
        ConfigError: Naming the key and the valid choices.
    """
    features = head.get("features")
    if features not in ANCHOR_FEATURES:
        raise ConfigError(
            f"head.features={features!r}; valid choices: {', '.join(ANCHOR_FEATURES)}"
        )
    if unknown := sorted(set(head) - ANCHOR_KEYS):
        raise ConfigError(
            f"head anchor does not take option(s) {unknown}; valid options: features, C"
        )
    grid = head.get("C")
    if (
        not isinstance(grid, list)
        or not grid
        or not all(
            isinstance(c, int | float) and not isinstance(c, bool) and 0 < c < math.inf
            for c in grid
        )
    ):
        raise ConfigError(f"head.C={grid!r}: give a non-empty list of positive finite numbers")
    if spec.kind != "sequence":
        raise ConfigError(f"head=anchor on task={spec.name}: anchors cover sequence (GLUE) tasks")
    if freeze != "frozen" or not cached:
        raise ConfigError(
            f"head=anchor with freeze={freeze}"
            + ("" if cached else ", cache.enabled=false")
            + ": an anchor reads a frozen encoder's cached features; valid: freeze=frozen "
            "with cache.enabled=true"
        )
    if features == "cosine" and (len(getattr(spec, "text_fields", ())) != 2 or spec.num_labels > 2):
        raise ConfigError(
            f"head.features=cosine on task={spec.name}: the cosine anchor scores a pair's two "
            "sentences (a regression or two classes); valid choices here: cls, mean, last4"
        )
