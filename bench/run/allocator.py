"""The C allocator setting a training process runs with (``runtime.malloc``).

Fine-tuning frees and re-allocates the same large tensors every step. The biggest is the
word-embedding gradient (vocabulary x width: 47 MB for minilm, 94 MB for bert-base), which
glibc's ``malloc`` serves with ``mmap`` (above its 32 MB ceiling for the dynamic threshold)
and returns with ``munmap`` at every ``zero_grad``: about 11,400 page faults per step for
minilm, each page zeroed by the kernel again. ``tuned`` asks glibc (``mallopt``) to serve
large blocks from the heap and to keep freed memory for reuse, which is what jemalloc or
tcmalloc do and what PyTorch's CPU performance guide recommends them for, without a library
to install. It changes speed only, never a number (the allocator does no arithmetic), so it
is not part of the config hash.

- ``tuned``: ``M_MMAP_MAX = 0`` (no ``mmap`` for large blocks; glibc still falls back to it
  when a thread's heap cannot hold a block) and ``M_TRIM_THRESHOLD`` = 1 GiB (freed memory at
  the top of the heap is kept up to that size instead of being returned at once). The
  process's resident memory then stays near its peak instead of falling between steps;
  the peak itself does not grow.
- ``default``: leave the allocator as the process started.

Not glibc (macOS, musl), or another allocator preloaded (``LD_PRELOAD`` with jemalloc or
tcmalloc): nothing is changed and the record says why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
from typing import Any

from bench.errors import ConfigError

CHOICES = ("tuned", "default")
#: ``mallopt`` parameter numbers from glibc's ``malloc.h``.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD = 1 << 30
_PRELOADED = ("jemalloc", "tcmalloc", "mimalloc")


@functools.cache
def _glibc() -> Any | None:
    """The C library's handle when this process runs on glibc's ``malloc``, else None."""
    name, _ = platform.libc_ver()
    if name != "glibc":
        return None
    path = ctypes.util.find_library("c") or "libc.so.6"
    libc = ctypes.CDLL(path)
    return libc if hasattr(libc, "mallopt") else None


def _preloaded_allocator() -> str | None:
    preload = os.environ.get("LD_PRELOAD", "")
    return next((name for name in _PRELOADED if name in preload), None)


def check_malloc_mode(mode: object) -> None:
    """Raise a :class:`ConfigError` naming ``runtime.malloc`` unless ``mode`` is a choice."""
    if mode not in CHOICES:
        raise ConfigError(f"runtime.malloc={mode!r}; valid choices: {', '.join(CHOICES)}")


def configure_malloc(mode: str) -> dict[str, Any]:
    """Apply ``runtime.malloc`` to this process (idempotent).

    Args:
        mode: ``tuned`` or ``default`` (see the module docstring).

    Returns:
        A record for ``result.json``: ``mode``, ``applied`` (bool) and, when something was
        set, the ``mallopt`` values; otherwise ``reason``.

    Raises:
        ConfigError: For a mode other than :data:`CHOICES`.
    """
    check_malloc_mode(mode)
    record: dict[str, Any] = {"mode": mode, "applied": False}
    if mode == "default":
        record["reason"] = "runtime.malloc=default"
        return record
    preloaded = _preloaded_allocator()
    if preloaded is not None:
        record["reason"] = f"{preloaded} is preloaded (LD_PRELOAD); glibc's malloc is not used"
        return record
    libc = _glibc()
    if libc is None:
        record["reason"] = f"not glibc ({platform.system()} {' '.join(platform.libc_ver())})"
        return record
    ok = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        record["reason"] = "mallopt refused the values"
        return record
    record.update(applied=True, mmap_max=0, trim_threshold=TRIM_THRESHOLD)
    return record
