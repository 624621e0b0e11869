"""Freezing strategies: hand-counted trainable parameters, bit-identical frozen weights."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_tokenizer
from bench.model.module import HeadbenchModule
from bench.model.tiny import ARCH
from conftest import ENCODERS

OPTIM = {
    "encoder_lr": 1e-3,
    "head_lr": 1e-2,
    "frozen_head_lr": 1e-2,
    "weight_decay": 0.01,
    "warmup_ratio": 0.0,
}
TINY = ENCODERS["tiny_bert"]


def _module(freeze, head=None):
    return HeadbenchModule(
        encoder=TINY, head=head or {"name": "linear"}, freeze=freeze, task="sst2", optim=OPTIM
    )


def _hand_counts(vocab: int) -> dict[str, int]:
    h, inter, layers = ARCH["hidden_size"], ARCH["intermediate_size"], ARCH["num_hidden_layers"]
    embeddings = vocab * h + 512 * h + 2 * h + 2 * h  # word, position, type, LayerNorm
    layer = 4 * (h * h + h) + 2 * h + (h * inter + inter) + (inter * h + h) + 2 * h
    return {"embeddings": embeddings, "layer": layer, "total": embeddings + layers * layer}


@pytest.mark.parametrize(
    ("freeze", "expected"),
    [
        ({"name": "frozen"}, lambda c: 0),
        ({"name": "full"}, lambda c: c["total"]),
        ({"name": "top_k", "k": 2}, lambda c: 2 * c["layer"]),
        ({"name": "top_k", "k": 4}, lambda c: 4 * c["layer"]),
        ({"name": "embeddings"}, lambda c: c["total"] - c["embeddings"]),
    ],
    ids=lambda v: v.get("name", "") + str(v.get("k", "")) if isinstance(v, dict) else "",
)
def test_trainable_counts_match_a_hand_count(freeze, expected):
    module = _module(freeze)
    counts = _hand_counts(len(load_tokenizer(TINY)))
    params = module.parameter_counts()
    assert params["encoder_total"] == counts["total"]  # the unused pooler was dropped
    assert params["encoder_trainable"] == expected(counts)
    head = ARCH["hidden_size"] * 2 + 2  # linear head, SST-2's two classes
    assert params["head"] == head
    assert params["trainable"] == expected(counts) + head
    assert params["total"] == counts["total"] + head


def test_top_k_larger_than_depth_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"freeze.k=9.*valid values for this encoder are 1..4"):
        _module({"name": "top_k", "k": 9})


def test_unknown_strategy_lists_valid_choices():
    with pytest.raises(
        ConfigError, match="unknown freezing strategy; valid choices: frozen, bitfit, lora"
    ):
        _module({"name": "half"})


class _ModeProbe(L.Callback):
    """Records the training flags of encoder parts during the first batch."""

    def __init__(self) -> None:
        self.seen: dict[str, bool] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self.seen:
            enc = pl_module.encoder
            self.seen = {
                "embeddings": enc.embeddings.training,
                "bottom": enc.encoder.layer[0].training,
                "top": enc.encoder.layer[-1].training,
                "head": pl_module.head.training,
            }


def _fit(module, data_dir, probe=None):
    dm = GlueDataModule(get_task("sst2"), load_tokenizer(TINY), data_dir, 96, 0, 32, 16, 64)
    trainer = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        callbacks=[probe] if probe else [],
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=dm)


def _snapshot(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_frozen_encoder_is_bit_identical_after_a_fit_and_in_eval_mode(data_dir):
    torch.manual_seed(0)
    module = _module({"name": "frozen"})
    before = _snapshot(module)
    probe = _ModeProbe()
    _fit(module, data_dir, probe)
    after = module.state_dict()
    encoder_keys = [k for k in before if k.startswith("encoder.")]
    assert encoder_keys
    for key in encoder_keys:
        assert torch.equal(before[key], after[key]), key
    assert not torch.equal(
        before["head.classifier.out.weight"], after["head.classifier.out.weight"]
    )
    assert probe.seen == {"embeddings": False, "bottom": False, "top": False, "head": True}


def test_top_k_changes_only_the_top_layers(data_dir):
    torch.manual_seed(0)
    module = _module({"name": "top_k", "k": 1})
    before = _snapshot(module)
    probe = _ModeProbe()
    _fit(module, data_dir, probe)
    after = module.state_dict()
    top = "encoder.encoder.layer.3."
    for key, value in before.items():
        if not key.startswith("encoder."):
            continue
        changed = not torch.equal(value, after[key])
        if key.startswith(top) and key.endswith("weight") and "LayerNorm" not in key:
            assert changed, key
        if not key.startswith(top):
            assert not changed, key
    assert probe.seen == {"embeddings": False, "bottom": False, "top": True, "head": True}


def test_optimizer_groups_split_encoder_and_head_and_decay(data_dir):
    torch.manual_seed(0)
    module = _module({"name": "top_k", "k": 1})
    dm = GlueDataModule(get_task("sst2"), load_tokenizer(TINY), data_dir, 64, 0, 32, 16, 64)
    trainer = L.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=dm)
    groups = {g["name"]: g for g in trainer.optimizers[0].param_groups}
    assert set(groups) == {"encoder/decay", "encoder/no_decay", "head/decay", "head/no_decay"}
    assert groups["encoder/decay"]["initial_lr"] == OPTIM["encoder_lr"]
    assert groups["head/decay"]["initial_lr"] == OPTIM["head_lr"]
    assert groups["encoder/decay"]["weight_decay"] == 0.01
    assert groups["encoder/no_decay"]["weight_decay"] == 0.0
    assert all(p.dim() < 2 for p in groups["encoder/no_decay"]["params"])  # biases, LayerNorm
    trainable = [p for p in module.parameters() if p.requires_grad]
    in_groups = [p for g in groups.values() for p in g["params"]]
    assert len(in_groups) == len(trainable) and {id(p) for p in in_groups} == {
        id(p) for p in trainable
    }
    # linear decay reaches zero at the last step
    assert groups["head/decay"]["lr"] == pytest.approx(0.0, abs=1e-12)
