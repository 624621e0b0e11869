"""``trainer.matmul_precision``: how a cell's float32 matrix products are computed.

``torch.set_float32_matmul_precision``: ``highest`` computes them in float32 (torch's
default, and every committed cell's); ``high`` lets them run as TensorFloat32 on NVIDIA GPUs
from Ampere on (tensor cores, a 10-bit mantissa for the products, float32 sums), or as
bfloat16 passes where a CPU backend offers them; ``medium`` also allows bfloat16 products.
Lightning suggests it on every run on such a GPU. It changes the numbers, so it is hashed
when it is not ``highest`` (:func:`bench.cell.config_hash`), and it is refused for cells that
read cached hidden states: a cache entry does not record the precision its states were
computed with (:func:`bench.cell.reads_cached_states`).

The setting is global to a process: a cell sets its own for its training and puts the
previous one back after (a launcher's worker trains many cells), and each ``ddp_spawn`` rank
sets it when fitting starts (:meth:`bench.model.module.HeadbenchModule.on_fit_start`).
"""

from __future__ import annotations

from typing import Any

from bench.errors import ConfigError

#: torch's float32 matmul precisions, as ``trainer.matmul_precision`` names them.
MATMUL_PRECISIONS = ("highest", "high", "medium")
#: torch's default, and the value that keeps a cell's hash as before the key.
DEFAULT_MATMUL_PRECISION = "highest"


def check_matmul_precision(value: Any) -> str:
    """The ``trainer.matmul_precision`` setting, checked.

    Args:
        value: The config value; None (a config from before the key) is the default.

    Returns:
        One of :data:`MATMUL_PRECISIONS`.

    Raises:
        ConfigError: Naming the key, the value and the valid choices.
    """
    if value is None:
        return DEFAULT_MATMUL_PRECISION
    if isinstance(value, str) and value in MATMUL_PRECISIONS:
        return value
    raise ConfigError(
        f"trainer.matmul_precision={value!r}: valid choices: {', '.join(MATMUL_PRECISIONS)}"
    )
