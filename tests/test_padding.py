"""``data.pad_to_multiple_of``: batches padded to a multiple of m tokens (bench/data/padding.py).

Real data, real tokenizers, tiny random-init encoders, the real config tree and Trainer.
"""

from __future__ import annotations

import math

import pytest
import torch

from bench.data.padding import check_pad_multiple, widest_batch
from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.data.token_datamodule import TokenDataModule
from bench.errors import ConfigError
from bench.model.encoders import load_encoder, load_tokenizer, run_encoder
from bench.run.preflight import check_cell, check_max_length
from bench.run.train import run
from conftest import ENCODERS, assert_hashed_where_the_encoder_runs, tiny_sst2_cell


def test_the_multiple_is_checked_naming_the_key():
    assert check_pad_multiple(None) is None
    assert check_pad_multiple(1) == 1
    assert check_pad_multiple(16) == 16
    for bad in (0, -8, True, "8", 2.5):
        with pytest.raises(ConfigError, match=r"data\.pad_to_multiple_of=.*positive integer"):
            check_pad_multiple(bad)


def test_the_widest_batch_is_max_length_rounded_up():
    assert widest_batch(128, None) == 128
    assert widest_batch(128, 16) == 128
    assert widest_batch(100, 16) == 112
    assert widest_batch(5, 8) == 8


def _module(kind, task: str, encoder: str, data_dir, multiple: int | None):
    dm = kind(
        get_task(task),
        load_tokenizer(ENCODERS[encoder]),
        data_dir=data_dir,
        train_size=48,
        data_seed=0,
        max_length=40,
        batch_size=8,
        eval_batch_size=16,
        pad_to_multiple_of=multiple,
    )
    dm.setup("fit")
    return dm


def _batches(dm) -> list[dict[str, torch.Tensor]]:
    torch.manual_seed(0)  # the shuffle: the same batches both ways
    loaders = [dm.train_dataloader(), *dm.val_dataloader(), *dm.report_dataloaders()]
    return [batch for loader in loaders for batch in loader]


@pytest.mark.parametrize(
    ("kind", "task", "encoder"),
    [
        (GlueDataModule, "sst2", "tiny_bert"),
        (GlueDataModule, "rte", "tiny_roberta"),
        (TokenDataModule, "conll2003", "tiny_bert"),
    ],
)
def test_batches_are_padded_to_the_multiple_and_hold_the_same_tokens(kind, task, encoder, data_dir):
    plain = _batches(_module(kind, task, encoder, data_dir, None))
    padded = _batches(_module(kind, task, encoder, data_dir, 8))
    assert len(plain) == len(padded) > 2
    widths = set()
    for p, q in zip(plain, padded, strict=True):
        width = p["input_ids"].shape[1]
        assert q["input_ids"].shape[1] == math.ceil(width / 8) * 8
        widths.add(q["input_ids"].shape[1])
        for key, value in p.items():
            if value.dim() == 2 and value.shape[1] == width:  # encoder inputs: widened
                assert torch.equal(q[key][:, :width], value), key
                if key == "attention_mask":
                    assert not q[key][:, width:].any()  # the added columns are masked
            else:  # labels, idx, word positions: unchanged
                assert torch.equal(q[key], value), key
    assert all(w % 8 == 0 for w in widths)


def test_an_encoder_reads_the_same_states_from_a_wider_batch(data_dir):
    """Masked padding changes no real position's state beyond rounding (eval: no dropout)."""
    torch.manual_seed(0)
    model, info = load_encoder(ENCODERS["tiny_bert"])
    model.eval()
    plain = _batches(_module(GlueDataModule, "sst2", "tiny_bert", data_dir, None))
    padded = _batches(_module(GlueDataModule, "sst2", "tiny_bert", data_dir, 16))
    with torch.no_grad():
        for p, q in list(zip(plain, padded, strict=True))[:3]:
            width = p["input_ids"].shape[1]
            a = run_encoder(model, p, causal=info.causal).hidden_states[-1]
            b = run_encoder(model, q, causal=info.causal).hidden_states[-1][:, :width]
            mask = p["attention_mask"].bool()
            torch.testing.assert_close(b[mask], a[mask], rtol=1e-4, atol=1e-5)


def test_padding_is_another_cell_only_where_the_encoder_reads_the_batches(compose_cfg):
    """null keeps every existing hash; cells reading cached states ignore the key."""
    assert_hashed_where_the_encoder_runs(
        compose_cfg, "data.pad_to_multiple_of=null", "data.pad_to_multiple_of=8"
    )


def test_preflight_refuses_a_bad_multiple(compose_cfg, data_dir):
    for value, message in (
        (0, r"data\.pad_to_multiple_of=0: must be at least 1"),
        ("8", r"data\.pad_to_multiple_of='8': must be an integer or null"),
    ):
        cfg = tiny_sst2_cell(compose_cfg, "freeze=full", f"data.dir={data_dir}")
        cfg.data.pad_to_multiple_of = value
        with pytest.raises(ConfigError, match=message):
            check_cell(cfg)


def test_a_multiple_that_pads_past_the_positions_is_refused():
    check_max_length(510, "bert-base", "bert", 512, 16)  # 512: fits exactly
    with pytest.raises(ConfigError, match=r"pad_to_multiple_of=24 pads data.max_length=510 to 528"):
        check_max_length(510, "bert-base", "bert", 512, 24)
    with pytest.raises(ConfigError, match=r"to 512 tokens, beyond the position limit .* \(510\)"):
        check_max_length(500, "roberta-base", "roberta", 512, 16)  # 2 positions reserved


@pytest.mark.parametrize("freeze", ["full", "frozen", "top_k"])
def test_a_padded_cell_trains(compose_cfg, data_dir, tmp_path, freeze):
    """Full cells train on the widened batches; cached cells get their states' own width."""
    cfg = tiny_sst2_cell(
        compose_cfg,
        f"freeze={freeze}",
        f"data.dir={data_dir}",
        "selection=dev",
        "data.train_size=48",
        "data.max_length=64",
        "data.batch_size=16",
        "data.pad_to_multiple_of=7",  # odd: few batches are that wide already
        "trainer.max_epochs=1",
        f"cache.dir={tmp_path / 'cache'}",
        "cache.resident=false",  # cached states served as examples, beside collated masks
    )
    result = run(cfg, tmp_path / freeze)
    assert result["status"] == "ok", result.get("traceback") or result.get("reason")
    assert result["config"]["data"]["pad_to_multiple_of"] == 7
