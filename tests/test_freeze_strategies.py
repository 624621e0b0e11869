"""Freezing strategies beyond a static mask: what changes after a real fit, bit for bit.

Tiny BERT (4 layers, H=32), SST-2 subsets of 64 examples in batches of 16 (4 steps per
epoch), real Lightning fits. Each strategy's promise is checked against the weights:
frozen parameters stay bit-identical, the others change, in the promised order.
"""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.adaptation import encoder_units
from bench.model.encoders import load_encoder, load_tokenizer, transformer_layers
from bench.model.module import HeadbenchModule
from bench.results.collect import tidy
from conftest import CONF, ENCODERS

OPTIM = {
    "encoder_lr": 1e-3,
    "head_lr": 1e-2,
    "frozen_head_lr": 2e-2,
    "weight_decay": 0.01,
    "warmup_ratio": 0.0,
}
TINY = ENCODERS["tiny_bert"]
STEPS_PER_EPOCH = 4


def _module(freeze, encoder=TINY):
    return HeadbenchModule(
        encoder=encoder, head={"name": "linear"}, freeze=freeze, task="sst2", optim=OPTIM
    )


def _datamodule(data_dir, encoder=TINY):
    return GlueDataModule(
        get_task("sst2"),
        load_tokenizer(encoder),
        data_dir=data_dir,
        train_size=64,
        data_seed=0,
        max_length=32,
        batch_size=16,
        eval_batch_size=64,
    )


def _fit(module, data_dir, epochs=1, callbacks=()):
    trainer = L.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        enable_model_summary=False,
        limit_val_batches=1,
    )
    trainer.fit(module, datamodule=_datamodule(data_dir))
    return trainer


def _snapshot(module):
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def _changed(before, module):
    return {k for k, v in module.named_parameters() if not torch.equal(before[k], v)}


class _Watch(L.Callback):
    """After every optimizer step: which encoder units changed, and their train modes."""

    def __init__(self, module):
        self.units = encoder_units(module.encoder)
        self.start = {u.label: [p.detach().clone() for p in u.params] for u in self.units}
        self.first_change: dict[str, int] = {}
        self.modes: list[tuple[int, dict[str, bool]]] = []
        self.lrs: list[tuple[int, dict[str, float]]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        groups = trainer.optimizers[0].param_groups
        self.lrs.append((trainer.global_step, {g["name"]: g["lr"] for g in groups}))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step  # steps taken so far
        for unit in self.units:
            same = all(
                torch.equal(a, p) for a, p in zip(self.start[unit.label], unit.params, strict=True)
            )
            if not same and unit.label not in self.first_change:
                self.first_change[unit.label] = step
        self.modes.append((step, {u.label: u.modules[0].training for u in self.units}))


# --- static masks ---------------------------------------------------------------------------


def test_bitfit_changes_only_encoder_biases(data_dir):
    torch.manual_seed(0)
    module = _module({"name": "bitfit", "lr": 1e-2})
    report = module.freeze_report
    biases = {n for n, _ in module.encoder.named_parameters() if n.endswith("bias")}
    assert report.encoder_trainable == sum(
        p.numel() for n, p in module.encoder.named_parameters() if n in biases
    )
    before = _snapshot(module)
    _fit(module, data_dir)
    changed = _changed(before, module)
    encoder_changed = {k.removeprefix("encoder.") for k in changed if k.startswith("encoder.")}
    assert encoder_changed <= biases  # every weight matrix and norm weight bit-identical
    assert "encoder.layer.0.attention.self.query.bias" in encoder_changed
    assert "encoder.layer.3.output.dense.bias" in encoder_changed
    assert {k for k in changed if k.startswith("head.")}  # the head trains too
    assert module.encoder.training and module.encoder.encoder.layer[0].training  # dropout on


def test_llrd_param_groups_follow_the_formula_and_everything_trains(data_dir):
    torch.manual_seed(0)
    factor, depth = 0.8, 4
    module = _module({"name": "llrd", "factor": factor})
    before = _snapshot(module)
    trainer = _fit(module, data_dir)
    groups = trainer.optimizers[0].param_groups
    base = OPTIM["encoder_lr"]
    expected = {"encoder/embeddings": base * factor**depth} | {
        f"encoder/layer{n}": base * factor ** (depth - n) for n in range(1, depth + 1)
    }
    expected["head"] = OPTIM["head_lr"]
    for group in groups:
        part, suffix = group["name"].rsplit("/", 1)
        assert group["initial_lr"] == pytest.approx(expected[part], rel=1e-12), group["name"]
        assert group["weight_decay"] == (0.01 if suffix == "decay" else 0.0)
    assert {g["name"].rsplit("/", 1)[0] for g in groups} == set(expected)
    # every parameter in exactly one group, and in the group of its own layer
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(module.parameters()))
    layer2 = {id(p) for p in transformer_layers(module.encoder)[1].parameters()}
    in_layer2 = {
        id(p) for g in groups if g["name"].startswith("encoder/layer2/") for p in g["params"]
    }
    assert in_layer2 == layer2
    assert module.learning_rates()["per_unit"]["layer1"] == pytest.approx(base * factor**3)
    changed = _changed(before, module)
    assert all(
        f"encoder.encoder.layer.{i}.attention.self.query.weight" in changed for i in range(4)
    )
    assert "encoder.embeddings.word_embeddings.weight" in changed


def test_reinit_top_resets_exactly_the_top_layers_before_training():
    pretrained, _ = load_encoder(TINY)
    reference = dict(pretrained.named_parameters())
    torch.manual_seed(0)
    module = _module({"name": "reinit_top", "k": 2})
    assert module.adaptation.record["reinit_layers"] == [3, 4]
    for name, param in module.encoder.named_parameters():
        same = torch.equal(param, reference[name])
        top = name.startswith(("encoder.layer.2.", "encoder.layer.3."))
        if top and name.endswith("weight") and "LayerNorm" not in name:
            assert not same, name  # fresh draw from the model's own initialiser
            assert param.std().item() == pytest.approx(0.02, rel=0.25)  # initializer_range
        if top and name.endswith("bias"):
            assert torch.all(param == 0), name
        if not top:
            assert same, name
    assert module.freeze_report.encoder_trainable == module.freeze_report.encoder_total


def test_reinit_top_is_seeded():
    torch.manual_seed(3)
    a = _module({"name": "reinit_top", "k": 1})
    torch.manual_seed(3)
    b = _module({"name": "reinit_top", "k": 1})
    key = "encoder.layer.3.attention.self.query.weight"
    assert torch.equal(
        dict(a.encoder.named_parameters())[key], dict(b.encoder.named_parameters())[key]
    )
    with pytest.raises(ConfigError, match=r"freeze.k=5 for reinit_top.*1..4"):
        _module({"name": "reinit_top", "k": 5})


# --- phases ---------------------------------------------------------------------------------


def test_lpft_encoder_is_unchanged_by_the_probe_and_changed_by_fine_tuning(data_dir):
    torch.manual_seed(0)
    module = _module({"name": "lpft", "probe_epochs": 1, "ft_head_lr": None})
    assert module.parameter_counts()["encoder_trainable"] == 0  # probe phase first
    watch = _Watch(module)
    head_before = _snapshot(module.head)
    _fit(module, data_dir, epochs=2, callbacks=[watch])
    # the probe phase (steps 1-4) leaves every encoder parameter bit-identical
    assert all(step > STEPS_PER_EPOCH for step in watch.first_change.values()), watch.first_change
    assert set(watch.first_change) == {"embeddings", "layer1", "layer2", "layer3", "layer4"}
    assert _changed(head_before, module.head)
    # frozen in eval mode while probing, in train mode once unfrozen
    for step, modes in watch.modes:
        assert all(modes.values()) == (step > STEPS_PER_EPOCH), (step, modes)
        assert not any(modes.values()) or step > STEPS_PER_EPOCH
    # probe: encoder rate 0, head at frozen_head_lr; fine-tuning restarts the schedule with
    # the encoder at encoder_lr and the head at ft_head_lr (null: the encoder's rate)
    lrs = dict(watch.lrs)
    assert lrs[0]["encoder/decay"] == 0.0 and lrs[3]["encoder/decay"] == 0.0
    assert lrs[0]["head/decay"] == pytest.approx(OPTIM["frozen_head_lr"])
    assert lrs[4]["encoder/decay"] == pytest.approx(OPTIM["encoder_lr"])
    assert lrs[4]["head/decay"] == pytest.approx(OPTIM["encoder_lr"])
    assert lrs[7]["encoder/decay"] == pytest.approx(OPTIM["encoder_lr"] / 4)
    history = module.adaptation.trainable_history
    assert [(h["epoch"], h["step"], h["unfrozen"]) for h in history] == [
        (0, 0, []),
        (1, 4, ["encoder"]),
    ]
    counts = module.parameter_counts()
    assert counts["trainable"] == history[-1]["trainable"] == counts["total"]  # the maximum


def test_lpft_needs_a_fine_tuning_phase(data_dir):
    module = _module({"name": "lpft", "probe_epochs": 2})
    with pytest.raises(ConfigError, match=r"freeze\.probe_epochs=2 for lpft"):
        _fit(module, data_dir, epochs=2)


def test_gradual_unfreezes_top_down_in_order(data_dir):
    torch.manual_seed(0)
    module = _module({"name": "gradual", "interval": "step", "every": 2, "group_size": 1})
    watch = _Watch(module)
    _fit(module, data_dir, epochs=3, callbacks=[watch])
    # a unit unfrozen at boundary b is first updated by step b + 1
    assert watch.first_change == {
        "layer4": 3,
        "layer3": 5,
        "layer2": 7,
        "layer1": 9,
        "embeddings": 11,
    }
    for step, modes in watch.modes:  # frozen units in eval mode, unfrozen ones training
        unfrozen = {u for u, first in watch.first_change.items() if first <= step}
        assert {u for u, training in modes.items() if training} == unfrozen, step
    history = module.adaptation.trainable_history
    assert [h["step"] for h in history] == [0, 2, 4, 6, 8, 10]
    assert history[-1]["unfrozen"] == ["layer4", "layer3", "layer2", "layer1", "embeddings"]
    assert [h["trainable"] for h in history] == sorted(h["trainable"] for h in history)
    assert module.adaptation.record["stages_reached"] == 6


def test_gradual_by_epoch_with_layer_groups(data_dir):
    torch.manual_seed(0)
    module = _module({"name": "gradual", "interval": "epoch", "every": 1, "group_size": 2})
    watch = _Watch(module)
    _fit(module, data_dir, epochs=2, callbacks=[watch])
    assert watch.first_change == {"layer4": 5, "layer3": 5}
    assert [h["unfrozen"] for h in module.adaptation.trainable_history] == [[], ["layer4+layer3"]]
    with pytest.raises(ConfigError, match=r"freeze.group_size=5 for gradual.*1..4"):
        _module({"name": "gradual", "group_size": 5})


def test_result_reports_the_maximum_trainable_count(compose_cfg, data_dir, tmp_path):
    from bench.run.train import run

    cfg = compose_cfg(
        "encoder=tiny_bert",
        "task=sst2",
        "freeze=gradual",
        "freeze.every=3",
        "seed=1",
        "data.train_size=64",
        "data.batch_size=16",
        "data.max_length=32",
        "trainer.max_epochs=1",
        f"data.dir={data_dir}",
    )
    result = run(cfg, tmp_path)
    assert result["status"] == "ok", result.get("reason")
    on_disk = json.loads((tmp_path / "result.json").read_text())
    history = on_disk["trainable_params_history"]
    assert [h["step"] for h in history] == [0, 3]  # 4 steps: one layer unfrozen at step 3
    assert on_disk["params"]["trainable"] == max(h["trainable"] for h in history)
    assert history[0]["trainable"] < on_disk["params"]["trainable"] < on_disk["params"]["total"]
    on_disk["run_dir"] = str(tmp_path)
    assert set(tidy([on_disk])["trainable_params"]) == {on_disk["params"]["trainable"]}


# --- LoRA -----------------------------------------------------------------------------------

LORA = {"name": "lora", "rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": None, "lr": 1e-2}


def _batch(data_dir, encoder=TINY):
    dm = _datamodule(data_dir, encoder)
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


def test_lora_only_adapters_and_head_receive_gradients(data_dir):
    pytest.importorskip("peft")
    torch.manual_seed(0)
    module = _module(LORA)
    batch = _batch(data_dir)
    module._loss(module(batch), batch).backward()
    with_grad = {n for n, p in module.named_parameters() if p.grad is not None}
    assert with_grad
    assert all("lora_" in n or n.startswith("head.") for n in with_grad), with_grad
    assert {n for n in with_grad if "lora_" in n} == {
        n for n, p in module.named_parameters() if "lora_" in n
    }
    adapters = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in with_grad if "lora_" in n}
    assert adapters == {"query", "value"}  # the BERT family's default targets
    # 4 layers x 2 projections x (A: r x H + B: H x r)
    assert module.adaptation.record["adapter_params"] == 4 * 2 * 2 * 4 * 32
    assert module.parameter_counts()["encoder_trainable"] == 4 * 2 * 2 * 4 * 32


def test_lora_fit_leaves_the_base_weights_and_merging_keeps_the_logits(data_dir):
    pytest.importorskip("peft")
    torch.manual_seed(0)
    module = _module(LORA)
    before = _snapshot(module)
    _fit(module, data_dir)
    changed = _changed(before, module)
    assert changed and all("lora_" in k or k.startswith("head.") for k in changed), changed
    assert any("lora_B" in k for k in changed)  # B starts at zero: the adapter now acts
    module.eval()
    batch = _batch(data_dir)
    with torch.no_grad():
        unmerged = module(batch)
        module.encoder = module.encoder.merge_and_unload()
        merged = module(batch)
    assert not any("lora_" in n for n, _ in module.named_parameters())
    torch.testing.assert_close(merged, unmerged, atol=1e-5, rtol=1e-4)


def test_lora_targets_default_per_family_and_unknown_names_are_config_errors():
    pytest.importorskip("peft")
    module = _module(LORA, encoder=ENCODERS["tiny_roberta"])
    assert module.adaptation.record["target_modules"] == ["query", "value"]
    with pytest.raises(
        ConfigError,
        match=r"freeze.target_modules: unknown module\(s\) 'q_proj'.*"
        r"valid module names: dense, key, query, value",
    ):
        _module({**LORA, "target_modules": ["query", "q_proj"]})
    custom = _module({**LORA, "target_modules": ["key", "dense"]})
    assert custom.adaptation.record["target_modules"] == ["key", "dense"]


@pytest.mark.parametrize(
    ("option", "targets"), [("tiny_gpt2", ["c_attn"]), ("tiny_qwen2", ["q_proj", "v_proj"])]
)
def test_lora_on_decoders_defaults_and_merges_exactly(data_dir, option, targets):
    """GPT-2's Conv1D (transposed weights) and Qwen2's linear projections take LoRA: with
    non-zero adapters, merging them into the weights leaves the logits unchanged."""
    pytest.importorskip("peft")
    encoder = OmegaConf.to_container(OmegaConf.load(CONF / "encoder" / f"{option}.yaml"))
    torch.manual_seed(0)
    module = _module(LORA, encoder=encoder)
    assert module.adaptation.record["target_modules"] == targets
    batch = _batch(data_dir, encoder)
    module._loss(module(batch), batch).backward()
    with_grad = {n for n, p in module.named_parameters() if p.grad is not None}
    assert with_grad and all("lora_" in n or n.startswith("head.") for n in with_grad)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
        module.eval()
        unmerged = module(batch)
        with module.encoder.disable_adapter():
            base = module(batch)
        module.encoder = module.encoder.merge_and_unload()
        merged = module(batch)
    assert not torch.allclose(unmerged, base, atol=1e-3)  # the adapters act
    torch.testing.assert_close(merged, unmerged, atol=1e-5, rtol=1e-4)


# --- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "label"),
    [
        ("lpft", "lpft"),
        ("gradual", "gradual"),
        ("llrd", "llrd"),
        ("reinit_top", "reinit2"),
        ("lora", "lora"),
        ("bitfit", "bitfit"),
    ],
)
def test_every_strategy_has_a_config_option(compose_cfg, option, label):
    cfg = compose_cfg(f"freeze={option}", "seed=1")
    assert cfg.freeze.name == option and cfg.freeze.label == label


def test_existing_cells_keep_their_config_hash(compose_cfg):
    from bench.cell import config_hash

    # cpu_heads cells were run with these hashes (selection on dev, no search, before the
    # evaluation protocol existed); new options must not move them: the old behaviour,
    # named explicitly, keeps its hash.
    cfg = compose_cfg(
        "experiment=cpu_heads",
        "task=rte",
        "head=linear",
        "freeze=full",
        "seed=1",
        "selection=dev",
        "search=none",
    )
    assert config_hash(cfg) == "d860ff77051cce144a88ad67b5a56005ae341308487c72d4131fbf1318f97345"
