"""``trainer.matmul_precision``: float32 matrix products in float32 or TF32."""

from __future__ import annotations

import pytest
import torch

from bench.cell import config_hash
from bench.errors import ConfigError
from bench.model.matmul import MATMUL_PRECISIONS, check_matmul_precision
from bench.run.preflight import check_cell
from bench.run.train import run
from conftest import tiny_sst2_cell


def test_the_precisions_are_checked_naming_the_valid_choices():
    assert check_matmul_precision(None) == "highest"  # a config from before the key
    for precision in MATMUL_PRECISIONS:
        assert check_matmul_precision(precision) == precision
    for bad in ("tf32", True, 32):
        with pytest.raises(ConfigError, match=r"trainer.matmul_precision=.*highest, high, medium"):
            check_matmul_precision(bad)


def test_highest_keeps_every_hash_and_another_precision_is_another_cell(compose_cfg):
    for cell in (("freeze=full",), ("freeze=frozen",), ("freeze=frozen", "cache.enabled=false")):
        plain = config_hash(tiny_sst2_cell(compose_cfg, *cell))
        assert config_hash(tiny_sst2_cell(compose_cfg, *cell, "~trainer.matmul_precision")) == plain
        high = config_hash(tiny_sst2_cell(compose_cfg, *cell, "trainer.matmul_precision=high"))
        assert high != plain, cell


def test_preflight_refuses_it_for_cells_that_read_cached_states(compose_cfg, data_dir):
    def checked(*overrides: str) -> None:
        check_cell(tiny_sst2_cell(compose_cfg, f"data.dir={data_dir}", *overrides))

    checked("freeze=full", "trainer.matmul_precision=high")
    checked("freeze=frozen", "cache.enabled=false", "trainer.matmul_precision=medium")
    checked("freeze=frozen", "trainer.matmul_precision=highest")
    for freeze in ("freeze=frozen", "freeze=top_k"):
        with pytest.raises(ConfigError, match=r"reads cached hidden states.*highest, or cache"):
            checked(freeze, "trainer.matmul_precision=high")
    with pytest.raises(ConfigError, match=r"trainer.matmul_precision='tf32': valid choices"):
        checked("freeze=full", "trainer.matmul_precision=tf32")


@pytest.mark.parametrize("precision", ["high", "highest"])
def test_a_cell_trains_at_its_precision_records_it_and_puts_the_process_back(
    compose_cfg, data_dir, tmp_path, precision
):
    """A launcher's worker trains cell after cell: one cell's setting must not leak."""
    cfg = tiny_sst2_cell(
        compose_cfg,
        "freeze=full",
        f"data.dir={data_dir}",
        "selection=dev",
        "data.train_size=64",
        "data.max_length=32",
        "data.batch_size=16",
        "trainer.max_epochs=1",
        f"trainer.matmul_precision={precision}",
        f"cache.dir={tmp_path / 'cache'}",
    )
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")  # what a previous cell could have left
    try:
        result = run(cfg, tmp_path / "run")
        assert result["status"] == "ok", result.get("reason")
        assert result["matmul_precision"] == precision  # in force when training ended
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)
