"""Tokenized splits are cached on disk per (tokenizer, task, split, max_length, content)."""

from __future__ import annotations

import time

from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.data.token_datamodule import TokenDataModule
from bench.model.encoders import load_tokenizer
from conftest import ENCODERS


def _glue(data_dir, root, max_length=32, train_size=50, data_seed=0):
    dm = GlueDataModule(
        get_task("mrpc"),
        load_tokenizer(ENCODERS["tiny_bert"]),
        data_dir=data_dir,
        train_size=train_size,
        data_seed=data_seed,
        max_length=max_length,
        batch_size=8,
        eval_batch_size=8,
        token_cache_dir=root,
    )
    dm.setup("fit")
    return dm


def _files(root):
    return sorted(p.name for p in root.rglob("*.npz"))


def test_a_second_setup_reads_the_same_examples_from_disk(data_dir, tmp_path):
    first = _glue(data_dir, tmp_path)
    files = _files(tmp_path)
    assert len(files) == 2  # train and dev
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.npz")}
    time.sleep(0.01)
    second = _glue(data_dir, tmp_path)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.npz")} == stamps  # not rewritten
    assert second.train.examples == first.train.examples
    assert second.dev["dev"].examples == first.dev["dev"].examples
    assert second.describe() == first.describe()
    uncached = _glue(data_dir, None)
    assert uncached.train.examples == first.train.examples


def test_other_max_length_or_subset_is_another_entry(data_dir, tmp_path):
    _glue(data_dir, tmp_path)
    _glue(data_dir, tmp_path, max_length=24)
    assert len(_files(tmp_path)) == 4
    _glue(data_dir, tmp_path, data_seed=1)  # other train subset, same dev split
    assert len(_files(tmp_path)) == 5


def test_a_damaged_entry_is_rebuilt(data_dir, tmp_path):
    first = _glue(data_dir, tmp_path)
    (entry,) = tmp_path.rglob("train-*.npz")
    size = entry.stat().st_size
    entry.write_bytes(entry.read_bytes()[: size // 3])
    again = _glue(data_dir, tmp_path)
    assert again.train.examples == first.train.examples and entry.stat().st_size == size


def test_token_task_splits_round_trip_with_their_counters(data_dir, tmp_path):
    def setup(root):
        dm = TokenDataModule(
            get_task("conll2003"),
            load_tokenizer(ENCODERS["tiny_roberta"]),
            data_dir=data_dir,
            train_size=40,
            data_seed=0,
            max_length=16,
            batch_size=8,
            eval_batch_size=8,
            token_cache_dir=root,
        )
        dm.setup("fit")
        return dm

    first, second = setup(tmp_path), setup(tmp_path)
    assert second.train.examples == first.train.examples
    assert second.describe() == first.describe()
    assert first.describe()["words_cut"]["dev"] > 0  # max_length=16 cuts words: counters kept
