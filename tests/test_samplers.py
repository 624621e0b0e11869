"""Bucketed training batches: every example once per epoch, near-equal lengths, seeded order."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transformers.trainer_pt_utils import LengthGroupedSampler

from bench.data.samplers import BucketedLengthSampler
from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_tokenizer
from bench.run.preflight import check_types
from conftest import CONF


def _padded_tokens(order: list[int], lengths: list[int], batch: int) -> int:
    return sum(
        max(lengths[i] for i in order[b : b + batch]) * len(order[b : b + batch])
        for b in range(0, len(order), batch)
    )


@pytest.fixture(scope="module")
def sst2_lengths(data_dir) -> list[int]:
    """Token counts of the 2,000-example SST-2 subset the benchmark trains on (minilm)."""
    encoder = OmegaConf.to_container(OmegaConf.load(CONF / "encoder" / "minilm.yaml"))
    dm = GlueDataModule(
        get_task("sst2"),
        load_tokenizer(encoder),
        data_dir=data_dir,
        train_size=2000,
        data_seed=0,
        max_length=128,
        batch_size=32,
        eval_batch_size=128,
    )
    dm.setup("fit")
    return [len(dm.train[i]["input_ids"]) for i in range(len(dm.train))]


@pytest.mark.parametrize(("n", "batch"), [(0, 4), (1, 4), (7, 3), (12, 4), (2000, 32)])
def test_every_example_once_and_each_batch_one_bucket(n, batch):
    lengths = [(i * 7919) % 53 + 1 for i in range(n)]
    torch.manual_seed(0)
    order = list(BucketedLengthSampler(lengths, batch, noise=0.0))
    assert sorted(order) == list(range(n)) and len(BucketedLengthSampler(lengths, batch)) == n
    # noise 0: the batches are the sorted split cut every `batch`, the short one last.
    ranks = sorted(lengths)
    cut = [ranks[b : b + batch] for b in range(0, n, batch)]
    got = [sorted(lengths[i] for i in order[b : b + batch]) for b in range(0, n, batch)]
    assert sorted(got) == sorted(cut)
    if n % batch:
        assert got[-1] == cut[-1]


def test_the_seed_fixes_the_batches_and_each_epoch_differs(sst2_lengths):
    sampler = BucketedLengthSampler(sst2_lengths, 32)
    torch.manual_seed(5)
    first, second = list(sampler), list(sampler)
    torch.manual_seed(5)
    assert list(sampler) == first and first != second
    torch.manual_seed(6)
    assert list(sampler) != first


def test_buckets_pad_less_than_the_trainers_mega_batches_on_real_sst2(sst2_lengths):
    torch.manual_seed(1)
    bucket = _padded_tokens(list(BucketedLengthSampler(sst2_lengths, 32)), sst2_lengths, 32)
    mega = _padded_tokens(list(LengthGroupedSampler(32, lengths=sst2_lengths)), sst2_lengths, 32)
    shuffled = _padded_tokens(torch.randperm(len(sst2_lengths)).tolist(), sst2_lengths, 32)
    real = sum(sst2_lengths)
    assert real < bucket < 0.95 * mega < mega < shuffled
    assert 1 - real / bucket < 0.12  # about 8% padding, against 16% and 67%


def test_the_data_module_batches_are_the_buckets(data_dir):
    encoder = OmegaConf.to_container(OmegaConf.load(CONF / "encoder" / "minilm.yaml"))
    dm = GlueDataModule(
        get_task("rte"),
        load_tokenizer(encoder),
        data_dir=data_dir,
        train_size=100,
        data_seed=0,
        max_length=128,
        batch_size=16,
        eval_batch_size=64,
        group_by_length="bucket",
    )
    dm.setup("fit")
    torch.manual_seed(3)
    batches = list(dm.train_dataloader())
    assert [len(b["labels"]) for b in batches] == [16] * 6 + [4]
    for batch in batches:  # padded to the batch's own longest example
        assert batch["input_ids"].shape[1] == int(batch["attention_mask"].sum(1).max())


@pytest.mark.parametrize("bad", ["buckets", 1, "true"])
def test_a_bad_grouping_names_the_key_and_the_choices(compose_cfg, bad):
    cfg = compose_cfg("seed=1")
    cfg.data.group_by_length = bad
    with pytest.raises(ConfigError) as err:
        check_types(cfg)
    assert f"data.group_by_length={bad!r}" in str(err.value) and "bucket" in str(err.value)


def test_bucket_is_its_own_cell(compose_cfg):
    from bench.cell import config_hash

    hashes = {
        config_hash(compose_cfg("seed=1", f"data.group_by_length={g}"))
        for g in ("false", "true", "bucket")
    }
    assert len(hashes) == 3
