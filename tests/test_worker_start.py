"""DataLoader workers start inside a joblib worker (hydra/launcher=gpu_pack, joblib)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import torch
from joblib import Parallel, delayed
from omegaconf import OmegaConf

from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.data.worker_start import STANDARD_START_METHODS, worker_context
from bench.model.encoders import load_tokenizer
from conftest import CONF


def _first_batches(data_dir: Path, num_workers: int) -> dict[str, Any]:
    """The first two training batches of a real RTE data module, and the start method here."""
    encoder = OmegaConf.to_container(OmegaConf.load(CONF / "encoder" / "minilm.yaml"))
    dm = GlueDataModule(
        get_task("rte"),
        load_tokenizer(encoder),
        data_dir=data_dir,
        train_size=64,
        data_seed=0,
        max_length=64,
        batch_size=16,
        eval_batch_size=64,
        num_workers=num_workers,
        group_by_length="bucket",
        order_seed=3,
    )
    dm.setup("fit")
    loader = iter(dm.train_dataloader())
    batches = [next(loader) for _ in range(2)]
    return {
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "input_ids": [b["input_ids"] for b in batches],
        "labels": [b["labels"] for b in batches],
    }


def test_without_workers_or_in_a_plain_process_torch_keeps_its_default() -> None:
    assert worker_context(0) is None
    assert worker_context(2) is None  # this process's default is a standard one (or unset)


def test_a_loader_with_workers_runs_inside_a_joblib_worker(data_dir: Path) -> None:
    """In a loky worker the default start method is loky's, whose Popen cannot start torch's
    workers; the loader starts them the standard way and yields the batches it yields here
    without workers (the same seeded order)."""
    there = Parallel(n_jobs=2, backend="loky")(
        delayed(_first_batches)(data_dir, workers) for workers in (2, 0)
    )
    here = _first_batches(data_dir, 0)
    for got in there:
        assert got["start_method"] not in STANDARD_START_METHODS  # what broke it: loky's own
        for ours, theirs in zip(got["input_ids"], here["input_ids"], strict=True):
            assert torch.equal(ours, theirs)
        for ours, theirs in zip(got["labels"], here["labels"], strict=True):
            assert torch.equal(ours, theirs)
