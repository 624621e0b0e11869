"""Layer selections: which hidden states a head reads, by name or index (torch-free).

The one registry of layer-choice names (BERT paper, Table 7) and of the ways to combine
several layers; :mod:`bench.model.heads.layers` builds the modules from these.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.errors import ConfigError

COMBINES = ("concat", "mean", "max", "sum", "scalar_mix")

#: Named layer choices (BERT paper, Table 7): name -> (indices or "all", combine).
#: ``sum_*`` is the learned softmax-weighted sum (:class:`ScalarMix`); ``sum_all`` mixes
#: the L transformer layers ("all 12 layers" for BERT-base), without the embeddings.
LAYER_CHOICES: dict[str, tuple[list[int] | str, str]] = {
    "embeddings": ([0], "concat"),
    "last": ([-1], "concat"),
    "second_to_last": ([-2], "concat"),
    "sum_last4": ([-4, -3, -2, -1], "scalar_mix"),
    "concat_last4": ([-4, -3, -2, -1], "concat"),
    "sum_all": ("all", "scalar_mix"),
}
# The combine every head config writes by default; a named choice replaces it silently.
_DEFAULT_COMBINE = "concat"

LayerSpec = int | str | Sequence[int]


def validate(layers: object) -> LayerSpec:
    """Check the form of ``head.layers``: a registered name, one index or a list of indices.

    Indices are checked against an encoder's depth later (:func:`normalise_layers`).

    Args:
        layers: The configured value (plain, not an OmegaConf node).

    Returns:
        ``layers``, checked.

    Raises:
        ConfigError: For an unknown name or a value of the wrong type, listing the valid
            names.
    """
    names = ", ".join(LAYER_CHOICES)
    if isinstance(layers, str):
        if layers not in LAYER_CHOICES:
            raise ConfigError(
                f"head.layers={layers!r}; valid names: {names} (or a list of indices)"
            )
        return layers
    if isinstance(layers, int) and not isinstance(layers, bool):
        return layers
    if isinstance(layers, Sequence) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in layers
    ):
        return layers
    raise ConfigError(f"head.layers={layers!r}; give one of {names}, an index or a list of indices")


def resolve_layers(layers: LayerSpec, combine: str, num_layers: int) -> tuple[list[int], str]:
    """Turn a layer name or indices plus a combine into checked indices and a combine.

    A name (``embeddings``, ``last``, ``second_to_last``, ``sum_last4``, ``concat_last4``,
    ``sum_all``) sets both the indices and the combine; it overrides the default
    ``combine: concat`` but conflicts with any other explicit combine.

    Args:
        layers: A name, one index or a list of indices.
        combine: The configured combine.
        num_layers: The encoder's number of transformer layers L.

    Returns:
        ``(indices in 0..L, combine)``.

    Raises:
        ConfigError: For an unknown name (listing the valid ones), a conflicting combine
            or an out-of-range index.
    """
    layers = validate(layers)
    if isinstance(layers, str):
        indices, named_combine = LAYER_CHOICES[layers]
        if combine not in (_DEFAULT_COMBINE, named_combine):
            raise ConfigError(
                f"head.layers={layers} sets combine={named_combine}, "
                f"but head.combine={combine!r}; drop head.combine or give indices"
            )
        chosen = list(range(1, num_layers + 1)) if isinstance(indices, str) else list(indices)
        return normalise_layers(chosen, num_layers), named_combine
    return normalise_layers(layers, num_layers), combine


def describe_layers(layers: LayerSpec, combine: str) -> str:
    """A short label of a layer choice for result tables.

    Args:
        layers: A name, one index or a list of indices (as configured).
        combine: The configured combine.

    Returns:
        The name itself, or the indices (``-1``; ``-4,-3,-2,-1:concat`` for several).
    """
    if isinstance(layers, str):
        return layers
    items = [layers] if isinstance(layers, int) else list(layers)
    text = ",".join(str(i) for i in items)
    return f"{text}:{combine}" if len(items) > 1 else text


def normalise_layers(layers: int | Sequence[int], num_layers: int) -> list[int]:
    """Check layer indices against the encoder depth.

    Hidden states are ``num_layers + 1`` tensors: index 0 is the embedding output,
    ``num_layers`` (or -1) the last transformer layer. Negative indices count from the top.

    Args:
        layers: One index or a list of indices.
        num_layers: The encoder's number of transformer layers L.

    Returns:
        The indices as non-negative positions in ``0..L``, in the given order.

    Raises:
        ConfigError: If the list is empty or an index is out of range.
    """
    items = [layers] if isinstance(layers, int) else list(layers)
    if not items:
        raise ConfigError("head.layers is empty; give at least one layer index")
    out = []
    for index in items:
        if not isinstance(index, int) or not -(num_layers + 1) <= index <= num_layers:
            raise ConfigError(
                f"head.layers contains {index!r}; valid indices for this {num_layers}-layer "
                f"encoder are 0..{num_layers} (0 = embeddings) or -{num_layers + 1}..-1"
            )
        out.append(index % (num_layers + 1))
    return out


_LAST4 = (-4, -3, -2, -1)


def describe_selection(layers: LayerSpec, combine: str) -> str:
    """A layer selection as a label suffix: ``L3``, ``last4_mean``, or its name.

    Args:
        layers: A name, one index or a list of indices (as configured).
        combine: The configured combine (it matters only for several layers).

    Returns:
        The name of a named choice; ``L<i>`` for one layer; ``last4_<combine>`` for the last
        four; otherwise the indices joined by ``+`` and the combine (``L0+6_concat``).
    """
    if isinstance(layers, str):
        return layers
    items = [layers] if isinstance(layers, int) else list(layers)
    if len(items) == 1:
        return f"L{items[0]}"
    if tuple(items) == _LAST4:
        return f"last4_{combine}"
    return "L" + "+".join(str(i) for i in items) + f"_{combine}"
