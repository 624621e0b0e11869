"""Metrics equal scikit-learn / scipy on the same predictions; the majority baseline."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import ConstantInputWarning, pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.tasks import TASKS, get_task
from bench.model.metrics import _metric, build_metrics, finite_or_none, majority_baseline, score
from conftest import DATA_DIR

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


# --- correlations of a constant: undefined (None) for Pearson and Spearman, as in SciPy ------


def _stsb_dev_labels() -> list[float]:
    """The real STS-B dev scores (1,500), read with the project's own reader, in float32.

    float32 as training holds them (and as ``predictions_dev.csv`` writes them back).
    """
    spec = get_task("stsb")
    labels = read_glue_tsv(glue_file(DATA_DIR, spec, spec.dev["dev"].filename), spec)["label"]
    return torch.tensor(labels, dtype=torch.float32).tolist()


def _recorded_in_batches(spec, preds, labels, batch_size=32):
    """The task's metrics as training records them: updated batch by batch, then computed."""
    dtype = torch.float32 if spec.is_regression else torch.long
    metrics = build_metrics(spec)
    for start in range(0, len(labels), batch_size):
        metrics.update(
            torch.tensor(preds[start : start + batch_size], dtype=dtype),
            torch.tensor(labels[start : start + batch_size], dtype=dtype),
        )
    return {name: finite_or_none(value) for name, value in metrics.compute().items()}


def _scipy(labels, preds):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantInputWarning)
        return {"pearson": pearsonr(labels, preds)[0], "spearman": spearmanr(labels, preds)[0]}


# 2.640245: the train mean (a collapsed regressor predicts about it); 0.1 and 3.3333 are not
# float32 sums that divide back exactly, so a running mean over batches drifts by rounding.
@pytest.mark.parametrize("constant", [2.640245, 0.1, 3.3333, 0.0, 5.0])
@pytest.mark.parametrize("batch_size", [32, 33, 1500])
def test_correlations_of_constant_predictions_are_undefined_both_as_in_scipy(constant, batch_size):
    spec = get_task("stsb")
    labels = _stsb_dev_labels()
    preds = torch.full((len(labels),), constant, dtype=torch.float32).tolist()
    reference = _scipy(labels, preds)
    assert np.isnan(reference["pearson"]) and np.isnan(reference["spearman"])
    expected = {"pearson": None, "spearman": None}
    assert _recorded_in_batches(spec, preds, labels, batch_size) == expected
    assert score(spec, preds, labels) == expected


def test_correlations_against_constant_labels_are_undefined_both_as_in_scipy():
    spec = get_task("stsb")
    real = _stsb_dev_labels()
    rng = np.random.default_rng(0)
    preds = (np.asarray(real) + rng.normal(0, 1, len(real))).astype(np.float32).tolist()
    labels = [3.0] * len(real)  # a split whose gold scores are all the same
    reference = _scipy(labels, preds)
    assert np.isnan(reference["pearson"]) and np.isnan(reference["spearman"])
    expected = {"pearson": None, "spearman": None}
    assert _recorded_in_batches(spec, preds, labels) == expected
    assert score(spec, preds, labels) == expected


@pytest.mark.parametrize("seed", [0, 1])
def test_correlations_on_the_stsb_dev_split_equal_scipy_to_float64_precision(seed):
    """Batch by batch on the real split, with its ties (Spearman's average ranks)."""
    spec = get_task("stsb")
    labels = _stsb_dev_labels()
    rng = np.random.default_rng(seed)
    noisy = np.asarray(labels) + rng.normal(0, 1.5, len(labels))
    preds = np.round(noisy, 1).astype(np.float32).tolist()  # rounded: ties in preds too
    ours = _recorded_in_batches(spec, preds, labels)
    reference = _scipy(labels, preds)
    assert set(ours) == set(reference)
    for name, value in ours.items():
        assert value == pytest.approx(reference[name], abs=1e-12), name


def test_correlations_over_two_values_and_nan_predictions():
    spec = get_task("stsb")
    labels = _stsb_dev_labels()
    two = [2.0] * (len(labels) - 1) + [4.0]  # one prediction differs: defined, as in SciPy
    ours = _recorded_in_batches(spec, two, labels)
    for name, value in _scipy(labels, two).items():
        assert value == pytest.approx(ours[name], abs=1e-12), name
    broken = [math.nan, *two[1:]]  # a NaN output: no correlation, recorded as undefined
    assert _recorded_in_batches(spec, broken, labels) == {"pearson": None, "spearman": None}


def test_cola_mcc_of_constant_predictions_on_the_real_dev_split_is_zero_as_in_sklearn():
    spec = get_task("cola")
    labels = read_glue_tsv(glue_file(DATA_DIR, spec, spec.dev["dev"].filename), spec)["label"]
    for constant in (0, 1):
        preds = [constant] * len(labels)
        recorded = _recorded_in_batches(spec, preds, labels)
        assert recorded["mcc"] == matthews_corrcoef(labels, preds) == 0.0
