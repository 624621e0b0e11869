"""``data.pad_to_multiple_of``: how wide the batches an encoder reads are.

By default a batch is padded to its longest example, so a sweep's batches come in as many
widths as its examples have lengths. Padded to a multiple of ``m`` tokens instead, they
come in at most ``ceil(max_length / m)`` widths. That matters where each width costs
something once: ``trainer.compile=reduce-overhead`` records a CUDA graph per input shape.
The padding is masked, so a model reads the same tokens either way; the wider matrix
products round differently, so a cell padded this way is another cell (the key is hashed
when set, :func:`bench.cell.config_hash`), except for cells that read cached states, whose
encoder forward ran once, in the cache, padded to each batch's longest example.
"""

from __future__ import annotations

import math

from bench.errors import ConfigError


def check_pad_multiple(value: object) -> int | None:
    """``data.pad_to_multiple_of``, checked.

    Args:
        value: The config value: null or a positive integer.

    Returns:
        The multiple, or None to pad to the longest example of each batch.

    Raises:
        ConfigError: Naming the key, the value and what is valid.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"data.pad_to_multiple_of={value!r}: must be null (pad to each batch's longest "
            "example) or a positive integer"
        )
    return value


def widest_batch(max_length: int, multiple: int | None) -> int:
    """The widest batch the encoder can be given: ``max_length`` rounded up to the multiple.

    Args:
        max_length: ``data.max_length`` (the longest example, special tokens included).
        multiple: ``data.pad_to_multiple_of`` (checked), or None.

    Returns:
        Tokens in the widest batch.
    """
    if multiple is None:
        return max_length
    return math.ceil(max_length / multiple) * multiple
