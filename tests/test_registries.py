"""One registry per axis: every option file of every group agrees with its registry.

Each ``conf/<group>/*.yaml`` is composed with the real config tree and checked against the
registry of its axis (the name equals the file name, the name is registered, the options
are valid); every experiment's sweep values are registered names; and every ``validate``
names the key and lists the valid choices when it refuses a value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from bench.axes import encoders, freezing, heads, layers
from bench.axes.sweep import expand
from bench.data import selection, tasks
from bench.errors import ConfigError
from bench.run import search, trackers
from bench.run.preflight import check_protocol
from conftest import CONF

#: Groups whose options are plain settings with no registry of their own: only their names
#: are checked. ``hydra`` is Hydra's own.
SETTINGS_GROUPS = ("optim", "trainer")
NOT_CHECKED = ("hydra",)


def option_files(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def check_encoder(cfg: DictConfig, option: str) -> None:
    assert encoders.validate(plain(cfg.encoder))["name"] == option


def check_head(cfg: DictConfig, option: str) -> None:
    if option == heads.ANCHOR:  # no preset: fitted by scikit-learn (bench/run/anchors.py)
        heads.check_anchor(plain(cfg.head), tasks.validate(cfg.task.name), "frozen", True)
        assert cfg.head.label == f"anchor-{cfg.head.features}"
        return
    preset = heads.validate(cfg.head.name)
    assert preset.name == option
    head = plain(cfg.head)
    # The option file spells the preset's parts (DESIGN.md convention 3) as the registry does.
    assert layers.validate(head["layers"]) == list(preset.layers)
    assert head["combine"] == preset.combine
    assert head["pool"] == preset.pool  # a sequence task (the default sst2)
    if preset.variant_key:
        assert head[preset.variant_key] in preset.variants
    assert head["label"] == heads.head_label(
        option, head["layers"], head["combine"], head.get(preset.variant_key or "")
    )


def check_freeze(cfg: DictConfig, option: str) -> None:
    freeze = plain(cfg.freeze)
    strategy = freezing.validate_options(freeze)
    assert strategy.name == option
    assert set(freeze) == {"name", "label", *strategy.options}  # every option has a default
    assert freeze["label"] == freezing.freeze_label(option, freeze.get("k"))


def check_task(cfg: DictConfig, option: str) -> None:
    assert tasks.validate(cfg.task.name).name == option


def check_selection(cfg: DictConfig, option: str) -> None:
    assert option in selection.MODES
    check_protocol(cfg)


def check_search(cfg: DictConfig, option: str) -> None:
    check_protocol(cfg)
    if search.enabled(cfg):
        assert cfg.search.sampler in search.SAMPLERS
        # Every freezing family has a declared space whose whole grid can be drawn.
        for freeze in ("frozen", "full"):
            cfg.freeze.name = freeze
            space = search.space_of(cfg)
            size = math.prod(len(v) for v in space.values())
            assert len(search.draw_trials(space, size, cfg.search.seed)) == size
    else:
        assert cfg.search.trials == 0


def check_logger(cfg: DictConfig, option: str) -> None:
    """Loggers: registered, valid settings (the tracker's own extra may be absent here)."""
    assert option in trackers.LOGGERS
    assert cfg.logger.tensorboard in trackers.TENSORBOARD_CHOICES
    tracker = trackers.LOGGERS[option]
    if tracker is None or trackers.installed(tracker):
        trackers.check_logger(cfg)


def check_name_only(cfg: DictConfig, option: str) -> None:
    """Plain settings (optimizer, trainer): the name is the whole contract."""


CHECKS: dict[str, Callable[[DictConfig, str], None]] = {
    "encoder": check_encoder,
    "head": check_head,
    "freeze": check_freeze,
    "task": check_task,
    "selection": check_selection,
    "search": check_search,
    "logger": check_logger,
    **dict.fromkeys(SETTINGS_GROUPS, check_name_only),
}


def test_every_group_folder_is_checked_here():
    folders = {p.name for p in CONF.iterdir() if p.is_dir()}
    assert folders == set(CHECKS) | {"encoder_head", "experiment"} | set(NOT_CHECKED)


@pytest.mark.parametrize(
    ("group", "option"), [(g, o) for g in CHECKS for o in option_files(g)], ids=str
)
def test_option_file_agrees_with_its_registry(compose_cfg, group, option):
    cfg = compose_cfg(f"{group}={option}")
    assert cfg[group].name == option, f"conf/{group}/{option}.yaml names itself"
    CHECKS[group](cfg, option)


def test_the_groups_hold_every_registered_name_and_no_other():
    assert option_files("logger") == sorted(trackers.LOGGERS)
    assert option_files("head") == sorted([*heads.HEADS, heads.ANCHOR])
    assert option_files("freeze") == sorted(freezing.STRATEGIES)
    assert option_files("task") == sorted(tasks.ALL_TASKS)


@pytest.mark.parametrize("head", sorted(heads.HEADS))
def test_on_a_token_task_a_head_pools_nothing(compose_cfg, head):
    cfg = compose_cfg("task=conll2003", f"head={head}")
    assert cfg.head.pool is None
    if head == "bilstm":  # the BERT paper's NER BiLSTM has two layers
        assert cfg.head.lstm_layers == 2


@pytest.mark.parametrize("option", option_files("encoder_head"))
def test_a_specializing_config_names_a_real_pair_and_applies(compose_cfg, option):
    pairs = [(e, h) for e in option_files("encoder") for h in heads.HEADS if f"{e}_{h}" == option]
    assert len(pairs) == 1, f"conf/encoder_head/{option}.yaml is no <encoder>_<head> pair"
    encoder, head = pairs[0]
    cfg = compose_cfg(f"encoder={encoder}", f"head={head}")
    own = OmegaConf.to_container(OmegaConf.load(CONF / "encoder_head" / f"{option}.yaml"))
    for group, values in own.items():
        for key, value in values.items():
            assert cfg[group][key] == value


def _sweep_values(cfg: DictConfig) -> dict[str, set[Any]]:
    """Every value each key takes in an experiment's sweep (params and grids)."""
    sweeper = cfg.hydra.sweeper
    parser = OverridesParser.create()
    params = OmegaConf.to_container(sweeper.params) if sweeper.get("params") else None
    grids = OmegaConf.to_container(sweeper.grids) if sweeper.get("grids") else None
    values: dict[str, set[Any]] = {}
    for job in expand(parser, params, grids, []):  # type: ignore[arg-type]
        for override in parser.parse_overrides(job):
            value = override.value()
            values.setdefault(override.key_or_group, set()).add(
                tuple(value) if isinstance(value, list) else value
            )
    return values


@pytest.mark.parametrize("experiment", option_files("experiment"))
def test_an_experiment_sweeps_only_registered_names(experiment):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", [f"experiment={experiment}"], return_hydra_config=True)
    assert cfg.sweep_name == experiment
    check_encoder(cfg, cfg.encoder.name)
    check_task(cfg, cfg.task.name)
    heads.validate(cfg.head.name)
    freezing.validate_options(plain(cfg.freeze))
    values = _sweep_values(cfg)
    registries: dict[str, Callable[[Any], object]] = {
        "head": heads.validate,
        "freeze": freezing.validate,
        "task": tasks.validate,
        "encoder": lambda name: name in option_files("encoder") or pytest.fail(name),
        "head.layers": lambda value: layers.validate(
            list(value) if isinstance(value, tuple) else value
        ),
    }
    for key, validate in registries.items():
        for value in values.get(key, ()):
            validate(value)
    assert values, f"experiment {experiment} sweeps nothing"


@pytest.mark.parametrize(
    ("validate", "bad", "choices"),
    [
        (heads.validate, "transformer", list(heads.HEADS)),
        (freezing.validate, "half", list(freezing.STRATEGIES)),
        (freezing.validate_options, {"name": "top_k", "kk": 3}, ["k"]),
        (tasks.validate, "imdb", sorted(tasks.ALL_TASKS)),
        (layers.validate, "third_to_last", list(layers.LAYER_CHOICES)),
        (layers.validate, 1.5, list(layers.LAYER_CHOICES)),
        (encoders.validate, {"name": "x", "source": "y", "pooler": "nsp"}, encoders.POOLER_STATES),
        (encoders.validate, {"name": "x", "source": "y", "size": 3}, list(encoders.KEYS)),
    ],
    ids=lambda v: getattr(v, "__module__", "").rsplit(".", 1)[-1] if callable(v) else None,
)
def test_validate_names_the_valid_choices(validate, bad, choices):
    with pytest.raises(ConfigError) as err:
        validate(bad)
    message = str(err.value)
    assert all(choice in message for choice in choices), message
