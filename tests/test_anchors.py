"""Converged anchors (``head=anchor``): scikit-learn and the cosine, recomputed independently.

Each anchor cell runs through :func:`bench.run.train.run` on tiny_bert; the test then builds
the features itself (the encoder's forward on the same rows, pooled here), fits scikit-learn
directly and compares the numbers. The regularisation is chosen on the selection slice only:
shuffling dev's labels changes no choice.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from scipy.stats import pearsonr
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, f1_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from test_protocol import _shuffled_copy

from bench.axes.heads import check_anchor
from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_encoder, load_tokenizer
from bench.results.anchors import anchor_gaps
from bench.results.frames import estimate
from bench.run import lockstep, search
from bench.run.train import run

TRAIN, SELECT = 64, 32
FAST = ("data.max_length=64", f"data.train_size={TRAIN}", f"selection.size={SELECT}")


@pytest.fixture(scope="module")
def cell(compose_cfg, data_dir, tmp_path_factory):
    """Runs (once) an anchor cell: ``cell(task, features, seed=1, data=None)`` → result, dir."""
    root, done = tmp_path_factory.mktemp("anchors"), {}

    def _cell(task: str, features: str, seed: int = 1, data=None, *more: str):
        key = (task, features, seed, str(data), more)
        if key not in done:
            cfg = compose_cfg(
                "encoder=tiny_bert",
                "head=anchor",
                f"head.features={features}",
                "freeze=frozen",
                f"task={task}",
                f"seed={seed}",
                f"data.dir={data or data_dir}",
                f"cache.dir={root / 'cache'}",
                *FAST,
                *more,
            )
            run_dir = root / f"{task}-{features}-{seed}-{len(done)}"
            result = run(cfg, run_dir)
            assert result["status"] == "ok", result.get("reason")
            done[key] = (result, run_dir)
        return done[key]

    return _cell


def _rows(data_dir, task, split):
    spec = get_task(task)
    return read_glue_tsv(glue_file(data_dir, spec, f"{split}.tsv"), spec)


def _split(data_dir, task, result):
    """Texts and labels of train (the fixed-seed subset), the selection slice and dev."""
    full, dev = _rows(data_dir, task, "train"), _rows(data_dir, task, "dev")
    train = np.sort(np.random.default_rng(0).permutation(len(full["idx"]))[:TRAIN])
    select = result["selection"]["ids"]
    assert not set(select) & set(train.tolist()) and len(select) == SELECT
    fields = get_task(task).text_fields

    def take(columns, rows):
        return [[columns[f][i] for i in rows] for f in fields], [columns["label"][i] for i in rows]

    return {
        "train": take(full, train),
        "select": take(full, select),
        "dev": take(dev, range(len(dev["idx"]))),
    }


@pytest.fixture(scope="module")
def tiny():
    cfg = {"name": "tiny_bert", "source": "tiny:bert", "pooler": "untrained"}
    encoder, _ = load_encoder(cfg)
    return encoder.eval(), load_tokenizer(cfg)


@torch.no_grad()
def _states(tiny, texts):
    """Every hidden state of the texts (one sentence or a joined pair) and the mask."""
    encoder, tok = tiny
    batch = tok(*texts, truncation=True, max_length=64, padding=True, return_tensors="pt")
    out = encoder(**batch, output_hidden_states=True)
    return out.hidden_states, batch["attention_mask"]


def _mean(states, mask):
    m = mask[:, :, None].double()
    return (states.double() * m).sum(1) / m.sum(1)


def _features(tiny, texts, features):
    hidden, mask = _states(tiny, texts)
    if features == "cls":
        return hidden[-1][:, 0].double().numpy()
    if features == "mean":
        return _mean(hidden[-1], mask).numpy()
    return torch.cat([h[:, 0] for h in hidden[-4:]], dim=1).double().numpy()  # last4


@pytest.mark.parametrize(
    ("task", "features"), [("sst2", "cls"), ("sst2", "mean"), ("sst2", "last4"), ("stsb", "cls")]
)
def test_an_anchor_matches_scikit_learn_on_features_built_here(
    cell, tiny, data_dir, task, features
):
    result, run_dir = cell(task, features)
    regression = task == "stsb"
    data = _split(data_dir, task, result)
    x = {name: _features(tiny, texts, features) for name, (texts, _) in data.items()}
    y = {name: np.asarray(labels) for name, (_, labels) in data.items()}
    metric = (lambda a, b: pearsonr(a, b)[0]) if regression else accuracy_score
    best = None
    for c in [1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100, 1e3, 1e4]:  # conf/head/anchor.yaml's C
        model = make_pipeline(
            StandardScaler(),
            Ridge(alpha=1 / c) if regression else LogisticRegression(C=c, max_iter=5000),
        ).fit(x["train"], y["train"])
        score = metric(y["select"], model.predict(x["select"]))
        if best is None or score > best[0]:
            best = (score, c, model)
    score, c, model = best
    main = "pearson" if regression else "accuracy"
    assert result["anchor"]["C"] == c
    assert result["anchor"]["estimator"] == ("Ridge" if regression else "LogisticRegression")
    assert result["selection"]["metrics"][main] == pytest.approx(score, abs=1e-4)
    dev = metric(y["dev"], model.predict(x["dev"]))
    assert result["best"]["metrics"]["dev"][main] == pytest.approx(dev, abs=1e-4)
    written = pd.read_csv(run_dir / "predictions_dev.csv")
    assert len(written) == len(y["dev"]) and written["label"].tolist() == y["dev"].tolist()


def _cosines(tiny, pair):
    u, v = (_mean(*(lambda s: (s[0][-1], s[1]))(_states(tiny, (texts,)))) for texts in pair)
    return torch.nn.functional.cosine_similarity(u, v, dim=1).numpy()


def test_the_cosine_anchor_is_the_pearson_of_sentences_encoded_alone(cell, tiny, data_dir):
    result, _ = cell("stsb", "cosine")
    data = _split(data_dir, "stsb", result)
    for name, scores in (("select", result["selection"]["metrics"]), ("dev", None)):
        texts, gold = data[name]
        expected = pearsonr(_cosines(tiny, texts), gold)[0]
        scores = scores or result["best"]["metrics"][name]
        assert scores["pearson"] == pytest.approx(expected, abs=1e-6)


def test_the_cosine_threshold_is_chosen_on_the_selection_slice(cell, tiny, data_dir):
    result, run_dir = cell("mrpc", "cosine")
    data = _split(data_dir, "mrpc", result)
    cos = {name: _cosines(tiny, texts) for name, (texts, _) in data.items() if name != "train"}
    y = {name: labels for name, (_, labels) in data.items()}
    seen = np.sort(np.unique(cos["select"]))
    cuts = np.concatenate([[seen[0] - 1], (seen[1:] + seen[:-1]) / 2])

    def predict(c, cut, above):
        return np.where(c > cut, above, 1 - above)

    best = max(
        ((f1_score(y["select"], predict(cos["select"], t, a)), t, a) for a in (1, 0) for t in cuts),
        key=lambda r: r[0],
    )
    record = result["anchor"]
    assert (record["threshold"], record["above"]) == pytest.approx(best[1:], abs=1e-6)
    assert result["selection"]["metrics"]["f1"] == pytest.approx(
        best[0], abs=1e-6
    )  # torchmetrics: float32
    dev = f1_score(y["dev"], predict(cos["dev"], *best[1:]))
    assert result["best"]["metrics"]["dev"]["f1"] == pytest.approx(
        dev, abs=1e-6
    )  # torchmetrics: float32
    written = pd.read_csv(run_dir / "predictions_dev.csv")
    assert written["pred"].tolist() == predict(cos["dev"], *best[1:]).tolist()


def test_shuffled_dev_labels_change_no_anchor_choice(cell, data_dir, tmp_path):
    real, real_dir = cell("sst2", "cls")
    fake, fake_dir = cell("sst2", "cls", 1, _shuffled_copy(data_dir, tmp_path, "sst2"))
    assert real["anchor"] == fake["anchor"]  # every C's selection score, the chosen C
    assert real["selection"] == fake["selection"]
    real_dev, fake_dev = (pd.read_csv(d / "predictions_dev.csv") for d in (real_dir, fake_dir))
    assert real_dev["pred"].tolist() == fake_dev["pred"].tolist()
    assert real_dev["label"].tolist() != fake_dev["label"].tolist()
    assert real["best"]["metrics"] != fake["best"]["metrics"]


def test_every_seed_of_an_anchor_gives_one_value_so_its_seed_error_is_zero(cell):
    values = [cell("sst2", "cls", seed)[0]["best"]["metrics"]["dev"]["accuracy"] for seed in (1, 2)]
    assert values[0] == values[1]
    index = pd.MultiIndex.from_tuples([(1, -1), (2, -1)], names=["seed", "order_seed"])
    assert estimate(pd.Series(values, index=index))["se_seed"] == 0


def test_an_anchor_never_searches_and_trains_alone(compose_cfg):
    cfg = compose_cfg(
        "head=anchor", "freeze=frozen", "search=random", "order_seed=1", "seed=1", "task=sst2"
    )
    assert not search.enabled(cfg)
    with pytest.raises(lockstep.NotLockstep, match="anchor"):
        lockstep.group_key(cfg)


def test_a_head_more_than_a_point_below_its_anchor_is_short():
    setting = {"task": "sst2", "encoder": "minilm", "freeze_label": "frozen", "train_size": 2000}
    means = {"linear": 0.712, "anchor-cls": 0.7122, "last4_concat": 0.716, "anchor-last4": 0.7718}
    means |= {"mean_linear": 0.793, "bilstm": 0.79}  # mean_linear's anchor did not run
    scores = pd.DataFrame([{**setting, "head_label": h, "mean": m} for h, m in means.items()])
    gaps = anchor_gaps(scores).set_index("head_label")
    assert sorted(gaps.index) == ["last4_concat", "linear"]
    assert gaps.loc["last4_concat", "gap"] == pytest.approx(0.0558)
    assert gaps["short"].to_dict() == {"linear": False, "last4_concat": True}


@pytest.mark.parametrize(
    ("task", "change", "key"),
    [
        ("sst2", {"features": "max"}, "head.features"),
        ("sst2", {"features": "cosine"}, "head.features=cosine"),  # one sentence
        ("mnli", {"features": "cosine"}, "head.features=cosine"),  # three classes
        ("sst2", {"C": []}, "head.C"),
        ("sst2", {"C": [1.0, -1.0]}, "head.C"),
        ("sst2", {"dropout": 0.1}, "dropout"),
        ("conll2003", {}, "task=conll2003"),
        ("sst2", {"freeze": "full"}, "freeze=full"),
        ("sst2", {"cached": False}, "cache.enabled=false"),
    ],
)
def test_an_anchor_that_cannot_run_is_refused_naming_the_key(compose_cfg, task, change, key):
    cfg = compose_cfg("head=anchor", f"task={task}", "seed=1")
    head = {**OmegaConf.to_container(cfg.head, resolve=True), **change}
    freeze, cached = head.pop("freeze", "frozen"), head.pop("cached", True)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_anchor(head, get_task(task), freeze, cached)


@pytest.mark.slow  # about 30 s: a sweep of two cells in a subprocess, then collect
def test_anchors_sweep_beside_a_head_and_collect_re_scores_them(data_dir, tmp_path):
    """A sweep picks anchors as heads; the collected table holds them beside the head."""
    runs, results = tmp_path / "runs", tmp_path / "results"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "bench", "-m", "task=stsb", "encoder=tiny_bert"),
            *("head=linear,anchor", "freeze=frozen", "seed=1", "trainer.max_epochs=1"),
            *(f"data.dir={data_dir}", f"cache.dir={tmp_path / 'cache'}", *FAST),
            *(f"runs_dir={runs}", f"results_dir={results}", "report_file=null"),
            "results_readme=false",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_csv(results / "results.csv")
    dev = table[(table["split"] == "dev") & (table["metric"] == "pearson")]
    assert sorted(dev["head_label"]) == ["anchor-cls", "linear"]
    cells = json.loads((results / "cells.json").read_text())
    assert {c["cell"]["head"] for c in cells} == {"anchor", "linear"}


def test_an_anchor_on_siamese_pairs_is_refused_naming_the_key(compose_cfg):
    """The fitted anchors read the cross-encoded pair's features: siamese is refused up front."""
    from bench.run.preflight import check_cell

    cfg = compose_cfg(
        "head=anchor", "freeze=frozen", "task=stsb", "seed=1", "pair_encoding=siamese"
    )
    with pytest.raises(ConfigError, match=r"pair_encoding=siamese"):
        check_cell(cfg, here=False)
