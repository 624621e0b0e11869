"""The best constant equals a brute force over every constant, scored by independent libraries.

Each GLUE task in the real data directory (read with the project's own reader) and
CoNLL-2003 dev and test: every possible constant prediction (each class, each tag) is
scored with scikit-learn or seqeval (strict IOB2, the task's metric), and the maximum
per metric must equal :func:`best_constant`'s value; its description must name the
constant(s) reaching it.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr
from seqeval.metrics import classification_report
from seqeval.scheme import IOB2
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bench.data.baselines import ANY_CONSTANT, NO_CORRELATION, best_constant
from bench.data.conll import conll_file, read_conll
from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.tasks import TASKS, TaskSpec, get_task
from bench.errors import ConfigError
from conftest import DATA_DIR

CONLL = get_task("conll2003")
GLUE_BY_DIR = {spec.glue_dir: spec for spec in TASKS.values()}
#: Every labelled GLUE split on disk: (task, file name).
GLUE_SPLITS = sorted(
    (GLUE_BY_DIR[folder.name].name, name)
    for folder in (DATA_DIR / "glue").iterdir()
    if folder.name in GLUE_BY_DIR
    for name in ("train.tsv", *(s.filename for s in GLUE_BY_DIR[folder.name].dev.values()))
    if (folder / name).is_file()
)


def test_every_glue_task_folder_on_disk_is_tested_on_its_dev_split():
    folders = {p.name for p in (DATA_DIR / "glue").iterdir() if p.is_dir()} - {"diagnostic"}
    assert folders <= set(GLUE_BY_DIR), folders - set(GLUE_BY_DIR)
    dev = {task for task, name in GLUE_SPLITS if name == "dev.tsv"}
    assert dev == {GLUE_BY_DIR[f].name for f in folders} and len(dev) >= 7


def brute_force_classes(spec: TaskSpec, labels: list[int]) -> dict[str, dict[str, float]]:
    """Metric -> {label name: scikit-learn's score of predicting that class everywhere}."""
    sklearn_metrics = {
        "accuracy": accuracy_score,
        "f1": lambda y, p: f1_score(y, p, pos_label=1, average="binary", zero_division=0),
        "mcc": matthews_corrcoef,
    }
    return {
        metric: {
            name: float(sklearn_metrics[metric](labels, [c] * len(labels)))
            for c, name in enumerate(spec.label_names)
        }
        for metric in spec.metrics
    }


def described(scores: dict[str, float]) -> str:
    best = max(scores.values())
    winners = [name for name, value in scores.items() if np.isclose(value, best, atol=1e-12)]
    if len(winners) == len(scores):
        return ANY_CONSTANT
    return " or ".join(f"all {name!r}" for name in winners)


@pytest.mark.parametrize(("task", "filename"), GLUE_SPLITS, ids=lambda v: str(v))
def test_glue_best_constant_is_the_best_of_every_constant(task, filename):
    spec = get_task(task)
    labels = read_glue_tsv(glue_file(DATA_DIR, spec, filename), spec)["label"]
    result = best_constant(spec, labels)
    assert set(result["metrics"]) == set(result["prediction"]) == set(spec.metrics)
    json.dumps(result, allow_nan=False)  # plain, finite values: ready for result.json
    if spec.is_regression:
        # Every constant (a few typical ones) has an undefined correlation: 0 by definition.
        for constant in (0.0, float(np.mean(labels)), float(np.median(labels)), max(labels)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConstantInputWarning)
                assert np.isnan(pearsonr(labels, [constant] * len(labels)).statistic)
                assert np.isnan(spearmanr(labels, [constant] * len(labels)).statistic)
        assert result["metrics"] == {"pearson": 0.0, "spearman": 0.0}
        assert result["prediction"] == {"pearson": NO_CORRELATION, "spearman": NO_CORRELATION}
        return
    brute = brute_force_classes(spec, labels)
    for metric in spec.metrics:
        assert result["metrics"][metric] == pytest.approx(max(brute[metric].values()), abs=1e-12)
        assert result["prediction"][metric] == described(brute[metric]), metric
    if "accuracy" in spec.metrics:
        counts = np.bincount(labels, minlength=spec.num_labels)
        assert result["metrics"]["accuracy"] == pytest.approx(counts.max() / len(labels))
    if "f1" in spec.metrics:  # all-positive wins: some positives exist in every GLUE split
        assert result["prediction"]["f1"] == f"all {spec.label_names[1]!r}"
        assert result["metrics"]["f1"] > 0
    if "mcc" in spec.metrics:
        assert result["metrics"]["mcc"] == 0.0 and result["prediction"]["mcc"] == ANY_CONSTANT


def seqeval_scores(gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
    """The token task's metrics as seqeval's strict IOB2 report gives them."""
    report = classification_report(
        gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0
    )
    scores = {
        "precision": report["micro avg"]["precision"],
        "recall": report["micro avg"]["recall"],
        "f1": report["micro avg"]["f1-score"],
    }
    for kind in CONLL.entity_types:
        scores[f"f1_{kind}"] = report[kind]["f1-score"] if kind in report else 0.0
    return {k: float(v) for k, v in scores.items()}


@pytest.fixture(scope="module", params=["dev", "test"])
def conll_split(request) -> tuple[str, list[list[int]]]:
    path = conll_file(DATA_DIR, CONLL, CONLL.dev[request.param].filename)
    return request.param, read_conll(path, CONLL)["label"]


def test_conll_best_constant_is_the_best_of_every_tag_under_seqeval(conll_split):
    _, labels = conll_split
    gold = [[CONLL.label_names[t] for t in tags] for tags in labels]
    brute: dict[str, dict[str, float]] = {m: {} for m in CONLL.metrics}
    for tag in CONLL.label_names:
        scores = seqeval_scores(gold, [[tag] * len(tags) for tags in gold])
        for metric in CONLL.metrics:
            brute[metric][tag] = scores[metric]
    result = best_constant(CONLL, labels)
    assert set(result["metrics"]) == set(result["prediction"]) == set(CONLL.metrics)
    json.dumps(result, allow_nan=False)
    for metric in CONLL.metrics:
        assert result["metrics"][metric] == pytest.approx(max(brute[metric].values()), abs=1e-12)
        assert result["prediction"][metric] == described(brute[metric]), metric
    # All-O finds nothing, but B-X on every word finds the one-word X entities: not zero.
    assert brute["f1"]["O"] == 0.0
    assert 0 < result["metrics"]["f1"] < 0.1
    for kind in CONLL.entity_types:
        assert result["prediction"][f"f1_{kind}"] == f"all 'B-{kind}'"


def test_conll_token_accuracy_is_the_share_of_the_most_frequent_tag(conll_split):
    _, labels = conll_split
    spec = dataclasses.replace(CONLL, metrics=(*CONLL.metrics, "accuracy"))
    flat = [t for tags in labels for t in tags]
    brute = {
        name: float(accuracy_score(flat, [c] * len(flat)))
        for c, name in enumerate(spec.label_names)
    }
    result = best_constant(spec, labels)
    assert result["metrics"]["accuracy"] == pytest.approx(max(brute.values()), abs=1e-12)
    assert result["prediction"]["accuracy"] == "all 'O'" == described(brute)


def test_labels_as_a_numpy_array_give_the_same_answer():
    spec = get_task("mrpc")
    labels = [1, 1, 0, 1, 0, 1, 1]
    assert best_constant(spec, np.array(labels)) == best_constant(spec, labels)
    assert best_constant(spec, labels)["metrics"] == {
        "f1": pytest.approx(2 * 5 / (7 + 5)),
        "accuracy": pytest.approx(5 / 7),
    }


def test_ties_name_every_winner_and_a_full_tie_is_any_constant():
    sst2 = get_task("sst2")
    assert best_constant(sst2, [0, 1, 1, 0])["prediction"]["accuracy"] == ANY_CONSTANT
    mnli = get_task("mnli")
    tie = best_constant(mnli, [0, 2, 0, 2, 1])
    assert tie["metrics"]["accuracy"] == pytest.approx(0.4)
    assert tie["prediction"]["accuracy"] == "all 'entailment' or all 'contradiction'"
    no_positive = best_constant(get_task("mrpc"), [0, 0, 0])
    assert no_positive["metrics"]["f1"] == 0.0 and no_positive["prediction"]["f1"] == ANY_CONSTANT


@pytest.mark.parametrize(
    ("task", "labels", "match"),
    [
        ("sst2", [], "no labels"),
        ("sst2", [0, 2], r"label 2 is not a class id in 0..1"),
        ("cola", [0, 0.5], r"label 0.5 is not a class id"),
        ("conll2003", [[], []], "no labelled words"),
        ("conll2003", [[0, 9]], r"label 9 is not a class id in 0..8"),
    ],
)
def test_bad_labels_are_refused_naming_the_task(task, labels, match):
    with pytest.raises(ValueError, match=match):
        best_constant(get_task(task), labels)


def test_an_unknown_metric_is_refused_with_the_known_ones():
    spec = dataclasses.replace(get_task("sst2"), metrics=("accuracy", "auroc"))
    with pytest.raises(ConfigError, match=r"metric 'auroc'; known here: accuracy, mcc, f1"):
        best_constant(spec, [0, 1])


def test_the_module_imports_no_torch():
    code = (
        "import sys, bench.data.baselines; "
        "print([m for m in ('torch', 'lightning', 'transformers', 'sklearn', 'seqeval') "
        "if m in sys.modules])"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
