"""Where the data comes from: one rule for the sweep, the benchmarks, the tests and nox.

In order, the first that applies:

1. the config key ``data.dir`` when a run sets it (``data.dir=/path``);
2. the environment variable ``HEADBENCH_DATA``;
3. ``../shared/data`` beside the checkout headbench runs from, when that folder exists;
4. the Hugging Face Hub (``data.dir`` is null).

A directory named by 1 or 2 is used as given (a missing one is an error naming it, never a
silent fall-back). When the rule ends at the Hub and the Hub is off (``HF_HUB_OFFLINE`` or
``HF_DATASETS_OFFLINE``) or unreachable, :func:`load_from_hub` raises a
:class:`~bench.errors.DataError` that says where it looked, instead of the ``datasets``
library's offline error. The conf default is ``data.dir: ${hb.data_dir:}``
(:mod:`bench.axes.resolvers`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bench.errors import DataError

ENV_VAR = "HEADBENCH_DATA"
#: The environment variables with which the Hugging Face libraries stay offline.
OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_TRUE = {"1", "on", "yes", "true"}
#: The checkout holding this package (``bench/data/location.py`` → its root).
CHECKOUT = Path(__file__).resolve().parents[2]

T = TypeVar("T")


def checkout_data_dir() -> Path | None:
    """``../shared/data`` beside the checkout (it may not exist); None for an installed wheel."""
    if not (CHECKOUT / "pyproject.toml").is_file():  # site-packages, not a source checkout
        return None
    return CHECKOUT.parent / "shared" / "data"


def default_data_dir() -> str | None:
    """The data directory when ``data.dir`` is not set: rules 2 to 4 of the module's rule.

    Returns:
        ``$HEADBENCH_DATA``, else ``../shared/data`` beside the checkout when it exists,
        else None (the Hub).
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    shared = checkout_data_dir()
    return str(shared) if shared is not None and shared.is_dir() else None


def where_looked() -> str:
    """Each place the rule tried before the Hub, and why it was passed over."""
    shared = checkout_data_dir()
    env = os.environ.get(ENV_VAR)
    beside = (
        f"{shared}: " + ("exists" if shared.is_dir() else "does not exist")
        if shared is not None
        else f"../shared/data: not looked for, headbench is installed ({CHECKOUT}), not a checkout"
    )
    return "; ".join(
        ["data.dir: not set", f"{ENV_VAR}: " + (repr(env) if env else "not set"), beside]
    )


def hub_offline() -> bool:
    """Whether the environment keeps the Hugging Face libraries offline."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in OFFLINE_VARS)


def _no_data(what: str, why: str) -> DataError:
    found = default_data_dir()
    if found is not None:  # data.dir=null was given although the rule finds a folder
        return DataError(
            f"data.dir=null asks for the Hub, and {why}, so {what} cannot be loaded; "
            f"drop data.dir=null to use {found}, or set data.dir=<dir>"
        )
    return DataError(
        f"no local data for {what} and {why}; looked at {where_looked()}. Set data.dir=<dir> "
        f"or {ENV_VAR}=<dir> to a folder holding glue/<TASK>/*.tsv and conll2003/*.txt"
    )


def load_from_hub(load: Callable[[], T], what: str) -> T:
    """Run ``load`` (a ``datasets`` call) unless the Hub is off; name the search if it fails.

    Args:
        load: Loads the split from the Hub.
        what: The split, for the message (``glue/sst2 validation``).

    Returns:
        What ``load`` returned.

    Raises:
        DataError: When the Hub is offline or unreachable: one line saying where local data
            was looked for and how to point headbench at it.
    """
    if hub_offline():
        names = " / ".join(n for n in OFFLINE_VARS if os.environ.get(n))
        raise _no_data(what, f"the Hugging Face Hub is off ({names} is set)")
    try:
        return load()
    except ConnectionError as err:  # huggingface_hub's offline and connection errors
        raise _no_data(what, f"the Hub could not be reached ({type(err).__name__})") from err
