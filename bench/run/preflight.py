"""Check a cell's config before anything is trained or written.

:func:`check_cell` catches what would otherwise surface deep inside training as an
obscure exception: a required key left unset (``seed``), a name that would become a path
outside the runs directory, a value of the wrong type, a task or freezing strategy that does not
exist, a local data directory without the task's files, an encoder directory without model
or tokenizer files, ``max_length`` above the encoder's position limit, ``top_k`` larger than
the encoder's depth, a head option the head does not have (or one that does not fit the
task), ``pooler init=pretrained`` on an encoder whose pooler is not trained, a
``trainer.precision``, ``trainer.accelerator`` or ``trainer.devices`` Lightning would refuse
(an accelerator without a device on this machine too), a ``cache.dtype`` the cache does not
store. Each raises a :class:`~bench.errors.ConfigError` (or
:class:`~bench.errors.EncoderError`, :class:`~bench.errors.MissingDataError`) naming the key
and the valid choices.

``python -m bench`` (a single run) calls :func:`check_command` before Hydra creates any
directory, so a bad command exits with status 2 and writes nothing. A sweep (``-m``) is
checked by its launch callback (:mod:`bench.run.callbacks`, with :class:`SweepCheck`) before
Hydra writes anything or launches a cell: a value that no cell can use
(:func:`check_values`, :func:`check_machine_values`) refuses the sweep the same way. What
depends on a cell's combination is checked per cell: :func:`bench.run.train.run` calls
:func:`check_cell` first and records the cell as failed with that message, and the sweep
goes on (a cell whose data is missing is retried by the next launch).

The checks that read only the config run first, and this module imports nothing heavy:
torch, transformers and the heads are imported by the encoder and head checks that need
them, Lightning by the trainer checks after them, so a command refused earlier answers
without the seconds those imports take.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
from pathlib import Path
from typing import Any, NamedTuple, get_args

from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench.axes import encoders, freezing, heads
from bench.axes.optional import PAIR_ENCODINGS
from bench.cell import PAIRINGS, SEED_RANGE, check_identity, reads_cached_states
from bench.data import selection, tasks
from bench.data.location import check_local_data, count_examples
from bench.data.padding import check_pad_multiple, widest_batch
from bench.errors import ConfigError, EncoderError, HeadbenchError
from bench.model.compiled import check_compile_mode
from bench.model.matmul import DEFAULT_MATMUL_PRECISION, check_matmul_precision
from bench.paths import config_dir
from bench.run import search
from bench.run.allocator import check_malloc_mode
from bench.run.plan import (
    PlannedCell,
    check_output_dirs,
    collision_message,
    collisions,
    hydra_context,
)


class Range(NamedTuple):
    """The valid values of a key: its types (``None`` = null) and its bounds.

    A bound of None is no bound; ``high`` may name another key, whose value is the bound.
    ``open`` names the bounds that are themselves outside the range (``"low"``, ``"high"``).
    A float must also be finite: NaN and infinity are refused whatever the bounds.
    """

    types: tuple[type | None, ...]
    low: float | None = None
    high: float | str | None = None
    open: str = ""


_ABSENT = object()
INT = (int,)
NUMBER = (int, float)
FLAG = Range((bool,))
RATE = Range(NUMBER, 0)  # a learning rate, a weight decay: no upper bound (a huge one diverges)
FRACTION = Range(NUMBER, 0, 1, "high")  # a dropout probability, an Adam beta
#: Every numeric option of ``conf/`` (and the switches), one range each: :func:`check_types`.
#: The seeds and ``search.trials`` are checked with the run directory's names
#: (:func:`bench.cell.check_identity`); ``selection.size``, ``search.seed`` and
#: ``freeze.k`` by the checks of their groups.
TYPED_KEYS: dict[str, Range] = {
    "data.train_size": Range((int, None), 1),
    "data.max_length": Range(INT, 2),  # at most the encoder's positions: check_max_length
    "data.batch_size": Range(INT, 1),
    "data.eval_batch_size": Range(INT, 1),
    "data.num_workers": Range(INT, 0),
    "data.pad_to_multiple_of": Range((int, None), 1),
    "cache.enabled": FLAG,
    "cache.auto_max_gb": Range(NUMBER, 0),
    "cache.resident_max_gb": Range(NUMBER, 0, open="low"),
    "runtime.cells_per_gpu": Range((int, None), 1),
    "runtime.gpu_memory_gb": Range((int, float, None), 0, open="low"),
    "runtime.loss_check_steps": Range(INT, 1),
    "trainer.max_epochs": Range(INT, 1),
    "trainer.gradient_clip_val": Range((int, float, None), 0),  # 0 or null: no clipping
    "trainer.log_every_n_steps": Range(INT, 0),  # 0: Lightning logs no steps
    # evaluations without improvement on the selection slice before training stops; null: off
    "trainer.early_stopping.patience": Range((int, None), 1),
    "optim.encoder_lr": RATE,
    "optim.head_lr": RATE,
    "optim.frozen_head_lr": RATE,
    "optim.weight_decay": RATE,
    "optim.warmup_ratio": Range(NUMBER, 0, 1),
    "optim.adam_eps": Range(NUMBER, 0, open="low"),
    "optim.betas[0]": FRACTION,
    "optim.betas[1]": FRACTION,
    "optim.fused": FLAG,
    "head.mlp": FLAG,
    "head.mlp_hidden": Range((int, None), 1),
    "head.dropout": FRACTION,
    "head.lstm_hidden": Range(INT, 2),  # even: the head's own check (two directions)
    "head.lstm_layers": Range(INT, 1),
    "head.lstm_dropout": FRACTION,
    "freeze.lr": RATE,  # bitfit, lora
    "freeze.ft_head_lr": Range((int, float, None), 0),  # lpft
    "freeze.factor": Range(NUMBER, 0, 1, "low"),  # llrd
    "freeze.rank": Range(INT, 1),  # lora
    "freeze.alpha": Range(NUMBER),  # lora: any finite scale
    "freeze.dropout": FRACTION,
    "freeze.every": Range(INT, 1),  # gradual
    "freeze.group_size": Range(INT, 1),  # gradual; at most the encoder's depth: check_cell
    "freeze.probe_epochs": Range(INT, 1, "trainer.max_epochs", "high"),  # lpft: some tuning
    "search.order_seed": Range((int, None), *SEED_RANGE),
    # a search space key of its own: head_lr = head_lr_ratio × encoder_lr (bench/run/search.py)
    "search.space.head_lr_ratio": RATE,
    # what a sweep does with finished cells (bench/run/resume.py): `+force=no` is not false
    "force": FLAG,
    "rerun_failed": FLAG,
    "rerun_environmental": FLAG,
}
#: Top-level keys a command line adds with ``+`` (:func:`check_additions`).
FLAG_ADDITIONS = ("force", "rerun_failed", "rerun_environmental")
#: How close a ``+`` key must be to an existing one to be called its misspelling (difflib).
TYPO_CUTOFF = 0.75
_ROBERTA_LIKE = ("roberta", "xlm-roberta", "camembert")  # 2 positions reserved for padding


def _type_names(types: tuple[type | None, ...]) -> str:
    names: dict[type | None, str] = {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        None: "null",
    }
    named = [t for t in types if not (t is int and float in types)]  # a number: int or float
    return " or ".join(names.get(t) or str(getattr(t, "__name__", t)) for t in named)


def check_value(name: str, value: Any, rule: Range, cfg: DictConfig) -> None:
    """Check one value against its :class:`Range`.

    Args:
        name: The key as the message names it (``optim.betas[0]``).
        value: The value given.
        rule: Its types and bounds.
        cfg: The config, for a bound that names another key.

    Raises:
        ConfigError: Naming the key, the value given and the valid types or range.
    """
    types, low, high, open_ends = rule
    if isinstance(value, bool) or types == (bool,):
        ok = isinstance(value, bool) and bool in types
    else:
        ok = any(isinstance(value, t) if t else value is None for t in types)
    if not ok:
        raise ConfigError(f"{name}={value!r}: must be {_type_names(types)}")
    high_text = str(high)
    if isinstance(high, str):  # another key's value (checked before this key)
        high = OmegaConf.select(cfg, high, default=None)
        high_text += f" ({high})"
    if value is None or isinstance(value, bool):
        return
    if (
        (isinstance(value, float) and not math.isfinite(value))
        or (low is not None and (value <= low if "low" in open_ends else value < low))
        or (high is not None and (value >= high if "high" in open_ends else value > high))
    ):
        bounds = []
        if low is not None:
            bounds.append(f"{'above' if 'low' in open_ends else 'at least'} {low}")
        if high is not None:
            bounds.append(f"{'below' if 'high' in open_ends else 'at most'} {high_text}")
        words = " and ".join(bounds)
        if float in types:
            words = ", ".join(["a finite number", words] if words else ["a finite number"])
        raise ConfigError(f"{name}={value!r}: must be {words}")


def check_types(cfg: DictConfig) -> None:
    """Check every key of :data:`TYPED_KEYS` that the config has, and each searched value.

    Each value of a search space (``search.space.<family>.<key>``, every family) is checked
    against the range of the ``optim`` key it sets.

    Raises:
        ConfigError: Naming the key, the value given and what is valid.
    """
    for key, rule in TYPED_KEYS.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is not _ABSENT:
            check_value(key, value, rule, cfg)
    betas = OmegaConf.select(cfg, "optim.betas", default=None)
    if betas is not None and not (isinstance(betas, ListConfig) and len(betas) == 2):
        raise ConfigError(f"optim.betas={betas!r}: must be a list of two numbers [beta1, beta2]")
    grouping = OmegaConf.select(cfg, "data.group_by_length", default=False)
    if not (isinstance(grouping, bool) or grouping == "bucket"):
        raise ConfigError(
            f"data.group_by_length={grouping!r}: valid choices: false, true (the HF Trainer's "
            "length-grouped mega-batches), bucket (bench/data/samplers.py)"
        )
    space: Any = OmegaConf.select(cfg, "search.space", default=None)
    space = OmegaConf.to_container(space, resolve=True) if isinstance(space, DictConfig) else {}
    for family, keys in space.items():
        for key, values in keys.items() if isinstance(keys, dict) else ():
            found = TYPED_KEYS.get(f"optim.{key}") or TYPED_KEYS.get(f"search.space.{key}")
            if found is None or not isinstance(values, list):
                continue  # optim.betas (lists); a malformed space: search.space_of names it
            for i, value in enumerate(values):
                check_value(f"search.space.{family}.{key}[{i}]", value, found, cfg)


def check_additions(cfg: DictConfig) -> None:
    """Refuse a ``+key=value`` addition that misspells a key the config has.

    Hydra refuses an unknown key and suggests adding it with ``+``; a user who follows
    that for a misspelling (``+data.batchsize=8``) gets a key nothing reads and a run that
    silently ignores it. An addition is refused when its name is close to one the config
    already has beside it (:data:`TYPO_CUTOFF`) or, at the top level, to a flag of
    :data:`FLAG_ADDITIONS`; config groups (``+experiment=...``) and ``++`` are left alone.

    Args:
        cfg: A composed config whose ``hydra.overrides.task`` holds the command's overrides.

    Raises:
        ConfigError: Naming the addition and the key it probably meant.
    """
    overrides = OmegaConf.select(cfg, "hydra.overrides.task", default=None) or []
    groups = {p.name for p in config_dir().iterdir() if p.is_dir()}
    for text in overrides:
        if not str(text).startswith("+") or str(text).startswith("++"):
            continue
        key = str(text)[1:].partition("=")[0]
        if key in FLAG_ADDITIONS or "/" in key or key in groups:
            continue
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
        if not isinstance(node, DictConfig):
            continue
        known = [str(k) for k in node if str(k) != leaf]
        if not parent:
            known = [k for k in known if k != "hydra"] + list(FLAG_ADDITIONS)
        close = difflib.get_close_matches(leaf, known, n=1, cutoff=TYPO_CUTOFF)
        if close:
            meant = f"{parent}.{close[0]}" if parent else close[0]
            how = f"+{meant}=..." if meant in FLAG_ADDITIONS else f"{meant}=... (without +)"
            raise ConfigError(
                f"+{key}: adds a key that nothing reads, and {meant!r} exists; did you mean {how}?"
            )


def _encoder_facts(encoder: dict[str, Any]) -> dict[str, Any]:
    """Depth, width, position limit of an encoder, from its config.json; tokenizer loads.

    Checked once per process and encoder config (reading the config and loading the
    tokenizer take about 40 ms, and a sweep checks the same encoder for every cell); a
    failed check is not kept, so it is made again and fails again.
    """
    return dict(_checked_encoder(json.dumps(encoder, sort_keys=True)))


@functools.lru_cache(maxsize=64)
def _checked_encoder(key: str) -> tuple[tuple[str, Any], ...]:
    # Imported here, as late as the first check that needs them (transformers, torch:
    # seconds): a command refused by an earlier check exits without loading them.
    from transformers import AutoConfig

    from bench.model.encoders import load_tokenizer, max_positions, resolve_source

    encoder = json.loads(key)
    path = resolve_source(encoder["source"])
    try:
        config = AutoConfig.from_pretrained(
            path,
            revision=encoder.get("revision") or None,
            trust_remote_code=bool(encoder.get("trust_remote_code", False)),
        )
    except (OSError, ValueError) as err:
        raise EncoderError(
            f"encoder {encoder['name']!r}: cannot read config from {path}: {err}"
        ) from err
    load_tokenizer(encoder)  # no tokenizer files: EncoderError naming the path
    return (
        ("model_type", config.model_type),
        ("hidden_size", int(config.hidden_size)),
        ("num_layers", int(config.num_hidden_layers)),
        ("max_positions", max_positions(config)),
    )


def check_max_length(
    max_length: int,
    name: str,
    model_type: str,
    max_positions: int,
    pad_to_multiple_of: int | None = None,
) -> None:
    """``data.max_length``, padded to ``data.pad_to_multiple_of``, must fit the encoder's positions.

    Raises:
        ConfigError: If it does not, naming the valid range.
    """
    if max_positions <= 0:
        return  # relative positions (e.g. DeBERTa): no hard limit
    limit = max_positions - (2 if model_type in _ROBERTA_LIKE else 0)
    if max_length > limit:
        raise ConfigError(
            f"data.max_length={max_length} exceeds the position limit of encoder {name!r} "
            f"({limit}); valid values: 1..{limit}"
        )
    widest = widest_batch(max_length, pad_to_multiple_of)
    if widest > limit:
        raise ConfigError(
            f"data.pad_to_multiple_of={pad_to_multiple_of} pads data.max_length={max_length} "
            f"to {widest} tokens, beyond the position limit of encoder {name!r} ({limit}); "
            f"valid: a multiple that rounds {max_length} up to at most {limit}, or null"
        )


def check_protocol(cfg: DictConfig) -> None:
    """Check the ``selection`` and ``search`` groups (what chooses the epoch and the trial).

    Raises:
        ConfigError: For an unknown selection mode, a slice below its minimum size, an
            unknown ``selection.carve``, an unknown sampler, a search space key that is not
            an optimizer key, or a budget beyond the grid.
    """
    name = OmegaConf.select(cfg, "selection.name", default="dev")
    if name not in selection.MODES:
        raise ConfigError(f"selection.name={name!r}; valid choices: {', '.join(selection.MODES)}")
    if name == "heldout":
        size = OmegaConf.select(cfg, "selection.size", default=None)
        if isinstance(size, bool) or not isinstance(size, int) or size < selection.MIN_SIZE:
            raise ConfigError(
                f"selection.size={size!r}: must be an integer >= {selection.MIN_SIZE} "
                "(examples held out from train to choose the epoch and the trial)"
            )
        carve = OmegaConf.select(cfg, "selection.carve", default=selection.DEFAULT_CARVE)
        if carve not in selection.CARVES:
            raise ConfigError(
                f"selection.carve={carve!r}; valid choices: {', '.join(selection.CARVES)} "
                "(first: one slice for every training size of a learning curve)"
            )
    stopping = OmegaConf.select(cfg, "trainer.early_stopping", default=None)
    if stopping is not None and not isinstance(stopping, DictConfig):
        raise ConfigError(
            f"trainer.early_stopping={stopping!r}: give the patience as "
            "+trainer.early_stopping.patience=N (evaluations without improvement)"
        )
    paired = OmegaConf.select(cfg, "search.pairing", default=None)
    if paired not in PAIRINGS:
        raise ConfigError(f"search.pairing={paired!r}; valid choices: null, seed")
    if paired is not None and OmegaConf.select(cfg, "order_seed", default=None) is not None:
        raise ConfigError(
            f"order_seed={cfg.order_seed} with search.pairing={paired}: the pairing draws the "
            "batch order from `seed`; leave order_seed null (or search.pairing=null)"
        )
    if search.enabled(cfg):
        for key, valid in (("sampler", search.SAMPLERS), ("tie_rule", search.TIE_RULES)):
            value = OmegaConf.select(cfg, f"search.{key}", default=valid[0])
            if value not in valid:
                raise ConfigError(f"search.{key}={value!r}; valid choices: {', '.join(valid)}")
        if paired is not None and OmegaConf.select(cfg, "search.order_seed") is not None:
            raise ConfigError(
                f"search.order_seed with search.pairing={paired}: the trials train the cell's "
                "own seed and batch order; leave search.order_seed null"
            )
        seed = 0 if paired else OmegaConf.select(cfg, "search.seed")  # paired: the cell's
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"search.seed={seed!r}: must be a non-negative integer")
        sampler = str(cfg.search.get("sampler"))
        search.draw_trials(search.space_of(cfg), cfg.search.trials, seed, sampler)


def check_cached_precision(cfg: DictConfig) -> None:
    """Check ``trainer.matmul_precision``, which cells that read cached states keep at highest.

    Raises:
        ConfigError: For an unknown precision, or another than highest for a cell that reads
            cached hidden states (the cache does not record the precision of its states).
    """
    precision = check_matmul_precision(OmegaConf.select(cfg, "trainer.matmul_precision"))
    if precision != DEFAULT_MATMUL_PRECISION and reads_cached_states(cfg):
        raise ConfigError(
            f"trainer.matmul_precision={precision!r} with freeze={cfg.freeze.name}: this cell "
            "reads cached hidden states, whose cache does not record the precision they were "
            f"computed with; valid choices here: trainer.matmul_precision="
            f"{DEFAULT_MATMUL_PRECISION}, or cache.enabled=false"
        )


#: ``trainer.devices`` as Lightning takes it: a count, -1 (every GPU), auto, or GPU indices.
DEVICES_HELP = (
    "must be a positive integer (how many devices), -1 (every GPU), auto, or a list of GPU "
    "indices ([0, 1])"
)


def _device_indices(value: object) -> list[int] | None:
    """GPU indices given as a list (``[0, 1]``) or a string (``"0,1"``); None if not that."""
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(",")]
        if "," not in value or not all(p.isdigit() for p in parts if p) or not any(parts):
            return None
        return [int(p) for p in parts if p]
    if isinstance(value, (list, tuple, ListConfig)):
        items = list(value)
        if items and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
            return [int(i) for i in items]
    return None


def check_devices(devices: object) -> None:
    """``trainer.devices`` is a positive count, -1, ``auto`` or a list of GPU indices.

    Raises:
        ConfigError: For 0, another negative number, an empty list or another type.
    """
    if devices is None or devices == "auto" or _device_indices(devices) is not None:
        return
    count = devices
    if isinstance(devices, str) and devices.strip().lstrip("-").isdigit():
        count = int(devices)
    if isinstance(count, int) and not isinstance(count, bool) and (count >= 1 or count == -1):
        return
    raise ConfigError(f"trainer.devices={devices!r}: {DEVICES_HELP}")


def lightning_precisions() -> tuple[str | int, ...]:
    """Every ``precision`` value the installed Lightning accepts (its own list)."""
    from lightning.fabric.connector import _PRECISION_INPUT  # what Trainer(precision=) checks

    def flat(annotation: object) -> list[str | int]:
        args = get_args(annotation)
        return [v for a in args for v in flat(a)] if args else [annotation]  # type: ignore[list-item]

    return tuple(flat(_PRECISION_INPUT))


def check_precision(precision: object) -> None:
    """``trainer.precision`` is one of Lightning's (null: Lightning's default).

    Raises:
        ConfigError: Naming the value and Lightning's valid choices.
    """
    valid = lightning_precisions()
    if precision is None or (not isinstance(precision, bool) and precision in valid):
        return
    names = ", ".join(dict.fromkeys(str(v) for v in sorted(valid, key=lambda v: type(v) is int)))
    raise ConfigError(f"trainer.precision={precision!r}: valid choices (Lightning's): {names}")


def check_accelerator(accelerator: object, here: bool = True) -> None:
    """``trainer.accelerator`` names one of Lightning's, usable here when the cell runs here.

    Args:
        accelerator: The value (``auto``, ``cpu``, ``gpu``, ``cuda``, ...).
        here: Whether the cell runs on this machine (a cluster node may have what this
            machine lacks).

    Raises:
        ConfigError: For a name Lightning does not know, or (``here``) one without a device
            on this machine: ``gpu`` or ``cuda`` where no CUDA device is visible.
    """
    from lightning.pytorch.accelerators import AcceleratorRegistry

    names = sorted(AcceleratorRegistry.available_accelerators())
    if not isinstance(accelerator, str) or accelerator not in ("auto", "gpu", *names):
        valid = ", ".join(["auto", "gpu", *names])
        raise ConfigError(f"trainer.accelerator={accelerator!r}: valid choices: {valid}")
    if not here or accelerator == "auto":
        return
    usable = [n for n in names if AcceleratorRegistry[n]["accelerator"].is_available()]
    if any(n in usable for n in (("cuda", "mps") if accelerator == "gpu" else (accelerator,))):
        return
    why = f"no {accelerator} device on this machine"
    if accelerator in ("gpu", "cuda"):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = "no CUDA device is visible to this process" + (
            f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        )
    raise ConfigError(
        f"trainer.accelerator={accelerator!r}: {why}; valid here: auto, {', '.join(usable)}"
    )


def check_devices_here(accelerator: str, devices: object) -> None:
    """``trainer.devices`` as Lightning parses it for the accelerator it will use here.

    Raises:
        ConfigError: With Lightning's reason, e.g. -1 on a CPU or more GPUs than there are.
    """
    if devices is None or devices == "auto":
        return
    from lightning.fabric.utilities.device_parser import _select_auto_accelerator
    from lightning.pytorch.accelerators import AcceleratorRegistry

    name = _select_auto_accelerator() if accelerator == "auto" else accelerator
    if name == "gpu":
        name = "mps" if AcceleratorRegistry["mps"]["accelerator"].is_available() else "cuda"
    value = list(devices) if isinstance(devices, ListConfig) else devices
    try:
        AcceleratorRegistry[name]["accelerator"].parse_devices(value)
    except Exception as err:  # Lightning's MisconfigurationException, TypeError, ValueError
        raise ConfigError(
            f"trainer.devices={devices!r} with trainer.accelerator={accelerator} ({name} "
            f"here): {err}"
        ) from None


def check_cache_dtype(dtype: object) -> None:
    """``cache.dtype`` is a dtype the hidden-state cache stores (null: its default).

    Raises:
        ConfigError: Naming the value and the valid choices.
    """
    from bench.cache.keys import DTYPES  # torch

    if dtype is not None and dtype not in DTYPES:
        raise ConfigError(f"cache.dtype={dtype!r}; valid choices: {', '.join(DTYPES)}")


#: Launchers whose cells run on other machines: what is checked against this one is not.
REMOTE_LAUNCHERS = ("SlurmLauncher",)


def runs_here(cfg: DictConfig) -> bool:
    """Whether a cell of this config runs on this machine (not on a cluster's node).

    Args:
        cfg: A config with its ``hydra`` node (a dry run's, a sweep's), or a cell's own.

    Returns:
        False under ``hydra/launcher=submitit_slurm``, and under Ray with a cluster address;
        True otherwise (a single run, the basic, joblib, gpu_pack and local launchers).
    """
    target = OmegaConf.select(
        cfg, "hydra.launcher._target_", default="", throw_on_resolution_failure=False
    )
    if str(target).endswith(REMOTE_LAUNCHERS):
        return False
    if str(target).endswith("RayLauncher"):
        address = OmegaConf.select(
            cfg, "hydra.launcher.ray.init.address", default=None, throw_on_resolution_failure=False
        )
        return not address
    return True


#: Lightning's options that train or score on part of a split, and their values that take all
#: of it (``limit_*``: the float 1.0; an integer counts batches): ``result.json`` records the
#: whole split, so a part would make it say what did not happen.
WHOLE_SPLIT_VALUES: dict[str, tuple[float, ...]] = {
    "trainer.limit_train_batches": (1.0,),
    "trainer.limit_val_batches": (1.0,),
    "trainer.overfit_batches": (0, 0.0),
}


def check_whole_splits(cfg: DictConfig) -> None:
    """Refuse a Lightning option that would train or score a cell on part of a split.

    Raises:
        ConfigError: Naming the key and the sizes headbench takes instead.
    """
    for key, whole in WHOLE_SPLIT_VALUES.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and not any(type(value) is type(w) and value == w for w in whole):
            raise ConfigError(
                f"{key}={value!r}: Lightning would use part of a split while result.json "
                "records all of it; size the splits with data.train_size and selection.size "
                "(the selection slice), and leave this key out"
            )


def check_values(cfg: DictConfig) -> None:
    """Check what a cell's config says key by key, reading nothing else: cheap, torch-free.

    A value refused here is wrong whatever the rest of the cell is (a type, a bound, an
    unknown name or mode, a device count of 0), so a sweep holding it is refused as a whole
    (:class:`SweepCheck`); what depends on a combination (an encoder's depth or positions,
    a head's fit to the task, the data of a task) is left to :func:`check_cell`.

    Raises:
        ConfigError: For a bad value, naming the key and the valid choices.
    """
    check_identity(cfg)
    check_types(cfg)
    check_additions(cfg)
    check_malloc_mode(OmegaConf.select(cfg, "runtime.malloc", default="default"))
    check_compile_mode(OmegaConf.select(cfg, "trainer.compile", default=False))
    check_matmul_precision(OmegaConf.select(cfg, "trainer.matmul_precision"))
    check_devices(OmegaConf.select(cfg, "trainer.devices", default=None))
    check_whole_splits(cfg)
    tasks.validate(cfg.task.name)
    check_protocol(cfg)
    check_studies(cfg)
    freezing.validate_options(_plain(cfg, "freeze"))
    encoders.validate(_plain(cfg, "encoder"))


def check_studies(cfg: DictConfig) -> None:
    """Check an experiment's ``studies`` and ``equivalence`` keys at launch.

    The keys change no cell (they group the verdicts and set their margins), so a malformed
    one would otherwise surface after the whole sweep has trained.

    Raises:
        ConfigError: Naming the preset (where the config knows it), the entry and the valid
            choices (:func:`bench.results.studies.parse_studies`, ``parse_margins``).
    """
    from bench.results import studies  # pandas: only when needed

    try:
        preset = OmegaConf.select(cfg, "hydra.runtime.choices.experiment", default=None)
    except OmegaConfBaseException:  # the `hydra` node of a config composed outside a run
        preset = None
    source = f"conf/experiment/{preset}.yaml (or an override)" if preset else "the config"
    for key, parse in (
        (studies.STUDIES_KEY, studies.parse_studies),
        (studies.EQUIVALENCE_KEY, studies.parse_margins),
    ):
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None:
            plain = (
                OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
            )
            parse(plain, source)


def _plain(cfg: DictConfig, key: str) -> dict[str, Any]:
    """One group of the cell as plain values (the `hydra` node may need a live run)."""
    plain = OmegaConf.to_container(cfg[key], resolve=True)
    assert isinstance(plain, dict)
    return {str(k): v for k, v in plain.items()}


def check_train_size(cfg: DictConfig, spec: tasks.Task) -> None:
    """``data.train_size`` fits the local training file, whose rows the dry run counts.

    Known without loading data only for a local GLUE file
    (:func:`bench.data.location.count_examples`); elsewhere the cell refuses it when it
    loads the split. ``selection=heldout`` keeps examples out of the subset to select on.

    Raises:
        ConfigError: Naming ``data.train_size``, the examples there are and the valid range.
    """
    size = OmegaConf.select(cfg, "data.train_size", default=None)
    n = count_examples(OmegaConf.select(cfg, "data.dir", default=None), spec)
    if not isinstance(size, int) or n is None:
        return
    held, why = 0, ""
    if OmegaConf.select(cfg, "selection.name", default="dev") == "heldout":
        held = selection.MIN_SIZE
        why = f" (selection=heldout keeps at least {held} of them out to select on)"
        if OmegaConf.select(cfg, "selection.carve", default=selection.DEFAULT_CARVE) == "first":
            held = int(cfg.selection.size)
            why = f" (selection.carve=first holds out selection.size={held} of them first)"
    if size > n - held:
        raise ConfigError(
            f"data.train_size={size} but {spec.name} train has {n} examples; valid: "
            f"1..{n - held}{why}, or null"
        )


def check_pair_encoding(cfg: DictConfig, spec: tasks.Task) -> bool:
    """``pair_encoding`` is unset, or a valid choice on a sentence-pair task.

    Args:
        cfg: The cell's config.
        spec: Its task.

    Returns:
        Whether the cell's pairs are encoded one sentence at a time (``siamese``).

    Raises:
        ConfigError: For an unknown choice, or any choice on a task without sentence pairs
            (single sentences, tokens), naming the tasks that take it.
    """
    value = OmegaConf.select(cfg, "pair_encoding", default=None)
    if value is None:
        return False
    if value not in PAIR_ENCODINGS:
        raise ConfigError(
            f"pair_encoding={value!r}; valid choices: {', '.join(PAIR_ENCODINGS)}, or null"
        )
    if len(getattr(spec, "text_fields", ())) != 2:
        pairs = [name for name, task in tasks.TASKS.items() if len(task.text_fields) == 2]
        raise ConfigError(
            f"pair_encoding={value} but task {spec.name!r} has no sentence pairs; valid "
            f"tasks: {', '.join(pairs)} (elsewhere leave pair_encoding=null)"
        )
    return bool(value == "siamese")


def check_cell(cfg: DictConfig, here: bool = True) -> None:
    """Check one composed cell config; cheap (config files and the tokenizer, no weights).

    Args:
        cfg: The cell's config.
        here: Whether the cell runs on this machine (:func:`runs_here`): then its local data
            files, its accelerator and its device count are checked against this machine.

    Raises:
        ConfigError: For a bad value, naming the key and the valid choices.
        EncoderError: For an encoder without model or tokenizer files.
        MissingDataError: For a local data directory without the task's files.
    """
    check_values(cfg)
    check_cached_precision(cfg)
    spec = tasks.validate(cfg.task.name)
    pair = check_pair_encoding(cfg, spec)
    if here:
        check_local_data(OmegaConf.select(cfg, "data.dir", default=None), spec)
        check_train_size(cfg, spec)
    plain = {key: _plain(cfg, key) for key in ("encoder", "head", "freeze", "data")}
    encoder, head, freeze = plain["encoder"], plain["head"], plain["freeze"]
    strategy = freezing.validate_options(freeze)
    facts = _encoder_facts(encoder)
    check_max_length(
        int(plain["data"]["max_length"]),
        encoder["name"],
        facts["model_type"],
        facts["max_positions"],
        check_pad_multiple(plain["data"].get("pad_to_multiple_of")),
    )
    layers = facts["num_layers"]
    if strategy.takes_k:
        freezing.check_k(strategy.name, freeze.get("k"), layers, encoder["name"])
    if "group_size" in freeze:  # gradual: layers unfrozen at a time, at most the encoder's
        check_value("freeze.group_size", freeze["group_size"], Range(INT, 1, layers), cfg)
    # The head's own options first: a head/task mismatch is the more basic error.
    from bench.model.task_types import task_type  # the heads and torchmetrics: seconds

    if head.get("name") == heads.ANCHOR:  # fitted, not trained: no module (bench/run/anchors.py)
        heads.check_anchor(head, spec, strategy.name, reads_cached_states(cfg))
        if pair:
            raise ConfigError(
                "head=anchor with pair_encoding=siamese: an anchor reads the cross-encoded "
                "pair's features; valid: pair_encoding=null (head.features=cosine already "
                "encodes each sentence alone)"
            )
    else:
        task_type(spec).build_head(head, facts["hidden_size"], layers, pair=pair)
    if head.get("init") == "pretrained" and encoder.get("pooler") != "trained":
        raise ConfigError(
            f"head.init=pretrained needs a trained pooler, but encoder {encoder['name']!r} "
            f"declares pooler={encoder.get('pooler')!r}; valid choices here: head.init=random"
        )
    check_machine_values(cfg, here)


def check_machine_values(cfg: DictConfig, here: bool = True) -> None:
    """The values checked against Lightning and the cache: they import torch and Lightning.

    Args:
        cfg: The cell's config.
        here: Whether the cell runs on this machine (its accelerator must be usable here).

    Raises:
        ConfigError: For ``trainer.precision``, ``trainer.accelerator``, ``trainer.devices``
            or ``cache.dtype``, naming the key, the value and the valid choices.
    """
    check_precision(OmegaConf.select(cfg, "trainer.precision", default=None))
    accelerator = OmegaConf.select(cfg, "trainer.accelerator", default="auto")
    check_accelerator(accelerator, here)
    if here:
        check_devices_here(accelerator, OmegaConf.select(cfg, "trainer.devices", default=None))
    check_cache_dtype(OmegaConf.select(cfg, "cache.dtype", default=None))


def compose_single_run(config_dir: str | Path, overrides: list[str]) -> DictConfig | None:
    """Compose the config of a single run as Hydra will; None when it is a multirun."""
    with hydra_context(config_dir):
        hydra = GlobalHydra.instance().hydra
        assert hydra is not None
        if hydra.get_mode(config_name="config", overrides=overrides) == RunMode.MULTIRUN:
            return None
        return hydra.compose_config("config", overrides, run_mode=RunMode.RUN)


def check_command(config_dir: str | Path, overrides: list[str]) -> str | None:
    """Check a single-run command line; return the error message, or None if it is fine.

    Composition errors (an unknown group option, a misspelled key: Hydra's own message
    lists the valid options) and :func:`check_cell` errors are both returned as text. A
    command whose config makes it a sweep (``hydra.mode: MULTIRUN``) is checked by the
    sweep's launch callback, which plans every cell anyway (:class:`SweepCheck`).
    """
    try:
        cfg = compose_single_run(config_dir, overrides)
        if cfg is not None:
            check_cell(cfg)
            check_output_dirs(cfg, multirun=False)
    except (HydraException, OmegaConfBaseException) as err:
        return f"error composing the config: {err}"
    except HeadbenchError as err:  # ConfigError, EncoderError, MissingDataError
        return f"error: {err}"
    return None


class SweepCheck:
    """What a sweep's launch checks before it trains: every cell's values, once per setting.

    Call it on each composed cell to train (as :func:`bench.run.plan.plan`'s ``check``):
    :func:`check_values` refuses a value no cell can use, and a ``data.dir`` that does not
    exist is refused too. Then :meth:`verdict` on the plan's
    cells gives the sweep's one refusal, or None: a refused cell, cells sharing a run
    directory, or a trainer or cache setting :func:`check_machine_values` refuses (checked
    once per distinct setting: it imports Lightning).
    """

    #: The keys :func:`check_machine_values` reads: a setting is checked once.
    MACHINE_KEYS = ("trainer.precision", "trainer.accelerator", "trainer.devices", "cache.dtype")

    def __init__(self) -> None:
        self.configs: list[DictConfig] = []
        self.errors: list[HeadbenchError] = []

    def __call__(self, cfg: DictConfig) -> None:
        """Check one cell's values and, where it runs here, that its data root exists.

        Raises:
            ConfigError: What :func:`check_values` raises.
            MissingDataError: For a local data root (``data.dir``) that does not exist: no
                cell can read it (a task whose files are missing there fails alone).
        """
        try:
            check_values(cfg)
            data_dir = OmegaConf.select(cfg, "data.dir", default=None)
            if data_dir is not None and runs_here(cfg) and not Path(data_dir).is_dir():
                check_local_data(data_dir, tasks.validate(cfg.task.name))
        except HeadbenchError as err:
            self.errors.append(err)
            raise
        self.configs.append(cfg)

    def verdict(self, cells: list[PlannedCell]) -> str | None:
        """The sweep's refusal (one message, ``error: ...``), or None when it may launch."""
        refused = [cell for cell in cells if cell.will_run and cell.problem]
        if refused:
            return _refusal(self.errors[0], refused)
        shared = collisions(cells)
        if shared:
            return f"error: {collision_message(shared)}"
        seen: set[str] = set()
        for cell, cfg in zip([c for c in cells if c.will_run], self.configs, strict=True):
            here = runs_here(cfg)
            values = [str(OmegaConf.select(cfg, key, default=None)) for key in self.MACHINE_KEYS]
            setting = repr([here, *values])
            if setting in seen:
                continue
            seen.add(setting)
            try:
                check_machine_values(cfg, here)
            except ConfigError as err:
                return _refusal(err, [cell])
        return None


def _refusal(err: Exception, cells: list[PlannedCell]) -> str:
    """One message for the cells a check refused: the first one's, and how many more."""
    more = len(cells) - 1
    others = f"; {more} more cell(s) refused (--dry-run lists each)" if more else ""
    return f"error: {err} (cell: {' '.join(cells[0].overrides)}){others}"
