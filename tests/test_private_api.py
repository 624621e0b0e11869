"""Pins the private Lightning API that bench/run/distributed.py relies on (and only that).

If a Lightning release renames or reshapes these, this fast test fails with the reason,
rather than a multi-GPU run failing deep inside a spawned rank.
"""

from __future__ import annotations

import inspect
from typing import get_args

from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.strategies.launchers.multiprocessing import _MultiProcessingLauncher

from bench.run.distributed import SpawnDDPStrategy, _RecordLauncher


def test_ddp_strategy_still_configures_its_launcher_in_a_private_method():
    assert callable(getattr(DDPStrategy, "_configure_launcher", None))
    assert list(inspect.signature(DDPStrategy._configure_launcher).parameters) == ["self"]
    strategy = SpawnDDPStrategy(process_group_backend="gloo")
    strategy._configure_launcher()
    assert isinstance(strategy._launcher, _RecordLauncher)


def test_the_spawn_launcher_still_has_the_result_hooks():
    for name, params in {
        "get_extra_results": ["self", "trainer"],
        "update_main_process_results": ["self", "trainer", "extra"],
        "launch": ["self", "function", "args", "trainer", "kwargs"],
    }.items():
        method = getattr(_MultiProcessingLauncher, name)
        assert list(inspect.signature(method).parameters) == params, name
    start = inspect.signature(_MultiProcessingLauncher.__init__).parameters["start_method"]
    assert "spawn" in get_args(start.annotation)
