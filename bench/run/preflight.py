"""Check a cell's config before anything is trained or written.

:func:`check_cell` catches what would otherwise surface deep inside training as an
obscure exception: a required key left unset (``seed``), a name that would become a path
outside the runs directory, a value of the wrong type, a task or freezing strategy that does not
exist, an encoder directory without model or tokenizer files, ``max_length`` above the
encoder's position limit, ``top_k`` larger than the encoder's depth, a head option the
head does not have (or one that does not fit the task), ``pooler init=pretrained`` on an
encoder whose pooler is not trained. Each raises a :class:`~bench.errors.ConfigError` (or
:class:`~bench.errors.EncoderError`) naming the key and the valid choices.

``python -m bench`` (a single run) calls :func:`check_command` before Hydra creates any
directory, so a bad command exits with status 2 and writes nothing; in a sweep,
:func:`bench.run.train.run` calls :func:`check_cell` first and records the cell as failed
with that message, and the sweep goes on.

The checks that read only the config run first, and this module imports nothing heavy:
torch, transformers and the heads are imported by the encoder and head checks that need
them, so a command refused earlier answers without the seconds those imports take.
"""

from __future__ import annotations

import difflib
import functools
import json
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bench.axes import encoders, freezing
from bench.cell import check_identity, reads_cached_states
from bench.data import selection, tasks
from bench.data.padding import check_pad_multiple, widest_batch
from bench.errors import ConfigError, EncoderError
from bench.model.compiled import check_compile_mode
from bench.model.matmul import DEFAULT_MATMUL_PRECISION, check_matmul_precision
from bench.paths import config_dir
from bench.run import search
from bench.run.allocator import check_malloc_mode
from bench.run.plan import check_output_dirs, hydra_context

# Keys with a fixed type: (allowed types, lower bound or None). `None` in the types = null.
INT = (int,)
NUMBER = (int, float)
TYPED_KEYS: dict[str, tuple[tuple[type | None, ...], float | None]] = {
    "seed": (INT, None),
    "data_seed": (INT, None),
    "data.train_size": ((int, None), 1),
    "data.max_length": (INT, 2),
    "data.batch_size": (INT, 1),
    "data.eval_batch_size": (INT, 1),
    "data.num_workers": (INT, 0),
    "data.pad_to_multiple_of": ((int, None), 1),
    "trainer.max_epochs": (INT, 1),
    "optim.encoder_lr": (NUMBER, 0),
    "optim.head_lr": (NUMBER, 0),
    "optim.frozen_head_lr": (NUMBER, 0),
    "optim.weight_decay": (NUMBER, 0),
    "optim.warmup_ratio": (NUMBER, 0),
    "optim.adam_eps": (NUMBER, 0),
    "optim.fused": ((bool,), None),
    "runtime.loss_check_steps": (INT, 1),
    "head.mlp": ((bool,), None),
    "head.dropout": (NUMBER, 0),
    "cache.enabled": ((bool,), None),
    # what a sweep does with finished cells (bench/run/resume.py): `+force=no` is not false
    "force": ((bool,), None),
    "rerun_failed": ((bool,), None),
    "rerun_environmental": ((bool,), None),
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
    return " or ".join(names.get(t) or str(getattr(t, "__name__", t)) for t in types)


def check_types(cfg: DictConfig) -> None:
    """Check the keys of :data:`TYPED_KEYS` that are present for type and lower bound.

    Raises:
        ConfigError: Naming the key, the value given and what is valid.
    """
    for key, (types, lower) in TYPED_KEYS.items():
        value = OmegaConf.select(cfg, key, default="__absent__")
        if value == "__absent__":
            continue
        if types == (bool,):
            ok = isinstance(value, bool)
        else:
            ok = (value is None and None in types) or (
                not isinstance(value, bool)
                and any(t is not None and isinstance(value, t) for t in types)
            )
        if not ok:
            raise ConfigError(f"{key}={value!r}: must be {_type_names(types)}")
        if value is not None and lower is not None and value < lower:
            raise ConfigError(f"{key}={value!r}: must be at least {lower}")
    grouping = OmegaConf.select(cfg, "data.group_by_length", default=False)
    if not (isinstance(grouping, bool) or grouping == "bucket"):
        raise ConfigError(
            f"data.group_by_length={grouping!r}: valid choices: false, true (the HF Trainer's "
            "length-grouped mega-batches), bucket (bench/data/samplers.py)"
        )
    ratio = OmegaConf.select(cfg, "optim.warmup_ratio", default=None)
    if isinstance(ratio, (int, float)) and ratio > 1:
        raise ConfigError(f"optim.warmup_ratio={ratio!r}: must be between 0 and 1")
    dropout = OmegaConf.select(cfg, "head.dropout", default=None)
    if isinstance(dropout, (int, float)) and dropout >= 1:
        raise ConfigError(f"head.dropout={dropout!r}: must be at least 0 and below 1")


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
    if search.enabled(cfg):
        sampler = OmegaConf.select(cfg, "search.sampler", default=None)
        if sampler not in search.SAMPLERS:
            raise ConfigError(
                f"search.sampler={sampler!r}; valid choices: {', '.join(search.SAMPLERS)}"
            )
        seed = OmegaConf.select(cfg, "search.seed", default=None)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"search.seed={seed!r}: must be a non-negative integer")
        search.draw_trials(search.space_of(cfg), cfg.search.trials, seed)


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


def check_cell(cfg: DictConfig) -> None:
    """Check one composed cell config; cheap (config files and the tokenizer, no weights).

    Raises:
        ConfigError: For a bad value, naming the key and the valid choices.
        EncoderError: For an encoder without model or tokenizer files.
    """
    check_identity(cfg)
    check_types(cfg)
    check_additions(cfg)
    check_malloc_mode(OmegaConf.select(cfg, "runtime.malloc", default="default"))
    check_compile_mode(OmegaConf.select(cfg, "trainer.compile", default=False))
    check_cached_precision(cfg)
    spec = tasks.validate(cfg.task.name)
    check_protocol(cfg)
    # Only the cell's own groups: the `hydra` node may need a live run to resolve.
    plain: dict[str, Any] = {
        key: OmegaConf.to_container(cfg[key], resolve=True)
        for key in ("encoder", "head", "freeze", "data")
    }
    encoder, head, freeze = plain["encoder"], plain["head"], plain["freeze"]
    strategy = freezing.validate_options(freeze)
    encoders.validate(encoder)
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
    # The head's own options first: a head/task mismatch is the more basic error.
    from bench.model.task_types import task_type  # the heads and torchmetrics: seconds

    task_type(spec).build_head(head, facts["hidden_size"], layers)
    if head.get("init") == "pretrained" and encoder.get("pooler") != "trained":
        raise ConfigError(
            f"head.init=pretrained needs a trained pooler, but encoder {encoder['name']!r} "
            f"declares pooler={encoder.get('pooler')!r}; valid choices here: head.init=random"
        )


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
    lists the valid options) and :func:`check_cell` errors are both returned as text.
    """
    try:
        cfg = compose_single_run(config_dir, overrides)
        if cfg is not None:
            check_cell(cfg)
            check_output_dirs(cfg, multirun=False)
    except (HydraException, OmegaConfBaseException) as err:
        return f"error composing the config: {err}"
    except (ConfigError, EncoderError) as err:
        return f"error: {err}"
    return None
