"""Config tree: every option of every group composes and builds; bad names list valid choices."""

from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from bench.axes import freezing as axes_freezing
from bench.axes import heads as axes_heads
from bench.axes.encoders import POOLER_STATES
from bench.data.tasks import ALL_TASKS, TASKS, TOKEN_TASKS
from bench.model.encoders import load_tokenizer
from bench.model.heads import HEADS as HEAD_MODULES
from bench.model.heads import TOKEN_HEADS as TOKEN_HEAD_MODULES
from bench.model.module import HeadbenchModule
from conftest import CONF, ROOT

GROUPS = ["encoder", "head", "freeze", "task", "trainer", "optim"]
OFFLINE_ENCODERS = [
    "minilm",
    "tiny_bert",
    "tiny_roberta",
    "tiny_electra",
    "tiny_gpt2",
    "tiny_xlnet",
    "tiny_qwen2",
]
HUB_ENCODERS = [
    "bert_base_uncased",
    "bert_base_cased",
    "roberta_base",
    "distilroberta_base",
    "deberta_v3_base",
    "electra_base",
    "gpt2",
    "distilgpt2",
    "xlnet_base_cased",
    "qwen2_5_0_5b",
    "smollm2_360m",
]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def build(cfg) -> HeadbenchModule:
    plain = OmegaConf.to_container(cfg, resolve=True)
    task = plain["task"]["name"]
    return HeadbenchModule(
        encoder=plain["encoder"],
        head=plain["head"],
        freeze=plain["freeze"],
        task=task,
        optim=plain["optim"],
        dev_names=list(ALL_TASKS[task].dev),
    )


def test_the_groups_hold_exactly_the_registered_names():
    """One registry per axis: the option files and the module builders agree with it."""
    assert set(options("encoder")) == set(OFFLINE_ENCODERS + HUB_ENCODERS)
    assert options("head") == sorted([*axes_heads.HEADS, axes_heads.ANCHOR])
    assert set(HEAD_MODULES) == set(TOKEN_HEAD_MODULES) == set(axes_heads.HEADS)
    assert options("freeze") == sorted(axes_freezing.STRATEGIES)
    assert set(options("task")) == set(TASKS) | set(TOKEN_TASKS)


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_names_itself(compose_cfg, group, option):
    cfg = compose_cfg(f"{group}={option}", "seed=3")
    assert cfg[group].name == option
    plain = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    validate = {
        "head": lambda name: name == axes_heads.ANCHOR or axes_heads.validate(name),
        "freeze": axes_freezing.validate,
        "task": lambda name: ALL_TASKS[name],
        "encoder": lambda name: plain["encoder"]["pooler"] in POOLER_STATES,
    }
    if group in validate:
        assert validate[group](option)


def test_experiment_quick_composes(compose_cfg):
    cfg = compose_cfg("experiment=quick")
    assert cfg.encoder.name == "minilm" and cfg.task.name == "sst2"
    assert cfg.data.train_size == 2000 and cfg.seed == 1


@pytest.mark.parametrize(
    "overrides",
    [("encoder=tiny_bert", f"head={h}") for h in sorted(axes_heads.HEADS)]
    + [("encoder=tiny_roberta", f"head={h}") for h in sorted(axes_heads.HEADS)]
    + [("encoder=tiny_bert", f"freeze={f}") for f in options("freeze")]
    + [("encoder=tiny_bert", f"task={t}") for t in options("task") if t in TASKS]
    + [("encoder=minilm", f"head={h}") for h in sorted(axes_heads.HEADS)]
    + [("encoder=tiny_bert", "head=bilstm", "head.layers=[0,2]", "head.combine=scalar_mix")],
    ids=lambda o: "+".join(o),
)
def test_every_offline_option_builds_a_module(compose_cfg, overrides):
    if "freeze=lora" in overrides:
        pytest.importorskip("peft", reason="freeze=lora needs the optional extra headbench[lora]")
    cfg = compose_cfg(*overrides, "seed=1")
    module = build(cfg)
    counts = module.parameter_counts()
    assert counts["total"] == counts["encoder_total"] + counts["head"]
    tok = load_tokenizer(OmegaConf.to_container(cfg.encoder))
    batch = dict(
        tok(
            ["a short one", "and a somewhat longer sentence here"],
            padding=True,
            return_tensors="pt",
        )
    )
    logits = module.eval()(batch)
    assert logits.shape == (2, TASKS[cfg.task.name].num_labels)


def test_top_k_label_names_the_k(compose_cfg):
    cfg = compose_cfg("freeze=top_k", "freeze.k=3", "seed=1")
    assert cfg.freeze.label == "top3"
    assert (
        compose_cfg("head=pooler", "head.init=pretrained", "seed=1").head.label
        == "pooler-pretrained"
    )


@pytest.mark.network
@pytest.mark.parametrize("encoder", HUB_ENCODERS)
def test_hub_encoders_build(compose_cfg, encoder):
    cfg = compose_cfg(f"encoder={encoder}", "head=pooler", "seed=1")
    module = build(cfg)
    assert module.encoder_info.pooler_detected == cfg.encoder.pooler


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("head=transformer", "Available options in 'head'"),
        ("encoder=bert", "Available options in 'encoder'"),
        ("freeze=half", "Available options in 'freeze'"),
        ("task=squad", "Available options in 'task'"),
    ],
)
def test_bad_group_option_lists_valid_choices_and_writes_nothing(tmp_path, override, needle):
    proc = _cli(override, "seed=1", f"runs_dir={tmp_path}/runs", cwd=tmp_path)
    assert proc.returncode != 0
    assert needle in proc.stderr
    group = override.split("=")[0]
    for option in options(group):
        assert option in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_missing_seed_is_named(tmp_path):
    proc = _cli("encoder=tiny_bert", f"runs_dir={tmp_path}/runs", cwd=tmp_path)
    assert proc.returncode != 0
    assert "seed" in proc.stderr


@pytest.mark.parametrize("head", sorted(axes_heads.HEADS))  # an anchor has no module
@pytest.mark.parametrize("encoder", ["tiny_bert", "tiny_roberta"])
def test_every_head_builds_for_a_token_task_with_logits_per_token(compose_cfg, encoder, head):
    cfg = compose_cfg(f"encoder={encoder}", f"head={head}", "task=conll2003", "seed=1")
    assert cfg.head.pool is None  # a token task pools nothing (hb.by_task_kind)
    module = build(cfg)
    tok = load_tokenizer(OmegaConf.to_container(cfg.encoder))
    batch = dict(
        tok(
            ["a short one", "and a somewhat longer sentence here"],
            padding=True,
            return_tensors="pt",
        )
    )
    logits = module.eval()(batch)
    assert logits.shape == (*batch["input_ids"].shape, TOKEN_TASKS["conll2003"].num_labels)


def test_named_layers_and_crf_compose_from_the_command_line(compose_cfg):
    cfg = compose_cfg(
        "task=conll2003", "head=bilstm", "head.layers=sum_all", "+head.crf=true", "seed=1"
    )
    assert cfg.head.layers == "sum_all" and cfg.head.crf is True and cfg.head.lstm_layers == 2
    assert compose_cfg("task=sst2", "head=bilstm", "seed=1").head.lstm_layers == 1
