"""What a grid cell is: its identity, its run directory, its config hash, its result file.

A cell is one point of the sweep grid: task × encoder × head (and the layers it reads) ×
freezing strategy × seed. Everything else derives from the composed config here, once:

- :func:`cell_of`: the identity columns every table is keyed by (:data:`CELL_COLUMNS`);
- :func:`cell_path`: the run directory below the sweep root,
  ``task/encoder/head_label/freeze_label/seed=N`` (never a timestamp), with the optional
  axes of :data:`AXIS_COLUMNS` where a cell sets them
  (``.../train_size=400/seed=N-order=M``); a siamese pair cell's head label ends ``-siamese``;
- :func:`config_hash`: a content hash of everything that changes a cell's numbers, which
  resume compares with the stored result (recipe :data:`HASH_RECIPE`);
- :data:`RESULT_FILE` and :data:`RESULT_SCHEMA`: the file each cell writes and its version.

Torch-free: results and the report import this module.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bench.axes.freezing import STRATEGIES
from bench.axes.layers import describe_layers
from bench.axes.optional import PATH_AXES, leaf_dir
from bench.data.selection import DEFAULT_CARVE
from bench.errors import ConfigError

#: The file each cell writes, atomically, into its run directory.
RESULT_FILE = "result.json"
#: The identity columns of a cell, in table order.
CELL_COLUMNS = ["task", "encoder", "head", "head_label", "layers", "freeze", "freeze_label", "seed"]
#: Version of the hash recipe below. Results written before this constant existed carry no
#: ``hash_recipe`` and were hashed with recipe 1. Change the recipe only together with this
#: number, so old results are recognised as old (stale), never silently taken as current.
HASH_RECIPE = 1
#: Defaults of the hidden-state cache keys that enter the hash of cache-reading cells.
CACHE_DEFAULTS = {"enabled": True, "dtype": "float32"}
#: The file a search trial writes in its directory (not ``result.json``: trials are not cells).
TRIAL_FILE = "trial.json"
#: The folder beside a setting's ``seed=<n>`` directories that holds its search trials.
TRIALS_DIR = "trials"
#: Version of the ``result.json`` layout. 2 added ``selection`` (what chose the epoch),
#: ``best_constant`` and ``search``, and scores ``best.metrics`` on the reporting splits once.
RESULT_SCHEMA = 2
#: Folder of a run directory where resume keeps the finished outputs of an earlier
#: configuration of the cell (``superseded/<config_hash[:12]>/``) instead of deleting them.
#: Readers of a sweep's results skip everything below it.
SUPERSEDED_DIR = "superseded"
_HASHED_KEYS = (
    "task",
    "encoder",
    "head",
    "freeze",
    "seed",
    "data_seed",
    "data",
    "optim",
    "trainer",
)
#: Keys that change no number: where the files live, how they are read, how memory is
#: traded for time (gradient checkpointing recomputes the same activations).
_UNHASHED_KEYS: dict[str, tuple[str, ...]] = {
    "data": ("dir", "num_workers", "eval_batch_size"),
    "encoder": ("gradient_checkpointing",),
}
# Keys added after results were committed: hashed only when they differ from the old behaviour,
# so existing cells keep their hashes.
_HASHED_UNLESS_DEFAULT: dict[str, dict[str, Any]] = {
    "data": {"group_by_length": False, "pad_to_multiple_of": None},
    "optim": {"fused": False},
    "encoder": {"summary": "first"},
    "trainer": {"compile": False, "matmul_precision": "highest", "early_stopping": None},
}
# Keys of the `selection` group added after heldout results were committed: hashed only when
# they differ from the old behaviour (`carve: last`, the slice from what the subset leaves).
_SELECTION_DEFAULTS: dict[str, Any] = {"carve": DEFAULT_CARVE}
# Cells that read cached hidden states (bench/cache/features.py): whether they read them and in
# which dtype changes their numbers by rounding (float16 moved 9 of 32 frozen cells of
# bench.perf; BiLSTM training amplifies even the float32 differences of cached vs uncached),
# so those two keys are hashed for these cells when they differ from the defaults. Where the
# cache lives, and which extra layers a pass stores, change nothing.
_CACHE_READERS = tuple(name for name, s in STRATEGIES.items() if s.reads_cache)


#: ``search.pairing``: None = one search (``search.seed``) shared by every seed of a setting,
#: one selection slice (``data_seed``); ``seed`` = each cell's seed fixes its batch order
#: (shared by every head), its own search and its own selection slice.
PAIRINGS = (None, "seed")
#: ``search`` keys added after results were committed: hashed only when they differ from these.
_SEARCH_DEFAULTS: dict[str, Any] = {"order_seed": None, "pairing": None, "tie_rule": "trial"}

#: Seeds NumPy, PyTorch and Python's ``random`` all accept.
SEED_RANGE = (0, 2**32 - 1)
#: The keys whose values become path components of a run or results directory.
PATH_KEYS = ("sweep_name", "task.name", "encoder.name", "head.label", "freeze.label")
#: Folder names headbench makes in a sweep's tree, which a name may not take: the readers of
#: a sweep's results skip everything below ``superseded/``; ``trials/`` holds search trials.
RESERVED_NAMES = (SUPERSEDED_DIR, TRIALS_DIR)
#: The longest file name (in UTF-8 bytes) that common filesystems take (ext4, XFS, APFS, NTFS).
NAME_MAX_BYTES = 255
_UNSAFE_NAME = re.compile(r"[/\\\x00]")


def check_name(key: str, value: object) -> str:
    """Check a value that becomes one path component of a sweep's run or results tree.

    It must be one non-empty name (no separator, not ``.``/``..``, no surrounding spaces),
    none of :data:`RESERVED_NAMES`, and at most :data:`NAME_MAX_BYTES` bytes in UTF-8.

    Args:
        key: The config key, for the message.
        value: Its value.

    Returns:
        The value as a string.

    Raises:
        ConfigError: Naming the key, the value and what is valid.
    """
    name = str(value)
    if name in ("", ".", "..") or _UNSAFE_NAME.search(name) or name != name.strip():
        raise ConfigError(
            f"{key}={name!r}: becomes a directory name, so it must be one non-empty name "
            "without '/', '\\', surrounding spaces or '..' (e.g. linear-d0.1)"
        )
    if name in RESERVED_NAMES:
        raise ConfigError(
            f"{key}={name!r}: becomes a directory name, and {', '.join(RESERVED_NAMES)} are "
            f"reserved (the results readers skip {SUPERSEDED_DIR}/, search trials live in "
            f"{TRIALS_DIR}/); choose another name"
        )
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > NAME_MAX_BYTES:
        raise ConfigError(
            f"{key}={name[:40]!r}...: becomes a directory name, at most {NAME_MAX_BYTES} bytes "
            f"in UTF-8 (the filesystem's limit), but it has {size}; choose a shorter name"
        )
    return name


def check_identity(cfg: DictConfig) -> None:
    """Check what a cell's run directory is made of, before any directory is made.

    Every required key is set (``seed`` has no default), the seeds are integers in
    :data:`SEED_RANGE`, ``search.trials`` (hashed) is a count (at least 1 unless
    ``search=none``), and every name in :data:`PATH_KEYS` is one path component the sweep's
    readers read back (:func:`check_name`), so no cell writes outside ``runs_dir`` or
    ``results_dir``, and none vanishes from its tables.

    Args:
        cfg: A composed config (with or without the ``hydra`` node).

    Raises:
        ConfigError: Naming the key and what is valid.
    """
    cell = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])
    missing = sorted(OmegaConf.missing_keys(cell))
    if missing:
        hint = "; e.g. seed=1, or seed=1,2,3 with -m" if "seed" in missing else ""
        raise ConfigError(f"{', '.join(missing)}: required, no value given{hint}")
    low, high = SEED_RANGE
    for key in ("seed", "data_seed", "order_seed"):
        value = OmegaConf.select(cfg, key, default=0)
        if key == "order_seed" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{key}={value!r}: must be an integer from {low} to {high}")
    trials = OmegaConf.select(cfg, "search.trials", default=0)  # hashed when above 0
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise ConfigError(f"search.trials={trials!r}: must be an integer, at least 0 (no search)")
    search = OmegaConf.select(cfg, "search.name", default="none")
    if trials == 0 and search != "none":  # else it would silently search nothing
        raise ConfigError(
            f"search.trials=0 with search={search}: a search needs at least 1 trial; "
            "for no search: search=none"
        )
    path_axes(cfg)
    for key in PATH_KEYS:
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None:
            check_name(key, value)


def path_axes(cfg: DictConfig) -> list[str]:
    """The optional axes a config lists in ``axes`` (each a level of its run directory).

    Raises:
        ConfigError: For a value that is not a list of names from :data:`PATH_AXES`.
    """
    node = OmegaConf.select(cfg, "axes", default=None)
    listed = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    if listed is None:
        return []
    if not isinstance(listed, list) or any(a not in PATH_AXES for a in listed):
        raise ConfigError(
            f"axes={listed!r}: must be a list of optional axes; valid: {', '.join(PATH_AXES)} "
            "(order_seed names its cells whenever it is set)"
        )
    return [str(a) for a in listed]


def cell_of(cfg: DictConfig) -> dict[str, Any]:
    """The grid coordinates of a config: task, encoder, head, freeze, seed (plus labels).

    ``layers`` is the head's layer choice: its name (``concat_last4``) or the indices
    (``-1``; ``-4,-3,-2,-1:concat``). The optional axes (:data:`AXIS_COLUMNS`) follow.
    """
    layers = cfg.head.get("layers", -1)
    if OmegaConf.is_config(layers):
        layers = OmegaConf.to_container(layers, resolve=True)
    return {
        "task": cfg.task.name,
        "encoder": cfg.encoder.name,
        "head": cfg.head.name,
        "head_label": cfg.head.get("label", cfg.head.name),
        "layers": describe_layers(layers, cfg.head.get("combine", "concat")),
        "freeze": cfg.freeze.name,
        "freeze_label": cfg.freeze.get("label", cfg.freeze.name),
        "seed": int(cfg.seed),
        "train_size": OmegaConf.select(cfg, "data.train_size", default=None),
        "order_seed": OmegaConf.select(cfg, "order_seed", default=None),
    }


def cell_path(cfg: DictConfig) -> str:
    """Run directory of a cell relative to the sweep root: ``task/encoder/head/freeze/seed=N``.

    With the optional axes where the cell sets them (:func:`leaf_dir`).
    """
    c = cell_of(cfg)
    leaf = leaf_dir(c["seed"], c["order_seed"], c["train_size"], path_axes(cfg))
    return f"{c['task']}/{c['encoder']}/{c['head_label']}/{c['freeze_label']}/{leaf}"


def pairing(cfg: DictConfig) -> str | None:
    """The cell's ``search.pairing`` (:data:`PAIRINGS`); None when the config has none."""
    value = OmegaConf.select(cfg, "search.pairing", default=None)
    return None if value is None else str(value)


def batch_order_seed(cfg: DictConfig) -> int | None:
    """The seed of the cell's training batch order; None: torch's global stream (``seed``).

    ``order_seed`` when set; else, under ``search.pairing: seed``, the cell's ``seed``
    (every head of a setting then sees the same batches at a seed).
    """
    order_seed = OmegaConf.select(cfg, "order_seed", default=None)
    if order_seed is None and pairing(cfg) == "seed":
        return int(cfg.seed)
    return None if order_seed is None else int(order_seed)


def slice_seed(cfg: DictConfig) -> int | None:
    """The seed that draws the cell's own selection slice (``search.pairing: seed``), or None.

    None: the slice comes from ``data_seed`` alone, one for every seed of the setting
    (:mod:`bench.data.selection`).
    """
    return int(cfg.seed) if pairing(cfg) == "seed" else None


def _plain(node: Any) -> dict[str, Any] | None:
    """A config node as a plain dict (None when absent)."""
    if node is None:
        return None
    value = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else None


def reads_cached_states(cfg: DictConfig) -> bool:
    """Whether the cell trains on cached hidden states (a caching strategy, cache enabled)."""
    if cfg.freeze.get("name") not in _CACHE_READERS:
        return False
    cache = cfg.get("cache") or {}
    return cache.get("enabled", True) is not False


def config_hash(cfg: DictConfig) -> str:
    """Content hash of everything that changes a cell's numbers."""
    hashed: dict[str, Any] = {}
    for key in _HASHED_KEYS:  # only these are resolved: the `hydra` node may need a live run
        value = cfg.get(key)
        hashed[key] = (
            OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        )
    for section, keys in _UNHASHED_KEYS.items():
        part = dict(hashed[section] or {})
        for key in keys:
            part.pop(key, None)
        hashed[section] = part
    for section, defaults in _HASHED_UNLESS_DEFAULT.items():
        part = dict(hashed[section] or {})
        for key, default in defaults.items():
            if part.get(key, default) == default:
                part.pop(key, None)
        hashed[section] = part
    # Added with the evaluation protocol: hashed only when not the old behaviour (dev
    # selection, no search), so results made before keep their hashes and the new defaults
    # make them stale (re-trained, the old result kept in superseded/).
    selection = _plain(cfg.get("selection"))
    if selection and selection.get("name", "dev") != "dev":
        for key, default in _SELECTION_DEFAULTS.items():  # added later: hashed when changed
            if selection.get(key, default) == default:
                selection.pop(key, None)
        hashed["selection"] = selection
    search = _plain(cfg.get("search")) or {}
    for key, default in _SEARCH_DEFAULTS.items():  # added later (lock-step trials, pairing)
        if search.get(key, default) == default:
            search.pop(key, None)
    if int(search.get("trials") or 0) > 0:
        hashed["search"] = search
    elif search.get("pairing") is not None:  # a paired cell without a search (or a trial)
        hashed["search"] = {"pairing": search["pairing"]}
    order_seed = cfg.get("order_seed")
    if order_seed is not None:  # added with the seed split: None is the old behaviour
        hashed["order_seed"] = order_seed
    if cfg.get("pair_encoding") == "siamese":  # added later: cross (or null) is as before
        hashed["pair_encoding"] = "siamese"
    if cfg.freeze.get("name") in _CACHE_READERS:
        cache = cfg.get("cache") or {}
        if reads_cached_states(cfg):  # no encoder forward in training:
            hashed["trainer"].pop("compile", None)  # nothing to compile,
            hashed["data"].pop("pad_to_multiple_of", None)  # cached states padded as cached
        changed = {
            key: cache.get(key)
            for key, default in CACHE_DEFAULTS.items()
            if cache.get(key) not in (default, None)
        }
        if changed:
            hashed["cache"] = changed
    return hashlib.sha256(json.dumps(hashed, sort_keys=True, default=str).encode()).hexdigest()
