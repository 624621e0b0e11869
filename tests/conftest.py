"""Shared fixtures: the real data directory, Hydra composition, tiny encoder configs."""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from bench.axes.resolvers import register
from bench.data.location import checkout_data_dir, default_data_dir
from bench.paths import config_dir

register()  # conf/ derives labels with these resolvers
ROOT = Path(__file__).resolve().parents[1]
CONF = config_dir()
assert CONF == ROOT / "conf", f"tests run against the checkout's conf/, not {CONF}"


# The package's one data-location rule (bench/data/location.py); the tests need local data.
DATA_DIR = Path(default_data_dir() or checkout_data_dir() or ROOT.parent / "shared" / "data")

ENCODERS = {
    "tiny_bert": {"name": "tiny_bert", "source": "tiny:bert", "pooler": "untrained"},
    "tiny_roberta": {"name": "tiny_roberta", "source": "tiny:roberta", "pooler": "untrained"},
}


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "glue").is_dir():
        pytest.fail(f"real data not found at {DATA_DIR}; set HEADBENCH_DATA")
    return DATA_DIR


@pytest.fixture(scope="session")
def compose_cfg() -> Callable[..., DictConfig]:
    """Compose the real config tree with overrides (as the command line would)."""

    def _compose(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides))
        OmegaConf.set_struct(cfg, False)
        return cfg

    return _compose


def frozen_sst2_key(head: str, seed: int) -> dict[str, object]:
    """The cell key of a frozen MiniLM SST-2 run of ``head`` (last layer) at ``seed``."""
    return {
        "task": "sst2",
        "encoder": "minilm",
        "head": head,
        "head_label": head,
        "layers": "-1",
        "freeze": "frozen",
        "freeze_label": "frozen",
        "seed": seed,
    }


def tiny_sst2_cell(compose_cfg: Callable[..., DictConfig], *overrides: str) -> DictConfig:
    """A linear-head tiny-BERT SST-2 cell (seed 1) of the real config tree, with overrides."""
    return compose_cfg("encoder=tiny_bert", "task=sst2", "head=linear", "seed=1", *overrides)


def assert_hashed_where_the_encoder_runs(
    compose_cfg: Callable[..., DictConfig], default: str, changed: str
) -> None:
    """A key that changes an encoder forward: hashed for cells that run one, ignored by cached ones.

    ``default`` (the key at its default, e.g. ``trainer.compile=false``) keeps every existing
    hash; ``changed`` is another cell where training runs the encoder (``full``, and a frozen
    cell with the cache off), the same cell where it reads cached states (frozen, top_k).
    """
    from bench.cell import config_hash

    def hashed(*overrides: str) -> str:
        return config_hash(tiny_sst2_cell(compose_cfg, *overrides))

    for freeze, changes in (("full", True), ("frozen", False), ("top_k", False)):
        plain = hashed(f"freeze={freeze}")
        assert hashed(f"freeze={freeze}", default) == plain, freeze
        assert (hashed(f"freeze={freeze}", changed) != plain) is changes, freeze
    uncached = ("freeze=frozen", "cache.enabled=false")
    assert hashed(*uncached, changed) != hashed(*uncached)


def bench_in_this_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m bench *args`` through its real entry point, in this process.

    The same code as the command line below the interpreter's start: a test worker has
    imported torch and Lightning once, where each fresh ``python -m bench`` pays about ten
    seconds for them. Use a subprocess where the process itself is the subject (signals,
    kills, what a fresh interpreter imports, DDP). What Hydra sets up process-wide (its
    global instance, the root logger's handlers) is put back afterwards.
    """
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from bench.run.cli import main

    argv, root = sys.argv, logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        sys.argv = ["bench", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
                if isinstance(stop.code, str):
                    print(stop.code, file=err)
    finally:
        sys.argv = argv
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None  # type: ignore[assignment]  # no job is running now
    return subprocess.CompletedProcess(["bench", *args], code, out.getvalue(), err.getvalue())
