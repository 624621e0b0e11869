"""Where headbench finds its config tree and keeps its local caches.

The one place that builds either path: everything else asks :func:`config_dir` or
:func:`cache_root`, so a checkout, an editable install and an installed wheel agree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parent


def config_dir() -> Path:
    """The Hydra config tree: ``bench/conf`` in a wheel, the repository's ``conf/`` otherwise.

    Returns:
        An existing directory holding ``config.yaml``.
    """
    packaged = _PACKAGE / "conf"
    return packaged if packaged.is_dir() else _PACKAGE.parent / "conf"


def cache_root() -> Path:
    """Directory for headbench's local caches (``$HEADBENCH_CACHE`` or ~/.cache/headbench)."""
    return Path(os.environ.get("HEADBENCH_CACHE", Path.home() / ".cache" / "headbench"))


def cache_dir(cfg: dict[str, Any] | None, kind: str) -> Path | None:
    """A cache directory: ``<cache.dir or $HEADBENCH_CACHE>/<kind>``; None if disabled.

    Args:
        cfg: The ``cache`` config (``enabled``, ``dir``); None = defaults.
        kind: ``features`` or ``tokenized``.
    """
    cfg = dict(cfg or {})
    if not cfg.get("enabled", True):
        return None
    if cfg.get("dir"):
        return Path(cfg["dir"]) / kind
    return cache_root() / kind
