"""Sentence pairs posed two ways: ``pair_encoding=cross`` (one sequence) or ``siamese``.

Under ``siamese`` each sentence is encoded alone (its own cache entries), the head's layers
and pooling (and the pooler's dense + tanh) run on each, and dropout → linear reads
``[u, v, |u-v|, u*v]``. ``cross`` is today's cell, hash and run directory unchanged.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from omegaconf import OmegaConf

from bench.cache.keys import FeatureKey
from bench.cache.serve import StatesCollate, serve_features
from bench.cell import cell_path, config_hash
from bench.data.encoder_inputs import SECOND_SENTENCE
from bench.data.sequence_datamodule import GlueDataModule, load_split
from bench.data.tasks import get_task
from bench.model.encoders import load_tokenizer, run_encoder
from bench.model.module import HeadbenchModule
from bench.run.train import run
from conftest import ENCODERS, ROOT, bench_in_this_process

OPTIM = {"encoder_lr": 1e-3, "head_lr": 1e-3, "frozen_head_lr": 1e-2, "weight_decay": 0.0}
HEADS = {
    "linear": {"name": "linear"},
    "mean_linear": {"name": "mean_linear"},
    "pooler": {"name": "pooler"},
    "last4_concat": {"name": "last4_concat"},
    "bilstm": {"name": "bilstm", "lstm_hidden": 16},
}


def _cell(data_dir, head="linear", task="stsb"):
    torch.manual_seed(0)
    dm = GlueDataModule(
        get_task(task),
        load_tokenizer(ENCODERS["tiny_bert"]),
        data_dir=data_dir,
        train_size=40,
        data_seed=0,
        max_length=64,
        batch_size=8,
        eval_batch_size=16,
        pair_encoding="siamese",
    )
    dm.setup("fit")
    dm.dev["dev"].examples = dm.dev["dev"].examples[:48]  # a small dev split keeps tests fast
    module = HeadbenchModule(
        ENCODERS["tiny_bert"],
        HEADS[head],
        {"name": "frozen"},
        task,
        OPTIM,
        dm.dev_names,
        pair_encoding="siamese",
    ).eval()
    return module, dm


def _short_and_long(dm):
    """The dev pair with the fewest tokens and the one with the most."""
    dev = dm.dev["dev"]
    size = [len(ex["input_ids"]) + len(ex[SECOND_SENTENCE]["input_ids"]) for ex in dev]
    return dev[size.index(min(size))], dev[size.index(max(size))]


@pytest.mark.parametrize("head", sorted(HEADS))
def test_siamese_logits_of_a_pair_do_not_depend_on_the_padding_beside_it(data_dir, head):
    module, dm = _cell(data_dir, head)
    short, long = _short_and_long(dm)
    alone, padded = dm._collate([short]), dm._collate([short, long])
    assert padded["input_ids"].shape[1] > alone["input_ids"].shape[1]
    assert (
        padded[SECOND_SENTENCE]["input_ids"].shape[1] > alone[SECOND_SENTENCE]["input_ids"].shape[1]
    )
    with torch.no_grad():
        torch.testing.assert_close(module(padded)[:1], module(alone), atol=1e-5, rtol=0)


def test_the_classifier_reads_u_v_their_distance_and_product(data_dir):
    """Against the pair computed by hand: each sentence tokenized and encoded on its own."""
    module, dm = _cell(data_dir, "pooler", task="mrpc")
    tokenizer, head = dm.tokenizer, module.head
    rows = dm.dev["dev"][:3]
    spec = get_task("mrpc")
    columns = load_split(spec, spec.dev["dev"], data_dir)
    with torch.no_grad():
        logits = module(dm._collate(rows))
        pooled = []
        for field in ("sentence1", "sentence2"):
            inputs = tokenizer(
                [columns[field][i] for i in range(3)], padding=True, return_tensors="pt"
            )
            states = run_encoder(module.encoder, inputs, False).hidden_states
            first = states[-1][:, 0]  # (B, H): [CLS] of the last layer
            dense = head.classifier.dense
            pooled.append(torch.tanh(first @ dense.weight.T + dense.bias))
        u, v = pooled
        features = torch.cat([u, v, (u - v).abs(), u * v], dim=1)
        expected = features @ head.classifier.out.weight.T + head.classifier.out.bias
    assert head.classifier.out.in_features == 4 * module.encoder_info.hidden_size
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


def test_each_sentence_has_its_own_cache_entry_and_the_same_logits(data_dir, tmp_path):
    module, dm = _cell(data_dir, "bilstm")
    batch = dm._collate(dm.dev["dev"][:16])
    with torch.no_grad():
        uncached = module(batch)
    served = serve_features(module, dm, {"dir": tmp_path})
    assert served.record["misses"] == ["train-s1", "train-s2", "dev-s1", "dev-s2"]
    assert served.record["resident"] is None  # two sentences per example: the example path
    names = {p.name.split("-L")[0] for p in tmp_path.rglob("*.safetensors")}  # a file per layer
    assert names == {f"{s}-s{i}" for s in ("train", "dev") for i in (1, 2)}
    dm.use_splits(served.splits, StatesCollate)
    module.use_cached_states(served.plan)
    cached_batch = next(iter(dm.val_dataloader()[0]))
    assert "cached_states" in cached_batch[SECOND_SENTENCE]
    module.encoder.forward = None  # any encoder forward would now fail
    with torch.no_grad():
        cached = module(cached_batch)
    torch.testing.assert_close(cached, uncached, atol=1e-5, rtol=0)


def test_the_two_sentences_cache_keys_differ_from_the_cross_entry():
    key = FeatureKey("e", "w", "t", "stsb", "train", 40, 0, 64, "i", (), "float32")
    first, second = (FeatureKey(**{**key.__dict__, "sentence": s}) for s in (1, 2))
    assert len({key.digest(), first.digest(), second.digest()}) == 3
    assert len({key.filename(), first.filename(), second.filename()}) == 3
    assert first.filename().startswith("e/stsb/train-s1-L-")
    # the cross key hashes as before the field existed: its entries on disk are still found
    old = {"format": 3, **{k: v for k, v in key.__dict__.items() if k != "sentence"}}
    old["layers"] = list(old["layers"])
    assert key.digest() == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()


def test_cross_keeps_the_hash_and_run_directory_of_a_committed_cell():
    cells = json.loads((ROOT / "results" / "fair_heads" / "cells.json").read_text())
    cell = next(c for c in cells if c["cell"]["task"] == "stsb")
    cfg = OmegaConf.create(cell["config"])  # the planned cell: the optim before its search
    cfg.optim = OmegaConf.load(ROOT / cell["run_dir"] / ".hydra" / "config.yaml").optim
    stored, path = cell["config_hash"], cell_path(cfg)
    assert config_hash(cfg) == stored
    cfg.pair_encoding = "cross"
    assert (config_hash(cfg), cell_path(cfg)) == (stored, path)
    cfg.pair_encoding = "siamese"
    assert config_hash(cfg) != stored  # (a composed siamese cell's label ends -siamese)


TINY = (
    "encoder=tiny_bert",
    "head=mean_linear",
    "seed=1",
    "data.train_size=32",
    "selection.size=20",
    "data.max_length=32",
    "trainer.max_epochs=1",
)


def _where(tmp_path):
    return (
        f"runs_dir={tmp_path}/runs",
        f"results_dir={tmp_path}/results",
        f"hydra.run.dir={tmp_path}/run",
        "report_file=null",
    )


@pytest.mark.parametrize("form", ["dry run", "single run"])
@pytest.mark.parametrize(
    ("task", "value", "named"),
    [
        ("sst2", "siamese", "task 'sst2' has no sentence pairs"),
        ("conll2003", "cross", "task 'conll2003' has no sentence pairs"),
        ("mrpc", "banana", "pair_encoding='banana'; valid choices: cross, siamese"),
    ],
)
def test_pair_encoding_is_refused_where_there_are_no_pairs(tmp_path, form, task, value, named):
    flags = ("--dry-run",) if form == "dry run" else ()
    proc = bench_in_this_process(
        *flags, *TINY, f"task={task}", f"pair_encoding={value}", *_where(tmp_path)
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said[-3000:]
    assert named in said and "Traceback" not in said
    if task != "mrpc":  # the tasks that take it
        assert "valid tasks: mrpc, qqp, stsb, rte, wnli, qnli, mnli" in said, said[-3000:]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("freeze", ["frozen", "full"])
def test_a_tiny_siamese_cell_trains_to_ok(compose_cfg, data_dir, tmp_path, freeze):
    cfg = compose_cfg(
        *TINY,
        "task=stsb",
        f"freeze={freeze}",
        "pair_encoding=siamese",
        f"data.dir={data_dir}",
        f"cache.dir={tmp_path / 'cache'}",
        "trainer.max_epochs=2",
    )
    result = run(cfg, tmp_path / "run")
    assert result["status"] == "ok", result.get("reason")
    assert result["best"]["metrics"]["dev"]["pearson"] is not None
    assert len(result["history"]) == 2
    hidden = result["encoder_info"]["hidden_size"]
    assert result["params"]["head"] == 4 * hidden + 1  # dropout → linear on [u, v, |u-v|, u*v]
    if freeze == "frozen":
        assert result["cache"]["misses"][:2] == ["train-s1", "train-s2"]


def test_siamese_cells_train_alone_not_in_lock_step(compose_cfg):
    from bench.run.lockstep import NotLockstep, group_key

    cell = ("encoder=tiny_bert", "task=stsb", "freeze=frozen", "seed=1", "order_seed=1")
    group_key(compose_cfg(*cell))  # a cross cell groups
    with pytest.raises(NotLockstep, match="pair_encoding=siamese"):
        group_key(compose_cfg(*cell, "pair_encoding=siamese"))


def test_the_command_line_runs_a_siamese_cell_in_its_own_directory(tmp_path, data_dir):
    proc = bench_in_this_process(
        *TINY,
        "task=stsb",
        "freeze=frozen",
        "pair_encoding=siamese",
        f"data.dir={data_dir}",
        f"cache.dir={tmp_path / 'cache'}",
        f"runs_dir={tmp_path}/runs",
        f"results_dir={tmp_path}/results",
        "report_file=null",
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    leaf = tmp_path / "runs/stsb/tiny_bert/mean_linear-siamese/frozen/seed=1"
    result = json.loads((leaf / "result.json").read_text())
    assert result["status"] == "ok" and result["cell"]["task"] == "stsb"
    assert result["config"]["pair_encoding"] == "siamese"


@pytest.mark.parametrize(
    ("overrides", "label"),
    [
        (("head=pooler",), "pooler-random"),
        (("head=pooler", "pair_encoding=cross"), "pooler-random"),
        (("head=pooler", "pair_encoding=siamese"), "pooler-random-siamese"),
        (("head=linear", "head.layers=-3", "pair_encoding=siamese"), "linear-L-3-siamese"),
    ],
)
def test_a_siamese_head_is_a_labelled_variant_beside_its_cross_self(compose_cfg, overrides, label):
    """Cross and siamese cells of one head keep apart in run directories and tables."""
    cfg = compose_cfg("task=stsb", "encoder=tiny_bert", "seed=1", *overrides)
    assert cfg.head.label == label
    assert cell_path(cfg).split("/")[2] == label
