"""How a DataLoader's worker processes start, wherever the cell runs.

torch's ``DataLoader`` starts its workers with the process's default multiprocessing
context. In a joblib/loky worker (``hydra/launcher=gpu_pack`` and ``joblib``), that default
is loky's own, whose ``Popen`` cannot start torch's worker processes (``'Process' object has
no attribute 'env'``). torch reports it as a pickling problem and Lightning as "Please call
`iter(combined_loader)` first". The first launch of ``fair_heads_gpu``'s fine-tuning on a
GPU failed this way in every cell, since that preset sets ``data.num_workers: 2``. Such a
process gets the platform's standard start method instead (fork on Linux before Python
3.14, as in any other process). Everywhere else torch's default is left alone.
"""

from __future__ import annotations

import multiprocessing

#: The standard library's start methods; any other default is a launcher's own.
STANDARD_START_METHODS = ("fork", "spawn", "forkserver")


def worker_context(num_workers: int) -> str | None:
    """The ``multiprocessing_context`` a DataLoader with ``num_workers`` workers needs here.

    Args:
        num_workers: The DataLoader's worker processes (0: it loads in this process).

    Returns:
        None (torch's default) without workers or where the process's default start method
        is a standard one; else the platform's standard default start method.
    """
    if num_workers <= 0:
        return None
    current = multiprocessing.get_start_method(allow_none=True)
    if current is None or current in STANDARD_START_METHODS:
        return None
    return multiprocessing.get_all_start_methods()[0]
