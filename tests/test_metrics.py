"""Metrics equal scikit-learn / scipy on the same predictions; the majority baseline."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bench.data.tasks import TASKS, get_task
from bench.model.metrics import _metric, majority_baseline, score

REFERENCE = {
    "accuracy": accuracy_score,
    "f1": f1_score,
    "mcc": matthews_corrcoef,
    "pearson": lambda y, p: pearsonr(y, p)[0],
    "spearman": lambda y, p: spearmanr(y, p)[0],
}


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_sklearn_and_scipy(task, seed):
    spec = get_task(task)
    rng = np.random.default_rng(seed)
    n = 257
    if spec.is_regression:
        labels = rng.uniform(0, 5, n)
        preds = labels + rng.normal(0, 1.5, n)
    else:
        labels = rng.integers(0, spec.num_labels, n)
        preds = np.where(rng.random(n) < 0.6, labels, rng.integers(0, spec.num_labels, n))
    ours = score(spec, preds.tolist(), labels.tolist())
    assert set(ours) == set(spec.metrics)
    for name, value in ours.items():
        assert value == pytest.approx(REFERENCE[name](labels, preds), abs=1e-5), name


@pytest.mark.parametrize("num_labels", [2, 3])
def test_mcc_of_constant_predictions_or_labels_is_zero_as_in_sklearn(num_labels):
    labels = [0, 1, 1, 0, 1] if num_labels == 2 else [0, 1, 2, 0, 1]
    spec = get_task("cola" if num_labels == 2 else "mnli")
    metric = _metric("mcc", num_labels)
    for constant in range(num_labels):
        metric.reset()
        metric.update(torch.tensor([constant] * 5), torch.tensor(labels))
        assert float(metric.compute()) == matthews_corrcoef(labels, [constant] * 5) == 0.0
    metric.reset()
    metric.update(torch.tensor(labels), torch.tensor([1] * 5))  # constant gold labels
    assert float(metric.compute()) == 0.0
    assert spec.num_labels == num_labels


def test_cola_majority_baseline_mcc_is_zero():
    base = majority_baseline(get_task("cola"), [1, 1, 0], [0, 1, 1, 0, 1])
    assert base["metrics"]["mcc"] == 0.0


def test_mcc_accumulates_over_batches():
    rng = np.random.default_rng(5)
    labels, preds = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    metric = _metric("mcc", 3)
    for start in range(0, 300, 64):
        metric.update(
            torch.tensor(preds[start : start + 64]), torch.tensor(labels[start : start + 64])
        )
    assert float(metric.compute()) == pytest.approx(matthews_corrcoef(labels, preds), abs=1e-12)


def test_glue_metric_choices():
    assert get_task("cola").main_metric == "mcc"
    assert set(get_task("mrpc").metrics) == {"f1", "accuracy"}
    assert set(get_task("qqp").metrics) == {"f1", "accuracy"}
    assert set(get_task("stsb").metrics) == {"pearson", "spearman"}
    assert list(get_task("mnli").dev) == ["dev", "dev_mismatched"]


def test_majority_baseline_predicts_the_most_frequent_training_class():
    spec = get_task("mrpc")
    base = majority_baseline(spec, [1, 1, 0, 1], [0, 1, 1, 1, 0])
    assert base["strategy"] == "majority" and base["prediction"] == 1
    assert base["metrics"]["accuracy"] == pytest.approx(0.6)
    assert base["metrics"]["f1"] == pytest.approx(f1_score([0, 1, 1, 1, 0], [1] * 5))


def test_regression_baseline_is_the_mean_and_its_correlation_is_undefined():
    base = majority_baseline(get_task("stsb"), [1.0, 3.0], [0.5, 4.0, 2.0])
    assert base["strategy"] == "mean" and base["prediction"] == 2.0
    assert base["metrics"] == {"pearson": None, "spearman": None}
