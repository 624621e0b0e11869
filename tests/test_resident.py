"""Resident cached splits: the same batches as the example path, value for value.

A frozen cell trained with ``cache.resident=true`` and with ``false`` must give identical
histories, metrics and predictions (real config, real data, real Trainer, tiny BERT).
"""

from __future__ import annotations

import json

import pytest
import torch

from bench.cache.resident import ResidentCollate, ResidentSplit, resident_device
from bench.cache.serve import CachedSplit, StatesCollate
from bench.cache.store import FlatStates
from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_tokenizer
from bench.run.train import run
from conftest import ENCODERS


def _cached(task: str, data_dir, n_layers: int = 2, hidden: int = 8):
    dm = GlueDataModule(
        get_task(task),
        load_tokenizer(ENCODERS["tiny_bert"]),
        data_dir=data_dir,
        train_size=40,
        data_seed=0,
        max_length=32,
        batch_size=8,
        eval_batch_size=16,
    )
    dm.setup("fit")
    lengths = torch.tensor([len(dm.train[i]["input_ids"]) for i in range(len(dm.train))])
    starts = torch.cumsum(lengths, 0) - lengths
    gen = torch.Generator().manual_seed(0)
    states = torch.randn(int(lengths.sum()), n_layers, hidden, generator=gen).half()
    flat = FlatStates(states, torch.stack([starts, lengths], dim=1))
    return dm, CachedSplit(dm.train, flat)


@pytest.mark.parametrize("task", ["sst2", "stsb"])
def test_a_resident_batch_equals_the_collated_examples(data_dir, task):
    dm, cached = _cached(task, data_dir)
    resident = ResidentSplit(cached, torch.device("cpu"))
    rows = [5, 0, 17, 3, 39, 12]
    expected = StatesCollate(dm._batch)([cached[i] for i in rows])
    got = ResidentCollate(resident)([resident[i] for i in rows])
    assert set(got) <= set(expected)
    for key, value in got.items():
        assert value.dtype == expected[key].dtype, key
        assert torch.equal(value, expected[key]), key
    assert resident.lengths() == [len(dm.train[i]["input_ids"]) for i in range(len(dm.train))]
    assert resident.n_truncated == dm.train.n_truncated  # read through to the examples


def test_resident_choices_and_token_tasks(data_dir):
    _, cached = _cached("sst2", data_dir)
    splits = {"train": cached}
    assert resident_device(splits, False, 8.0) is None
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resident_device(splits, True, 8.0).type == expected
    assert resident_device(splits, "auto", 8.0).type == expected
    with pytest.raises(ConfigError, match=r"cache.resident='yes'.*auto, true, false"):
        resident_device(splits, "yes", 8.0)


@pytest.mark.parametrize(("head", "grouping"), [("linear", "bucket"), ("last4_concat", "false")])
def test_a_frozen_cell_trains_the_same_resident_or_not(
    compose_cfg, data_dir, tmp_path, head, grouping
):
    results = {}
    for resident in ("true", "false"):
        cfg = compose_cfg(
            "encoder=tiny_bert",
            "task=sst2",
            f"head={head}",
            "freeze=frozen",
            "seed=3",
            f"data.dir={data_dir}",
            "data.train_size=64",
            "selection.size=32",
            "trainer.max_epochs=2",
            "data.max_length=32",
            "data.batch_size=16",
            f"data.group_by_length={grouping}",
            f"cache.dir={tmp_path / 'cache'}",
            f"cache.resident={resident}",
        )
        out = tmp_path / resident
        result = run(cfg, out)
        assert result["status"] == "ok", result.get("traceback")
        results[resident] = (result, (out / "predictions_dev.csv").read_text())
    (on, on_preds), (off, off_preds) = results["true"], results["false"]
    assert on["cache"]["resident"]["device"] in ("cpu", "cuda")
    assert off["cache"]["resident"] is None
    assert on["config_hash"] == off["config_hash"]
    assert json.dumps(on["history"]) == json.dumps(off["history"])
    assert on["best"] == off["best"]
    assert on_preds == off_preds
