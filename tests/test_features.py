"""The hidden-state cache: same logits as the encoder path, keys that miss, damage, concurrency."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from omegaconf import OmegaConf

from bench.cache.keys import FeatureKey
from bench.cache.serve import StatesCollate, serve_features
from bench.cache.store import BUILD_LOG, FeatureStore, FlatStates
from bench.cell import config_hash
from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.model.encoders import load_tokenizer
from bench.model.module import HeadbenchModule
from bench.run.train import run
from conftest import ENCODERS, ROOT

OPTIM = {
    "encoder_lr": 1e-3,
    "head_lr": 1e-3,
    "frozen_head_lr": 1e-2,
    "weight_decay": 0.0,
    "warmup_ratio": 0.0,
}
HEADS = {
    "linear": {"name": "linear", "layers": [-1], "pool": "cls", "dropout": 0.1},
    "last4_concat": {
        "name": "last4_concat",
        "layers": [-4, -3, -2, -1],
        "pool": "cls",
        "dropout": 0.1,
    },
    "bilstm": {
        "name": "bilstm",
        "layers": [-1],
        "pool": "final",
        "lstm_hidden": 16,
        "dropout": 0.1,
    },
}


def _cell(
    data_dir,
    head="linear",
    freeze="frozen",
    k=None,
    max_length=32,
    train_size=40,
    data_seed=0,
    encoder="tiny_bert",
):
    torch.manual_seed(0)
    spec = get_task("sst2")
    tokenizer = load_tokenizer(ENCODERS[encoder])
    dm = GlueDataModule(
        spec,
        tokenizer,
        data_dir=data_dir,
        train_size=train_size,
        data_seed=data_seed,
        max_length=max_length,
        batch_size=8,
        eval_batch_size=16,
    )
    dm.setup("fit")
    dm.dev["dev"].examples = dm.dev["dev"].examples[:48]  # a small dev split keeps tests fast
    module = HeadbenchModule(
        ENCODERS[encoder], HEADS[head], {"name": freeze, "k": k}, "sst2", OPTIM, dm.dev_names
    )
    return module, dm


def _serve(module, dm, cfg):
    """What the run does: ask the cache, then hand its splits and plan over."""
    served = serve_features(module, dm, cfg)
    if served.plan is not None:
        dm.use_splits(served.splits, StatesCollate)
        module.use_cached_states(served.plan)
    return served.record


def test_serving_changes_neither_module_nor_datamodule(data_dir, tmp_path):
    module, dm = _cell(data_dir)
    train, dev = dm.train, dict(dm.dev)
    served = serve_features(module, dm, {"dir": tmp_path})
    assert module.feature_plan is None and dm.train is train and dm.dev == dev
    assert "cached_states" not in _first_batch(dm)
    assert set(served.splits) == {"train", "dev"} and served.record["misses"] == ["train", "dev"]
    dm.use_splits(served.splits, StatesCollate)
    assert _first_batch(dm)["cached_states"].shape[2] == len(served.plan.layers)
    with pytest.raises(ValueError, match="unknown splits"):
        dm.use_splits({"test": served.splits["dev"]}, StatesCollate)


def _first_batch(dm):
    return next(iter(dm.val_dataloader()[0]))


@pytest.mark.parametrize(
    ("head", "dtype", "atol"),
    [("linear", "float32", 1e-5), ("last4_concat", "float32", 1e-5), ("bilstm", "float16", 5e-3)],
)
def test_cached_frozen_cell_gives_the_encoder_paths_logits(data_dir, tmp_path, head, dtype, atol):
    module, dm = _cell(data_dir, head=head)
    module.eval()
    with torch.no_grad():
        uncached = module(_first_batch(dm))
    info = _serve(module, dm, {"dir": tmp_path, "dtype": dtype})
    assert info["misses"] == ["train", "dev"] and info["dtype"] == dtype
    batch = _first_batch(dm)
    assert "cached_states" in batch
    n_layers = 4 if head == "last4_concat" else 1
    assert batch["cached_states"].shape[2] == n_layers  # only the head's layers are stored
    module.encoder.forward = None  # any encoder forward would now fail
    with torch.no_grad():
        cached = module(batch)
    torch.testing.assert_close(cached, uncached, atol=atol, rtol=0)


@pytest.mark.parametrize("encoder", ["tiny_bert", "tiny_roberta"])
def test_partial_cache_runs_only_the_top_layers_with_the_same_logits(data_dir, tmp_path, encoder):
    module, dm = _cell(data_dir, head="last4_concat", freeze="top_k", k=2, encoder=encoder)
    module.eval()  # no dropout in the trainable top layers, so both paths are deterministic
    with torch.no_grad():
        uncached = module(_first_batch(dm))
    info = _serve(module, dm, {"dir": tmp_path})
    assert info["top_from"] == 2 and info["layers"] == [1, 2] and info["dtype"] == "float32"
    layers = module.encoder.encoder.layer
    calls = []
    hooks = [
        layer.register_forward_hook(lambda *_, i=i: calls.append(i))
        for i, layer in enumerate(layers)
    ]
    batch = _first_batch(dm)
    cached = module(batch)
    assert calls == [2, 3]  # the two frozen layers never run
    torch.testing.assert_close(cached, uncached, atol=1e-5, rtol=0)
    cached.sum().backward()
    assert layers[3].output.dense.weight.grad is not None
    for hook in hooks:
        hook.remove()


def _misses(data_dir, root, store="head", **kwargs):
    module, dm = _cell(data_dir, **kwargs)
    cfg = {"dir": root, "dtype": "float16", "store_layers": store}
    return _serve(module, dm, cfg)["misses"]


def test_a_changed_key_misses_the_cache(data_dir, tmp_path):
    assert _misses(data_dir, tmp_path) == ["train", "dev"]
    assert _misses(data_dir, tmp_path) == []  # same key: served from disk
    assert _misses(data_dir, tmp_path, max_length=24) == ["train", "dev"]
    assert _misses(data_dir, tmp_path, head="last4_concat") == ["train", "dev"]  # other layers
    assert _misses(data_dir, tmp_path, head="last4_concat") == []
    assert _misses(data_dir, tmp_path, train_size=41) == ["train"]
    assert _misses(data_dir, tmp_path, data_seed=1) == ["train"]
    assert _misses(data_dir, tmp_path, encoder="tiny_roberta") == ["train", "dev"]


def test_other_encoder_weights_miss_the_cache(data_dir, tmp_path):
    module, dm = _cell(data_dir)
    _serve(module, dm, {"dir": tmp_path})
    module, dm = _cell(data_dir)
    with torch.no_grad():
        module.encoder.encoder.layer[0].output.dense.bias.add_(1e-3)
    assert _serve(module, dm, {"dir": tmp_path})["misses"] == ["train", "dev"]


def test_a_truncated_cache_file_is_rebuilt_not_read(data_dir, tmp_path):
    module, dm = _cell(data_dir)
    _serve(module, dm, {"dir": tmp_path, "dtype": "float32"})
    reference = _first_batch(dm)["cached_states"]
    (entry,) = tmp_path.rglob("dev-L4-*.safetensors")  # the layer the linear head reads
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])
    module, dm = _cell(data_dir)
    info = _serve(module, dm, {"dir": tmp_path, "dtype": "float32"})
    assert info["misses"] == ["dev"] and info["hits"] == ["train"]
    assert entry.stat().st_size == len(data)
    torch.testing.assert_close(_first_batch(dm)["cached_states"], reference)


def _layer_files(root, split):
    return sorted(int(p.name.split("-")[1][1:]) for p in root.rglob(f"{split}-L*.safetensors"))


def test_one_encoder_pass_serves_every_head_and_top_k_cell_after_it(data_dir, tmp_path):
    """``store_layers=auto``: the first cell's pass stores all 5 hidden states of tiny_bert."""
    module, dm = _cell(data_dir, head="linear")
    info = _serve(module, dm, {"dir": tmp_path})
    assert info["misses"] == ["train", "dev"] and info["stored"] == [0, 1, 2, 3, 4]
    assert _layer_files(tmp_path, "train") == _layer_files(tmp_path, "dev") == [0, 1, 2, 3, 4]
    log = tmp_path / "features" / BUILD_LOG
    builds = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(b["split"], b["layers"]) for b in builds] == [
        ("train", [0, 1, 2, 3, 4]),
        ("dev", [0, 1, 2, 3, 4]),
    ]
    for head, freeze, k in [
        ("last4_concat", "frozen", None),
        ("bilstm", "frozen", None),
        ("last4_concat", "top_k", 2),
    ]:
        module, dm = _cell(data_dir, head=head, freeze=freeze, k=k)
        module.eval()
        with torch.no_grad():
            uncached = module(_first_batch(dm))
        info = _serve(module, dm, {"dir": tmp_path})
        assert info["misses"] == [] and info["stored"] == [], (head, freeze)
        with torch.no_grad():
            torch.testing.assert_close(module(_first_batch(dm)), uncached, atol=1e-5, rtol=0)
    assert len(log.read_text().splitlines()) == 2  # still one encoder pass per split


def test_store_layers_choices_and_the_auto_size_limit(data_dir, tmp_path):
    from bench.errors import ConfigError

    module, dm = _cell(data_dir, head="linear")
    info = _serve(module, dm, {"dir": tmp_path / "a", "auto_max_gb": 1e-6})
    assert info["stored"] == [4]  # over the limit: only the head's layer
    module, dm = _cell(data_dir, head="linear")
    info = _serve(module, dm, {"dir": tmp_path / "b", "store_layers": [-2, 0]})
    assert info["stored"] == [0, 3, 4] and _layer_files(tmp_path / "b", "dev") == [0, 3, 4]
    module, dm = _cell(data_dir, head="last4_concat")  # needs 1-4; 3 and 4 are on disk
    info = _serve(module, dm, {"dir": tmp_path / "b", "store_layers": "head"})
    assert info["misses"] == ["train", "dev"] and info["stored"] == [1, 2]
    for bad, match in [
        ("some", r"cache.store_layers='some'; valid choices: auto, head, all"),
        ([9], r"cache.store_layers: head.layers contains 9"),
    ]:
        module, dm = _cell(data_dir)
        with pytest.raises(ConfigError, match=match):
            _serve(module, dm, {"dir": tmp_path / "c", "store_layers": bad})


def test_disabled_cache_and_other_strategies_keep_the_encoder_path(data_dir, tmp_path):
    module, dm = _cell(data_dir)
    assert _serve(module, dm, {"dir": tmp_path, "enabled": False}) == {"enabled": False}
    module, dm = _cell(data_dir, freeze="full")
    assert _serve(module, dm, {"dir": tmp_path})["enabled"] is False
    assert "cached_states" not in _first_batch(dm) and not list(tmp_path.rglob("*.safetensors"))


_WORKER = textwrap.dedent(
    """
    import sys, time, torch
    sys.path.insert(0, {root!r})
    from bench.cache.keys import FeatureKey
    from bench.cache.store import BUILD_LOG, FeatureStore, FlatStates
    key = FeatureKey("enc", "w", "t", "sst2", "train", 3, 0, 16, "in", (), "float16")
    def build(layers):
        with open({log!r}, "a") as handle:
            handle.write("built\\n")
        time.sleep(1.0)  # long enough for the other process to arrive meanwhile
        states = torch.arange(6 * 2 * 8, dtype=torch.float16).reshape(6, 2, 8)
        return FlatStates(states, torch.tensor([[0, 2], [2, 1], [3, 3]]))
    flat, built = FeatureStore({root_dir!r}).get_layers(key, [4], 3, build, extra=[3])
    print("built" if built else "hit", float(flat.states.sum()))
    """
)


def test_two_processes_filling_one_entry_leave_one_valid_entry(tmp_path):
    log = tmp_path / "builds.log"
    script = _WORKER.format(root=str(ROOT), log=str(log), root_dir=str(tmp_path / "cache"))
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(o[0] for o in outputs) == ["built", "hit"]
    assert outputs[0][1] == outputs[1][1]
    assert log.read_text().count("built") == 1  # the encoder forward ran once
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert sorted(p.suffix for p in entries if p.suffix not in (".lock", ".jsonl")) == [
        ".safetensors",
        ".safetensors",
    ]  # layers 3 and 4
    lines = (tmp_path / "cache" / BUILD_LOG).read_text().splitlines()
    builds = [json.loads(line) for line in lines]
    assert [(b["split"], b["layers"]) for b in builds] == [("train", [3, 4])]  # the cache's count
    key = FeatureKey("enc", "w", "t", "sst2", "train", 3, 0, 16, "in", (4,), "float16")
    flat = FeatureStore(tmp_path / "cache").load(key, 3)
    assert flat is not None and flat.example(2).shape == (3, 1, 8)
    assert float(flat.states.sum()) == float(outputs[0][1])  # layer 4 is the pass's 2nd layer


def test_a_wrong_example_count_is_not_served(tmp_path):
    key = FeatureKey("enc", "w", "t", "sst2", "train", 2, 0, 16, "in", (4,), "float32")
    store = FeatureStore(tmp_path)
    store.save(key, FlatStates(torch.zeros(3, 1, 4), torch.tensor([[0, 1], [1, 2]])))
    assert store.load(key, 2) is not None
    assert store.load(key, 3) is None and not store.path(key).exists()


def test_cached_and_uncached_frozen_cells_score_alike(compose_cfg, data_dir, tmp_path):
    common = (
        "encoder=tiny_bert",
        "head=linear",
        "freeze=frozen",
        "task=rte",
        "seed=3",
        "data.train_size=64",
        f"data.dir={data_dir}",
        "trainer.max_epochs=2",
        "data.max_length=48",
        "data.group_by_length=true",
        f"cache.dir={tmp_path / 'c'}",
        "cache.dtype=float32",
    )
    cached = run(compose_cfg(*common), tmp_path / "cached")
    uncached_cfg = compose_cfg(*common, "cache.enabled=false")
    uncached = run(uncached_cfg, tmp_path / "uncached")
    assert cached["status"] == uncached["status"] == "ok", cached.get("reason")
    assert cached["cache"]["misses"] == ["train", "select", "dev"]
    assert uncached["cache"]["enabled"] is False
    for a, b in zip(cached["history"], uncached["history"], strict=True):
        assert a["select"]["accuracy"] == b["select"]["accuracy"]
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-4)
    assert cached["best"]["metrics"]["dev"] == uncached["best"]["metrics"]["dev"]
    # Same scores here, but BiLSTM training can amplify the rounding: a different cell.
    assert config_hash(compose_cfg(*common)) != config_hash(uncached_cfg)


def test_new_data_keys_leave_existing_config_hashes_alone(compose_cfg):
    cfg = compose_cfg("encoder=tiny_bert", "seed=1")
    old = OmegaConf.to_container(cfg, resolve=True)
    del old["data"]["group_by_length"]
    del old["optim"]["fused"]
    assert config_hash(cfg) == config_hash(OmegaConf.create(old))
    for changed in ("data.group_by_length=true", "optim.fused=true"):
        assert config_hash(compose_cfg("encoder=tiny_bert", "seed=1", changed)) != config_hash(cfg)


def test_bf16_mixed_precision_trains_a_cached_top_k_cell(compose_cfg, data_dir, tmp_path):
    common = (
        "encoder=tiny_bert",
        "head=linear",
        "freeze=top_k",
        "freeze.k=1",
        "task=sst2",
        "seed=1",
        "data.train_size=32",
        f"data.dir={data_dir}",
        "trainer.max_epochs=1",
        "data.max_length=32",
        f"cache.dir={tmp_path / 'c'}",
    )
    cfg = compose_cfg(*common, "trainer.precision=bf16-mixed")
    result = run(cfg, tmp_path / "run")
    assert result["status"] == "ok", result.get("reason")
    assert result["cache"]["top_from"] == 3 and result["throughput"]["examples"] == 32
    assert config_hash(cfg) != config_hash(compose_cfg(*common))  # bf16 changes numbers


def test_token_task_cells_read_cached_states_too(data_dir, tmp_path):
    from bench.data.token_datamodule import TokenDataModule

    torch.manual_seed(0)
    dm = TokenDataModule(
        get_task("conll2003"),
        load_tokenizer(ENCODERS["tiny_bert"]),
        data_dir=data_dir,
        train_size=16,
        data_seed=0,
        max_length=32,
        batch_size=8,
        eval_batch_size=16,
    )
    dm.setup("fit")
    for name in dm.dev_names:
        dm.dev[name].examples = dm.dev[name].examples[:32]
    head = {"name": "bilstm", "layers": [-1], "pool": None, "lstm_hidden": 16, "dropout": 0.1}
    module = HeadbenchModule(
        ENCODERS["tiny_bert"], head, {"name": "frozen"}, "conll2003", OPTIM, dm.dev_names
    )
    module.eval()
    with torch.no_grad():
        uncached = module(_first_batch(dm))
    info = _serve(module, dm, {"dir": tmp_path, "dtype": "float32"})
    assert info["misses"] == ["train", *dm.dev_names]
    batch = _first_batch(dm)
    assert "word_pos" in batch and "cached_states" in batch
    with torch.no_grad():
        torch.testing.assert_close(module(batch), uncached, atol=1e-5, rtol=0)


def test_an_unknown_cache_dtype_names_the_valid_ones(data_dir, tmp_path):
    from bench.errors import ConfigError

    module, dm = _cell(data_dir)
    with pytest.raises(ConfigError, match=r"cache.dtype='int8'; valid choices: float16, bfloat16"):
        _serve(module, dm, {"dir": tmp_path, "dtype": "int8"})
