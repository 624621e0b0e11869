"""``trainer.compile``: the encoder compiled with ``torch.compile`` (bench/model/compiled.py)."""

from __future__ import annotations

import pytest
import torch

from bench.cell import config_hash
from bench.errors import ConfigError
from bench.model.compiled import COMPILE_MODES, check_compile_mode, compile_encoder
from bench.model.encoders import load_encoder, load_tokenizer, run_encoder
from bench.run.preflight import check_cell
from bench.run.train import run
from conftest import ENCODERS, assert_hashed_where_the_encoder_runs, tiny_sst2_cell


def test_the_modes_are_checked_naming_the_valid_choices():
    assert check_compile_mode(False) is None
    assert check_compile_mode(None) is None
    for mode in COMPILE_MODES:
        assert check_compile_mode(mode) == mode
    for bad in (True, "fast", 1):
        with pytest.raises(ConfigError, match=r"trainer.compile=.*valid choices: false, default"):
            check_compile_mode(bad)


def test_compiling_is_another_cell_only_where_an_encoder_forward_is_compiled(compose_cfg):
    """false keeps every existing hash; cells that read cached states run no forward to compile."""
    assert_hashed_where_the_encoder_runs(
        compose_cfg, "trainer.compile=false", "trainer.compile=default"
    )


def test_preflight_refuses_an_unknown_mode(compose_cfg, data_dir):
    cfg = tiny_sst2_cell(compose_cfg, "freeze=full", f"data.dir={data_dir}", "trainer.compile=fast")
    with pytest.raises(ConfigError, match=r"trainer\.compile='fast': valid choices"):
        check_cell(cfg)


@pytest.mark.slow
def test_a_compiled_encoder_computes_what_the_eager_one_does():
    """Same weights, dropout off: the same hidden states and gradients, on padded batches."""
    torch.manual_seed(0)
    eager, _ = load_encoder(ENCODERS["tiny_bert"])
    compiled, _ = load_encoder(ENCODERS["tiny_bert"])
    for model in (eager, compiled):
        model.pooler = None  # as the module has it: the head is the only pooler
    compile_encoder(compiled, "default")
    tokenizer = load_tokenizer(ENCODERS["tiny_bert"])
    for texts in (["a short one", "and a rather longer sentence than that"], ["three", "b", "c"]):
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        outs = []
        for model in (eager, compiled):
            model.eval()  # no dropout: the compiled graph draws its masks elsewhere
            model.zero_grad()
            states = run_encoder(model, batch, causal=False).hidden_states
            (states[-1] * batch["attention_mask"][..., None]).square().sum().backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters()}
            outs.append(([s.detach() for s in states], grads))
        (e_states, e_grads), (c_states, c_grads) = outs
        for e, c in zip(e_states, c_states, strict=True):
            torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)
        assert e_grads.keys() == c_grads.keys()
        for name, e in e_grads.items():
            torch.testing.assert_close(c_grads[name], e, rtol=1e-3, atol=1e-4, msg=name)


@pytest.mark.slow
def test_a_compiled_cell_trains_and_says_so(compose_cfg, data_dir, tmp_path):
    common = (
        f"data.dir={data_dir}",
        "selection=dev",
        "data.train_size=96",
        "data.max_length=32",
        "data.batch_size=16",
        "trainer.max_epochs=1",
        f"cache.dir={tmp_path / 'cache'}",
    )
    compiled = run(
        tiny_sst2_cell(compose_cfg, "freeze=full", "trainer.compile=default", *common),
        tmp_path / "c",
    )
    assert compiled["status"] == "ok", compiled.get("reason")
    assert compiled["compile"] == {"mode": "default", "applied": True}
    cached = run(
        tiny_sst2_cell(compose_cfg, "freeze=frozen", "trainer.compile=default", *common),
        tmp_path / "f",
    )
    assert cached["status"] == "ok" and cached["compile"] == {"mode": "default", "applied": False}


def test_a_lockstep_cell_accepts_compile_and_says_it_did_not_apply(compose_cfg, data_dir, tmp_path):
    """A lock-step cell reads cached states: nothing to compile, and its hash ignores the key."""
    from bench.run.lockstep import group_key, train_group

    cfgs = [
        tiny_sst2_cell(
            compose_cfg,
            "freeze=frozen",
            "selection=dev",
            "order_seed=7",
            f"data.dir={data_dir}",
            "data.train_size=64",
            "data.max_length=32",
            "data.batch_size=16",
            "trainer.max_epochs=1",
            f"cache.dir={tmp_path / 'cache'}",
            *compiled,
        )
        for compiled in ((), ("trainer.compile=default",))
    ]
    assert group_key(cfgs[0]) == group_key(cfgs[1])
    assert config_hash(cfgs[0]) == config_hash(cfgs[1])
    plain, compiled = train_group(cfgs, [tmp_path / "plain", tmp_path / "compiled"])
    assert plain["status"] == compiled["status"] == "ok"
    assert "compile" not in plain
    assert compiled["compile"] == {"mode": "default", "applied": False}
    assert compiled["history"] == plain["history"]  # the same cell: same batches, same numbers


@pytest.mark.slow
def test_a_process_compiles_the_encoder_once_for_all_its_cells(compose_cfg, data_dir, tmp_path):
    """A sweep worker trains cell after cell: only the first pays the compilation.

    Each cell builds a new encoder; dynamo treats its parameters as inputs, so the graphs the
    first cell compiled serve the next (its count of distinct graphs does not grow).
    """
    from torch._dynamo.utils import counters

    common = (
        f"data.dir={data_dir}",
        "freeze=full",
        "selection=dev",
        "data.train_size=48",
        "data.max_length=32",
        "data.batch_size=16",
        "trainer.max_epochs=1",
        "trainer.compile=default",
        f"cache.dir={tmp_path / 'cache'}",
    )
    torch._dynamo.reset()
    graphs = []
    for seed in (1, 2):
        cfg = compose_cfg("encoder=tiny_bert", "task=sst2", "head=linear", f"seed={seed}", *common)
        result = run(cfg, tmp_path / str(seed))
        assert result["status"] == "ok" and result["compile"]["applied"], result.get("reason")
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] > 0
    assert graphs[1] == graphs[0]
