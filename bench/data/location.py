"""Where the data comes from: one rule for the sweep, the benchmarks, the tests and nox.

In order, the first that applies:

1. the config key ``data.dir`` when a run sets it (``data.dir=/path``);
2. the environment variable ``HEADBENCH_DATA``;
3. ``../shared/data`` beside the checkout headbench runs from, when that folder exists;
4. the Hugging Face Hub (``data.dir`` is null).

A directory named by 1 or 2 is used as given (a missing one is an error naming it, never a
silent fall-back). When the rule ends at the Hub and the Hub is off (``HF_HUB_OFFLINE`` or
``HF_DATASETS_OFFLINE``) or unreachable, :func:`load_from_hub` raises a
:class:`~bench.errors.MissingDataError` that says where it looked, instead of the ``datasets``
library's offline error. The conf default is ``data.dir: ${hb.data_dir:}``
(:mod:`bench.axes.resolvers`).

:func:`check_local_data` is the preflight's look at a local directory (a stat of each file a
cell reads, nothing loaded); :func:`count_examples` counts a local GLUE file's rows without
parsing them. Input data that cannot be found (a directory or file missing, the Hub off or
unreachable) raises :class:`~bench.errors.MissingDataError`: its cause is where the data
lives, not the cell, so a cell that failed with it is trained again by the next launch.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bench.data.tasks import Task, TaskSpec, TokenTaskSpec
from bench.errors import MissingDataError

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


def _no_data(what: str, why: str) -> MissingDataError:
    found = default_data_dir()
    if found is not None:  # data.dir=null was given although the rule finds a folder
        return MissingDataError(
            f"data.dir=null asks for the Hub, and {why}, so {what} cannot be loaded; "
            f"drop data.dir=null to use {found}, or set data.dir=<dir>"
        )
    return MissingDataError(
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
        MissingDataError: When the Hub is offline or unreachable: one line saying where
            local data was looked for and how to point headbench at it.
    """
    if hub_offline():
        names = " / ".join(n for n in OFFLINE_VARS if os.environ.get(n))
        raise _no_data(what, f"the Hugging Face Hub is off ({names} is set)")
    try:
        return load()
    except ConnectionError as err:  # huggingface_hub's offline and connection errors
        raise _no_data(what, f"the Hub could not be reached ({type(err).__name__})") from err


def task_folder(data_dir: str | Path, spec: Task) -> Path:
    """The folder of one task under a local data root.

    Args:
        data_dir: The data root (``data.dir``).
        spec: The task.

    Returns:
        ``<data_dir>/glue/<TASK>`` (GLUE's download layout) or ``<data_dir>/<local_dir>``
        for a token task (``conll2003``).
    """
    if isinstance(spec, TokenTaskSpec):
        return Path(data_dir) / spec.local_dir
    return Path(data_dir) / "glue" / spec.glue_dir


def task_files(data_dir: str | Path, spec: Task) -> list[Path]:
    """Every local file a cell of ``spec`` reads: its training split, then its dev splits."""
    folder = task_folder(data_dir, spec)
    sources = [spec.train, *spec.dev.values()]
    return [folder / name for name in dict.fromkeys(source.filename for source in sources)]


def _layout(spec: Task) -> str:
    return "4 columns, IOB2" if isinstance(spec, TokenTaskSpec) else "GLUE's download layout"


def check_local_data(data_dir: str | Path | None, spec: Task) -> None:
    """Check, by a stat of each file, that a local data root holds what a cell reads.

    Args:
        data_dir: ``data.dir`` as resolved; None (the Hub or its cache) is not checked
            here: whether the Hub answers is known only by asking it.
        spec: The cell's task.

    Raises:
        MissingDataError: Naming ``data.dir``, the path missing and the files expected.
    """
    if data_dir is None:
        return
    root = Path(data_dir)
    expected = task_files(root, spec)
    if not root.is_dir():
        problem = "the directory does not exist"
    else:
        missing = [str(path) for path in expected if not path.is_file()]
        if not missing:
            return
        problem = f"{' and '.join(missing)} {'does' if len(missing) == 1 else 'do'} not exist"
    wanted = [str(path.relative_to(root)) for path in expected]
    raise MissingDataError(
        f"data.dir={root}: {problem}; task {spec.name!r} reads "
        f"{', '.join(wanted[:-1])} and {wanted[-1]} under it ({_layout(spec)}). Set data.dir "
        f"(or {ENV_VAR}) to the folder that holds them, or data.dir=null to load the task "
        "from the Hugging Face Hub"
    )


def count_examples(data_dir: str | Path | None, spec: Task) -> int | None:
    """The training examples of a local GLUE task file, counted without parsing it.

    A GLUE file holds one example per line after its header
    (:func:`bench.data.glue_files.read_glue_tsv` reads it so), so this is the row count
    its reader returns for a valid file.

    Args:
        data_dir: ``data.dir``; None (the Hub) is not counted.
        spec: The task.

    Returns:
        The count, or None for the Hub, a token task (sentences span lines) or a missing
        file.
    """
    if data_dir is None or not isinstance(spec, TaskSpec):
        return None
    path = task_folder(data_dir, spec) / spec.train.filename
    try:
        stat = path.stat()
    except OSError:
        return None
    header = 1 if spec.has_header else 0
    return max(_count_lines(str(path), stat.st_size, stat.st_mtime_ns) - header, 0)


@functools.lru_cache(maxsize=32)
def _count_lines(path: str, size: int, mtime_ns: int) -> int:
    """Lines of a file up to its last non-blank one (as the reader skips trailing blank lines).

    A last line without a newline counts; the count is cached per size and mtime.
    """
    del size, mtime_ns  # the cache key: a changed file is counted again
    newlines, trailing, seen = 0, 0, False  # trailing: newlines after the last non-blank byte
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            newlines += block.count(b"\n")
            text = block.rstrip()
            trailing = block[len(text) :].count(b"\n") + (0 if text else trailing)
            seen = seen or bool(text)
    return newlines - trailing + 1 if seen else 0
