"""Batches bound for a GPU are collated into pinned memory; on a CPU they are not."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from bench.data.pinning import pins_batches, trainer_device
from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.model.encoders import load_tokenizer
from conftest import CONF


def _module(data_dir: Path, num_workers: int = 0) -> GlueDataModule:
    encoder = OmegaConf.to_container(OmegaConf.load(CONF / "encoder" / "minilm.yaml"))
    dm = GlueDataModule(
        get_task("rte"),
        load_tokenizer(encoder),
        data_dir=data_dir,
        train_size=32,
        data_seed=0,
        max_length=64,
        batch_size=8,
        eval_batch_size=16,
        num_workers=num_workers,
    )
    dm.setup("fit")
    return dm


def test_only_a_cuda_device_pins() -> None:
    assert pins_batches(torch.device("cuda", 0))
    assert not pins_batches(torch.device("cpu"))
    assert not pins_batches(None)


def test_a_module_not_attached_to_a_trainer_does_not_pin(data_dir: Path) -> None:
    dm = _module(data_dir)
    assert trainer_device(dm) is None
    assert not dm.train_dataloader().pin_memory


def test_a_cpu_trainers_loaders_do_not_pin(data_dir: Path) -> None:
    dm = _module(data_dir)
    dm.trainer = L.Trainer(accelerator="cpu", devices=1, logger=False)
    assert trainer_device(dm) == torch.device("cpu")
    loaders = [dm.train_dataloader(), *dm.val_dataloader()]
    assert [loader.pin_memory for loader in loaders] == [False] * len(loaders)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_gpu_trainers_batches_come_pinned(data_dir: Path, num_workers: int) -> None:
    dm = _module(data_dir, num_workers)
    dm.trainer = L.Trainer(accelerator="gpu", devices=1, logger=False)
    for loader in (dm.train_dataloader(), *dm.val_dataloader()):
        batch = next(iter(loader))
        tensors = [v for v in batch.values() if isinstance(v, torch.Tensor)]
        assert tensors and all(t.is_pinned() for t in tensors)
