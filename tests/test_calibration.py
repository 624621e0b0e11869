"""Calibration: stored class probabilities, ECE / Brier / NLL, temperature scaling, report.

The scores are checked against direct NumPy implementations written here and against
scikit-learn; the temperature against a brute-force grid; the stored probabilities against
the softmax of the logits; and real tiny cells end to end (probability columns, the
selection slice's file, collect, the report section's numbers, resume).
"""

from __future__ import annotations

import csv
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from bs4 import BeautifulSoup
from scipy.special import softmax
from sklearn.metrics import brier_score_loss, log_loss

from bench.cell import config_hash
from bench.data.tasks import get_task
from bench.errors import DataError
from bench.model.task_types import SequenceEvaluation
from bench.report.calibration import calibration_section
from bench.report.context import build_context
from bench.report.inputs import load_inputs
from bench.results import calibration as cal
from bench.results.collect import collect
from bench.results.predictions import cell_predictions, read_predictions
from bench.run.resume import cell_state
from bench.run.train import run

CELL = (
    "encoder=tiny_bert",
    "head=linear",
    "freeze=frozen",
    "task=sst2",
    "data.train_size=64",
    "trainer.max_epochs=1",
    "data.max_length=32",
    "optim.frozen_head_lr=0.05",
    "report_file=null",
)


# --------------------------------------------------------------------------- direct NumPy


def numpy_ece(probs, labels, n_bins):
    """Guo et al.'s ECE written out: bins ((m-1)/M, m/M], the first one closed at 0."""
    confidence, pred = probs.max(axis=1), probs.argmax(axis=1)
    edges = np.linspace(0, 1, n_bins + 1)
    total = 0.0
    for m in range(n_bins):
        lo, hi = edges[m], edges[m + 1]
        inside = (confidence > lo) & (confidence <= hi)
        if m == 0:
            inside |= confidence == 0
        if inside.any():
            gap = np.mean(pred[inside] == labels[inside]) - np.mean(confidence[inside])
            total += inside.sum() / len(labels) * abs(gap)
    return total


def numpy_brier(probs, labels):
    total = 0.0
    for p, y in zip(probs, labels, strict=True):
        total += sum((p[k] - (k == y)) ** 2 for k in range(len(p)))
    return total / len(labels)


def numpy_nll_at(logits, labels, temperature):
    z = logits / temperature
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -np.mean(log_p[np.arange(len(labels)), labels])


def grid_temperature(logits, labels, lo=0.01, hi=100.0, points=4001):
    """Brute force: the best of a log-spaced grid, then of a fine grid around it."""
    grid = np.geomspace(lo, hi, points)
    best = grid[np.argmin([numpy_nll_at(logits, labels, t) for t in grid])]
    fine = np.geomspace(max(lo, best / 1.01), min(hi, best * 1.01), 2001)
    return fine[np.argmin([numpy_nll_at(logits, labels, t) for t in fine])]


def synthetic(n, classes, sharpen, seed):
    """Labels drawn from softmax(z); stored probabilities softmax(sharpen * z)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(n, classes))
    truth = softmax(logits, axis=1)
    labels = np.array([rng.choice(classes, p=p) for p in truth])
    return softmax(sharpen * logits, axis=1), labels, sharpen * logits


# --------------------------------------------------------------------------- metrics


@pytest.mark.parametrize(("classes", "n_bins"), [(2, 15), (3, 15), (5, 10), (2, 1)])
def test_ece_equals_a_direct_numpy_implementation(classes, n_bins):
    for seed in range(5):
        probs, labels, _ = synthetic(400, classes, 2.5, seed)
        ours = cal.scores(probs, labels, n_bins)["ece"]
        assert ours == pytest.approx(numpy_ece(probs, labels, n_bins), abs=1e-12)


def test_ece_bins_are_closed_on_the_right():
    # n_bins=4: 0.5 sits on an edge and belongs to (0.25, 0.5], 0.75 to (0.5, 0.75].
    probs = np.array([[0.5, 0.5], [0.5, 0.5], [0.25, 0.75], [0.75, 0.25]])
    labels = np.array([0, 1, 1, 1])
    counts, conf, correct = cal.bin_totals(probs, labels, 4)
    assert counts.tolist() == [0, 2, 2, 0]
    assert conf.tolist() == [0, 1.0, 1.5, 0] and correct.tolist() == [0, 1, 1, 0]
    # bin 2: |1/2 - 0.75| * 2/4; bin 1: |1/2 - 1/2|
    assert cal.scores(probs, labels, 4)["ece"] == pytest.approx(0.125)
    assert cal.scores(np.eye(3), np.arange(3))["ece"] == 0.0


@pytest.mark.parametrize("classes", [2, 3, 4])
def test_brier_and_nll_equal_numpy_and_scikit_learn(classes):
    probs, labels, _ = synthetic(300, classes, 1.7, classes)
    brier, nll = cal.scores(probs, labels)["brier"], cal.scores(probs, labels)["nll"]
    assert brier == pytest.approx(numpy_brier(probs, labels), abs=1e-12)
    assert nll == pytest.approx(-np.mean(np.log(probs[np.arange(300), labels])), abs=1e-12)
    assert nll == pytest.approx(log_loss(labels, probs, labels=list(range(classes))), abs=1e-9)
    if classes == 2:  # the multi-class Brier score is twice the binary one of class 1
        assert brier == pytest.approx(2 * brier_score_loss(labels, probs[:, 1]), abs=1e-12)
    else:
        theirs = brier_score_loss(labels, probs, labels=list(range(classes)))
        assert brier == pytest.approx(theirs, abs=1e-12)


# --------------------------------------------------------------------------- temperature


@pytest.mark.parametrize(("classes", "sharpen"), [(2, 3.0), (3, 0.4), (4, 1.0)])
def test_fitted_temperature_equals_a_brute_force_grid(classes, sharpen):
    probs, labels, logits = synthetic(600, classes, sharpen, 11)
    fitted = cal.fit_temperature(probs, labels)
    grid = grid_temperature(logits, labels)
    assert fitted == pytest.approx(grid, rel=2e-4)
    # Overconfident probabilities (sharpened) need T > 1, underconfident ones T < 1.
    if sharpen != 1.0:
        assert (fitted > 1) is (sharpen > 1)
    scaled = cal.scale_probabilities(probs, fitted)
    assert log_loss(labels, scaled) <= log_loss(labels, probs)
    # Scaling the probabilities is scaling the logits: softmax(logits / T).
    np.testing.assert_allclose(scaled, softmax(logits / fitted, axis=1), rtol=1e-9, atol=1e-15)
    assert (scaled.argmax(axis=1) == probs.argmax(axis=1)).all()


def test_a_separable_slice_drives_the_temperature_towards_its_lower_bound():
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]])
    labels = np.array([0, 1, 0])
    fitted = cal.fit_temperature(probs, labels)
    assert cal.TEMPERATURE_BOUNDS[0] <= fitted < 0.05  # the NLL only falls as T shrinks
    scaled = cal.scale_probabilities(probs, fitted)
    assert cal.scores(scaled, labels)["nll"] == pytest.approx(0, abs=1e-12)


# --------------------------------------------------------------------------- what is stored


def test_the_kept_probabilities_are_the_softmax_of_the_logits():
    evaluation = SequenceEvaluation(get_task("mnli"), ["dev"])
    logits = torch.randn(6, 3) * 5
    batch = {"idx": torch.arange(6), "labels": torch.tensor([0, 1, 2, 0, 1, 2])}
    evaluation.update("dev", torch.nn.Identity(), logits, batch)
    kept = evaluation.collect("dev")
    np.testing.assert_allclose(
        kept["prob"], softmax(logits.double().numpy(), axis=1), rtol=1e-12, atol=0
    )
    assert kept["pred"] == logits.argmax(dim=1).tolist()
    regression = SequenceEvaluation(get_task("stsb"), ["dev"])
    regression.update(
        "dev",
        torch.nn.Identity(),
        torch.randn(4, 1),
        {"idx": torch.arange(4), "labels": torch.rand(4) * 5},
    )
    assert "prob" not in regression.collect("dev")


def _write(path, header, rows):
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def _result(run_dir, task="sst2"):
    return {
        "run_dir": str(run_dir),
        "cell": {
            "task": task,
            "encoder": "e",
            "head": "h",
            "head_label": "h",
            "layers": "-1",
            "freeze": "f",
            "freeze_label": "f",
            "seed": 1,
        },
        "config_hash": "x",
        "best": {"metrics": {"dev": {"accuracy": 0.5}}},
    }


def test_prediction_files_with_and_without_probabilities_are_read(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    _write(old / "predictions_dev.csv", ["idx", "label", "pred"], [[0, 1, 1], [1, 0, 1]])
    rows = cell_predictions(_result(old))
    assert rows["probs"].isna().all() and rows["pred"].tolist() == ["1", "1"]
    new = tmp_path / "new"
    new.mkdir()
    header = ["idx", "label", "pred", "prob_0", "prob_1"]
    _write(new / "predictions_dev.csv", header, [[0, 1, 1, 0.25, 0.75], [1, 0, 0, 0.5, 0.5]])
    _write(new / "predictions_select.csv", header, [[7, 0, 1, 0.4, 0.6]])
    rows = cell_predictions(_result(new))
    assert rows["split"].tolist() == ["dev", "dev", "select"]
    assert [list(p) for p in rows["probs"]] == [[0.25, 0.75], [0.5, 0.5], [0.4, 0.6]]
    assert rows["example"].tolist() == [0, 1, 7]


@pytest.mark.parametrize(
    ("header", "row", "message"),
    [
        (["idx", "label", "pred", "prob_0"], [0, 1, 1, 0.5], "expected the header"),
        (["idx", "label", "pred", "prob_0", "prob_1"], [0, 1, 1, 0.5, 0.6], "sum to"),
        (["idx", "label", "pred", "prob_0", "prob_1"], [0, 1, 1, 0.7, 0.3], "not pred=1"),
        (["idx", "label", "pred", "prob_0", "prob_1"], [0, 1, 1, "x", 0.3], "could not convert"),
        (["idx", "label", "pred", "prob_0", "prob_1"], [0, 1, 1, -0.5, 1.5], "in \\[0, 1\\]"),
        (["idx", "label", "pred", "prob_0", "prob_1"], [0, 1, 1, "nan", "nan"], "finite"),
    ],
)
def test_a_malformed_probability_is_named_by_file_and_line(tmp_path, header, row, message):
    _write(
        tmp_path / "predictions_dev.csv", header, [[1, 0, 0, *([0.9, 0.1][: len(header) - 3])], row]
    )
    with pytest.raises(DataError, match=message) as err:
        cell_predictions(_result(tmp_path))
    where = str(tmp_path / "predictions_dev.csv")
    assert where in str(err.value)
    if message != "expected the header":
        assert f"{where}:3:" in str(err.value)


def test_regression_files_take_no_probability_columns(tmp_path):
    header = ["idx", "label", "pred", "prob_0"]
    _write(tmp_path / "predictions_dev.csv", header, [[0, 1.5, 2.0, 1.0]])
    result = _result(tmp_path, task="stsb")
    with pytest.raises(DataError, match="expected the header idx,label,pred, found"):
        cell_predictions(result)


def test_an_old_predictions_parquet_reads_with_empty_probabilities(tmp_path):
    old = pd.DataFrame({"task": ["sst2"], "split": ["dev"], "label": ["1"], "pred": ["1"]})
    for column in (
        "encoder",
        "head",
        "head_label",
        "layers",
        "freeze",
        "freeze_label",
        "config_hash",
    ):
        old[column] = "x"
    old["seed"], old["example"], old["token"] = 1, 0, -1
    old.to_parquet(tmp_path / "predictions.parquet")
    table = read_predictions(tmp_path)
    assert table["probs"].isna().all()
    runs, bins = cal.calibration_tables(table)
    assert runs.empty and bins.empty and {"ece", "ece_ts", "temperature"} <= set(runs.columns)


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def cells(compose_cfg, data_dir, tmp_path_factory):
    """Two seeds under selection=heldout, one under selection=dev (its own sweep)."""
    root = tmp_path_factory.mktemp("calibration")
    made = {}
    for name, seed, extra in (
        ("heldout", 1, ("selection.size=32",)),
        ("heldout", 2, ("selection.size=32",)),
        ("dev", 1, ("selection=dev",)),
    ):
        cfg = compose_cfg(
            *CELL, f"seed={seed}", f"data.dir={data_dir}", f"cache.dir={root}/c", *extra
        )
        run_dir = root / name / "sst2" / "tiny_bert" / "linear" / "frozen" / f"seed={seed}"
        result = run(cfg, run_dir)
        assert result["status"] == "ok", result.get("reason")
        made[(name, seed)] = (cfg, run_dir, result)
    for name in ("heldout", "dev"):
        collect([root / name], root / "results" / name)
    return root, made


def _csv(path):
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_cells_store_probabilities_and_the_selection_slice(cells, data_dir):
    _, made = cells
    _, run_dir, result = made[("heldout", 1)]
    dev = _csv(run_dir / "predictions_dev.csv")
    assert list(dev[0]) == ["idx", "label", "pred", "prob_0", "prob_1"] and len(dev) == 872
    for row in dev:
        probs = [float(row["prob_0"]), float(row["prob_1"])]
        assert math.fsum(probs) == pytest.approx(1, abs=1e-12)
        assert int(row["pred"]) == int(np.argmax(probs))
    select = _csv(run_dir / "predictions_select.csv")
    assert [int(r["idx"]) for r in select] == sorted(result["selection"]["ids"])
    # The slice's labels are the train file's, row by row; its accuracy the recorded one.
    glue_dir = data_dir / "glue" / get_task("sst2").glue_dir
    with (glue_dir / "train.tsv").open(encoding="utf-8") as handle:
        train = [line.rstrip("\n").split("\t")[-1] for line in handle][1:]
    assert [r["label"] for r in select] == [train[int(r["idx"])] for r in select]
    accuracy = np.mean([r["label"] == r["pred"] for r in select])
    assert accuracy == pytest.approx(result["selection"]["metrics"]["accuracy"], abs=1e-9)
    _, dev_dir, _ = made[("dev", 1)]
    assert not (dev_dir / "predictions_select.csv").exists()
    assert "prob_1" in _csv(dev_dir / "predictions_dev.csv")[0]


def test_storing_probabilities_changes_no_config_hash_and_old_cells_stay_done(cells, tmp_path):
    _, made = cells
    cfg, run_dir, result = made[("heldout", 1)]
    assert config_hash(cfg) == result["config_hash"]
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)  # as written before probabilities were stored
    (old / "predictions_select.csv").unlink()
    rows = _csv(old / "predictions_dev.csv")
    _write(
        old / "predictions_dev.csv",
        ["idx", "label", "pred"],
        [[r["idx"], r["label"], r["pred"]] for r in rows],
    )
    assert cell_state(old, config_hash(cfg)).state == "done"
    frame = cell_predictions(json.loads((old / "result.json").read_text()) | {"run_dir": str(old)})
    assert frame["probs"].isna().all() and set(frame["split"]) == {"dev"}


def test_collected_calibration_equals_numpy_on_the_parquet(cells):
    root, _ = cells
    table = read_predictions(root / "results" / "heldout")
    runs, bins = cal.calibration_tables(table)
    assert len(runs) == 2 and set(runs["split"]) == {"dev"}
    for _, r in runs.iterrows():
        rows = table[table["seed"] == r["seed"]]
        dev, select = rows[rows["split"] == "dev"], rows[rows["split"] == "select"]
        probs, labels = np.stack(dev["probs"]), dev["label"].astype(int).to_numpy()
        assert r["ece"] == pytest.approx(numpy_ece(probs, labels, 15), abs=1e-12)
        assert r["brier"] == pytest.approx(numpy_brier(probs, labels), abs=1e-12)
        assert r["accuracy"] == pytest.approx(np.mean(dev["label"] == dev["pred"]))
        # T from the selection slice only (logits up to a constant: ln p), by brute force.
        sel_p, sel_y = np.stack(select["probs"]), select["label"].astype(int).to_numpy()
        assert len(sel_y) == 32 == r["n_select"]
        assert r["temperature"] == pytest.approx(grid_temperature(np.log(sel_p), sel_y), rel=2e-4)
        scaled = softmax(np.log(probs) / r["temperature"], axis=1)
        assert r["ece_ts"] == pytest.approx(numpy_ece(scaled, labels, 15), abs=1e-9)
        assert r["nll_ts"] == pytest.approx(log_loss(labels, scaled, labels=[0, 1]), abs=1e-9)
    pooled = cal.pooled_reliability(bins)
    unscaled = pooled[~pooled["scaled"]]
    assert unscaled["count"].sum() == 2 * 872
    dev_runs = cal.calibration_tables(read_predictions(root / "results" / "dev"))[0]
    assert dev_runs["temperature"].isna().all() and dev_runs["ece_ts"].isna().all()
    assert dev_runs["ece"].notna().all()


def test_a_tampered_selection_prediction_is_refused(cells, tmp_path, capsys):
    root, _ = cells
    shutil.copytree(root / "heldout", tmp_path / "runs")
    path = next((tmp_path / "runs").rglob("seed=1/predictions_select.csv"))
    lines = path.read_text().splitlines()
    idx, label, pred, p0, p1 = lines[1].split(",")
    lines[1] = f"{idx},{label},{1 - int(pred)},{p1},{p0}"
    path.write_text("\n".join(lines) + "\n")
    collect([tmp_path / "runs"], tmp_path / "results")
    assert "select accuracy: recorded" in capsys.readouterr().out


def _shown(root, name):
    """The calibration section's table rows as {header: text} and its figures."""
    section = calibration_section(build_context(load_inputs(root / "results" / name)))
    assert section is not None and section.title == "Calibration"
    soup = BeautifulSoup(section.body, "html.parser")
    header = [th.get_text() for th in soup.find("thead").find_all("th")]
    rows = [[td.get_text() for td in tr.find_all("td")] for tr in soup.find("tbody").find_all("tr")]
    return [dict(zip(header, row, strict=True)) for row in rows], soup.select("figure > img")


def test_the_report_shows_each_heads_ece_before_and_after_scaling(cells):
    """The table's numbers, recomputed from the parquet with NumPy and a brute-force T."""
    root, _ = cells
    (row,), figures = _shown(root, "heldout")
    assert figures and figures[0]["src"].startswith("data:image/svg+xml;base64,")
    table = read_predictions(root / "results" / "heldout")
    ece, ece_ts, temperature, accuracy = [], [], [], []
    for _, rows in table.groupby("seed"):
        dev, select = rows[rows["split"] == "dev"], rows[rows["split"] == "select"]
        probs, labels = np.stack(dev["probs"]), dev["label"].astype(int).to_numpy()
        t = grid_temperature(np.log(np.stack(select["probs"])), select["label"].astype(int))
        ece.append(numpy_ece(probs, labels, 15))
        ece_ts.append(numpy_ece(softmax(np.log(probs) / t, axis=1), labels, 15))
        temperature.append(t)
        accuracy.append(np.mean(dev["label"] == dev["pred"]))
    assert (row["head"], row["seeds"]) == ("linear", "2")
    assert float(row["ECE (%)"]) == pytest.approx(100 * np.mean(ece), abs=0.051)
    assert float(row["ECE after TS (%)"]) == pytest.approx(100 * np.mean(ece_ts), abs=0.051)
    assert float(row["acc. (%)"]) == pytest.approx(100 * np.mean(accuracy), abs=0.051)
    assert float(row["T"]) == pytest.approx(np.mean(temperature), abs=0.0051)
    (row,), _ = _shown(root, "dev")  # selection=dev: no slice, so no temperature
    assert row["T"] == row["ECE after TS (%)"] == "–" and row["ECE (%)"] != "–"
