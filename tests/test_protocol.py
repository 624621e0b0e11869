"""The evaluation protocol: a selection slice held out from train, an equal search budget.

Selection is not reporting: the slice is carved from train (stratified, fixed seed,
disjoint from the training examples), chooses the epoch and the trial, and the reporting
split is scored once. The decisive test shuffles dev's labels in a copy of the data and
runs a small search: every selected trial, epoch and selection score stays identical.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from bench.cell import TRIAL_FILE, config_hash
from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.selection import MIN_SIZE, carve_selection
from bench.data.sequence_datamodule import subset
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.run import search
from bench.run.search import draw_trials, run_with_search, trials_dir
from bench.run.train import run

FAST = ("trainer.max_epochs=2", "data.max_length=48", "data.batch_size=16")


def _train_labels(data_dir, task):
    spec = get_task(task)
    return read_glue_tsv(glue_file(data_dir, spec, "train.tsv"), spec)


# --- the selection slice -----------------------------------------------------------------


@pytest.mark.parametrize("task", ["rte", "cola", "stsb"])
def test_the_slice_is_disjoint_stratified_and_leaves_the_training_subset_alone(data_dir, task):
    columns = _train_labels(data_dir, task)
    labels, n = columns["label"], len(columns["label"])
    train_size = min(2000, n - 300)
    subset_rows = subset({"idx": list(range(n))}, train_size, 0, "train")["idx"]
    kind = "bins" if get_task(task).is_regression else "class"
    train, select = carve_selection(labels, np.array(subset_rows), 500, 0, kind, "train")
    assert train.tolist() == subset_rows  # the training subset is the one without a slice
    assert not set(train) & set(select)
    assert len(select) == min(500, n - train_size)
    assert select.tolist() == sorted(select.tolist())
    again = carve_selection(labels, np.array(subset_rows), 500, 0, kind, "train")[1]
    assert again.tolist() == select.tolist()  # a fixed seed
    if kind == "class":  # every class keeps its share of the examples left over, within one
        rest = sorted(set(range(n)) - set(subset_rows))
        share = Counter(labels[i] for i in rest)
        got = Counter(labels[i] for i in select)
        for label, count in share.items():
            assert abs(got[label] - count * len(select) / len(rest)) < 1
    else:  # every quintile of the scores is represented
        values = np.array(labels, dtype=float)
        edges = np.quantile(values, [0.2, 0.4, 0.6, 0.8])
        assert set(np.searchsorted(edges, values[select], side="right")) == set(range(5))


def test_rte_with_2000_training_examples_selects_on_its_other_490(data_dir):
    labels = _train_labels(data_dir, "rte")["label"]
    rows = subset({"idx": list(range(len(labels)))}, 2000, 0, "train")["idx"]
    train, select = carve_selection(labels, np.array(rows), 500, 0, "class", "rte train")
    assert (len(train), len(select)) == (2000, 490)
    assert sorted([*train, *select]) == list(range(2490))


def test_without_a_training_subset_the_slice_comes_first():
    labels = [i % 3 for i in range(1000)]
    train, select = carve_selection(labels, None, 300, 7, "class", "train")
    assert len(select) == 300 and len(train) == 700
    assert Counter(labels[i] for i in select) == {0: 100, 1: 100, 2: 100}


def test_a_slice_too_small_is_refused_naming_the_keys():
    labels = [0, 1] * 50
    with pytest.raises(ConfigError, match=r"data.train_size=90 leaves 10.*selection=dev"):
        carve_selection(labels, np.arange(90), 500, 0, "class", "x train")
    with pytest.raises(ConfigError, match=rf"selection.size=5: must be an integer >= {MIN_SIZE}"):
        carve_selection(labels, None, 5, 0, "class", "x train")


# --- the search budget -------------------------------------------------------------------


def test_every_head_gets_the_same_trials_and_a_larger_budget_keeps_the_first(compose_cfg):
    cfgs = [
        compose_cfg(f"head={head}", "freeze=frozen", "search=random", "seed=1")
        for head in ("linear", "bilstm", "mean_linear", "pooler", "last4_concat")
    ]
    draws = [draw_trials(search.space_of(c), 6, 0) for c in cfgs]
    assert all(d == draws[0] for d in draws)
    assert len({json.dumps(d, sort_keys=True) for d in draws[0]}) == 6  # no repeats
    assert draw_trials(search.space_of(cfgs[0]), 8, 0)[:6] == draws[0]
    assert draw_trials(search.space_of(cfgs[0]), 6, 1) != draws[0]
    full = draw_trials(search.space_of(cfgs[0]), 12, 0)  # 6 learning rates × 2 decays
    assert sorted(json.dumps(d, sort_keys=True) for d in full) == sorted(
        json.dumps({"frozen_head_lr": lr, "weight_decay": wd}, sort_keys=True)
        for lr in (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
        for wd in (0.0, 0.01)
    )
    with pytest.raises(ConfigError, match=r"search.trials=13: must be an integer from 1 to 12"):
        draw_trials(search.space_of(cfgs[0]), 13, 0)


def test_fine_tuning_trials_set_the_head_rate_from_the_encoder_rate(compose_cfg):
    cfg = compose_cfg("freeze=full", "search=random", "seed=1")
    assert search.family("full") == "finetune" and search.family("frozen") == "frozen"
    values = {"encoder_lr": 2e-5, "head_lr_ratio": 10, "warmup_ratio": 0.0}
    tuned = search.apply_values(cfg, values)
    assert tuned.optim.encoder_lr == 2e-5 and tuned.optim.warmup_ratio == 0.0
    assert tuned.optim.head_lr == pytest.approx(2e-4)
    assert cfg.optim.encoder_lr == 3e-5  # the cell's config is left alone
    trial = search.trial_config(cfg, values)
    assert trial.seed == cfg.search.seed and trial.search.trials == 0


def test_a_space_key_that_is_not_an_optimizer_key_is_named(compose_cfg):
    cfg = compose_cfg("freeze=frozen", "search=random", "seed=1", "+search.space.frozen.lr=[1]")
    with pytest.raises(ConfigError, match=r"search.space.frozen.lr: not an optim key; valid: "):
        search.space_of(cfg)


def test_the_search_and_the_selection_enter_the_config_hash(compose_cfg):
    plain = compose_cfg("seed=1")
    assert config_hash(compose_cfg("seed=1", "search=random")) != config_hash(plain)
    assert config_hash(compose_cfg("seed=1", "selection.size=400")) != config_hash(plain)
    # selection=dev without a search is the old behaviour: old results keep their hashes
    old = compose_cfg("seed=1", "selection=dev")
    OmegaConf.set_struct(old, False)
    del old["selection"], old["search"]
    assert config_hash(compose_cfg("seed=1", "selection=dev")) == config_hash(old)


def test_select_trial_takes_the_best_score_and_the_lower_number_on_ties():
    def trial(k, score, status="ok"):
        return {"trial": k, "status": status, "selection": {"metrics": {"accuracy": score}}}

    records = [trial(1, 0.7), trial(2, 0.8), trial(3, 0.8), trial(4, 0.9, "diverged")]
    assert search.select_trial(records, "accuracy")["trial"] == 2
    assert search.select_trial([trial(1, None), trial(2, 0.5, "failed")], "accuracy") is None


# --- end to end: a small search, and the shuffled-dev-labels proof --------------------------


def _shuffled_copy(data_dir, tmp_path, task):
    """A copy of the data whose dev labels are shuffled (the train file is untouched)."""
    spec = get_task(task)
    src = glue_file(data_dir, spec, "dev.tsv")
    root = tmp_path / "shuffled"
    folder = root / "glue" / src.parent.name
    shutil.copytree(src.parent, folder)
    lines = src.read_text(encoding="utf-8-sig").splitlines()
    header, body = lines[0].split("\t"), [line.split("\t") for line in lines[1:]]
    column = header.index("label")
    labels = [row[column] for row in body]
    random.Random(0).shuffle(labels)
    assert labels != [row[column] for row in body]
    for row, label in zip(body, labels, strict=True):
        row[column] = label
    text = "\n".join("\t".join(row) for row in [header, *body]) + "\n"
    (folder / "dev.tsv").write_text(text, encoding="utf-8")
    return root


RANDOM = ("search=random", "search.trials=3")


def _search(compose_cfg, data, runs, seed=1, protocol=RANDOM):
    cfg = compose_cfg(
        "encoder=tiny_bert",
        "head=linear",
        "freeze=frozen",
        "task=rte",
        f"seed={seed}",
        "data.train_size=160",
        "selection.size=96",
        *protocol,
        f"data.dir={data}",
        f"cache.dir={runs.parent / 'cache'}",
        *FAST,
    )
    run_dir = runs / "rte" / "tiny_bert" / "linear" / "frozen" / f"seed={seed}"
    return run_with_search(cfg, run_dir, run), run_dir


#: Protocol v3 (bench/run/search.py): the full grid, each seed's own search, batch order and
#: slice, ties by the lowest values, early stopping on the slice.
V3 = (
    "search=grid",
    "search.space.frozen.frozen_head_lr=[1e-3,1e-2,1e-1]",
    "search.space.frozen.weight_decay=[0.0]",
    "+trainer.early_stopping.patience=1",
)


@pytest.mark.parametrize("protocol", [RANDOM, V3], ids=["random", "v3"])
def test_shuffling_dev_labels_changes_no_selection(compose_cfg, data_dir, tmp_path, protocol):
    real, real_dir = _search(compose_cfg, data_dir, tmp_path / "a" / "runs", protocol=protocol)
    shuffled_data = _shuffled_copy(data_dir, tmp_path, "rte")
    fake, fake_dir = _search(compose_cfg, shuffled_data, tmp_path / "b" / "runs", protocol=protocol)
    assert real["status"] == fake["status"] == "ok", (real.get("reason"), fake.get("reason"))
    paired = real["search"].get("pairing") == "seed"

    def trials(run_dir):
        out = []
        folder = trials_dir(run_dir, 1 if paired else None)
        for k in (1, 2, 3):
            record = json.loads((folder / f"trial={k}" / TRIAL_FILE).read_text())
            assert record["best"]["metrics"] == {}  # a trial never sees a reporting split
            assert not list((folder / f"trial={k}").glob("predictions_*"))
            sel = record["selection"]
            out.append((record["trial_config"], sel["best_epoch"], sel["metrics"], sel["ids"]))
        return out

    assert trials(real_dir) == trials(fake_dir)
    for key in ("selected", "selected_config", "scores"):
        assert real["search"][key] == fake["search"][key]
    for key in ("best_epoch", "metrics", "ids", "size"):
        assert real["selection"][key] == fake["selection"][key]
    assert real["selection"]["mode"] == "heldout" and real["selection"]["size"] == 96
    assert real["best"]["epoch"] == fake["best"]["epoch"]
    # ...while the reporting split is scored, once, with its own labels: the same model
    # predicts the same classes, which are scored against different labels
    real_dev, fake_dev = (
        pd.read_csv(d / "predictions_dev.csv", index_col="idx") for d in (real_dir, fake_dir)
    )
    assert real_dev["pred"].tolist() == fake_dev["pred"].tolist()
    assert real_dev["label"].tolist() != fake_dev["label"].tolist()
    assert [h.keys() - {"epoch", "step", "train_loss"} for h in real["history"]] == [
        {"select"},
        {"select"},
    ]
    assert (real_dir / "predictions_dev.csv").is_file()


def test_the_slice_is_disjoint_from_the_training_examples_in_the_result(
    compose_cfg, data_dir, tmp_path
):
    result, run_dir = _search(compose_cfg, data_dir, tmp_path / "runs")
    ids = set(result["selection"]["ids"])
    rows = subset({"idx": list(range(2490))}, 160, 0, "train")["idx"]
    assert len(ids) == 96 and not ids & set(rows)
    assert result["data"]["n_train"] == 160 and result["data"]["n_dev"]["select"] == 96
    # the chosen configuration is the one that trained the seed
    chosen = result["search"]["selected_config"]
    assert result["config"]["optim"]["frozen_head_lr"] == chosen["frozen_head_lr"]
    assert result["search"]["scores"][str(result["search"]["selected"])] == max(
        result["search"]["scores"].values()
    )
    # a second seed reuses the trials: none is trained again
    stamps = {p: p.stat().st_mtime_ns for p in trials_dir(run_dir).rglob(TRIAL_FILE)}
    second, _ = _search(compose_cfg, data_dir, tmp_path / "runs", seed=2)
    assert second["status"] == "ok" and second["search"]["selected"] == result["search"]["selected"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
