"""Predictions are part of the result: collected into predictions.parquet, re-scored, refused
when they do not reproduce the recorded metric; search trials collected into trials.csv.

Real cells (tiny random BERT, the real GLUE and CoNLL files), the real collect; every
expectation is recomputed here from the data files with NumPy, csv and seqeval directly.
"""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from seqeval.metrics import f1_score
from seqeval.scheme import IOB2
from test_token_train import small_conll  # noqa: F401  (a fixture: the first real sentences)

from bench.cell import TRIAL_FILE
from bench.data.tasks import get_task
from bench.results.collect import collect
from bench.results.predictions import PREDICTION_COLUMNS, read_predictions
from bench.results.trials import read_trials
from bench.run.search import run_with_search, trials_dir
from bench.run.train import run

CELL = (
    "encoder=tiny_bert",
    "head=linear",
    "freeze=frozen",
    "seed=1",
    "data.train_size=64",
    "selection.size=32",
    "trainer.max_epochs=1",
    "data.max_length=32",
    "report_file=null",
)
GLUE = ("sst2", "mrpc", "stsb")


def _tsv_labels(data_dir, task):
    """The label column of the dev TSV, as written, by data row (header excluded)."""
    spec = get_task(task)
    path = data_dir / "glue" / spec.glue_dir / "dev.tsv"
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    header, body = rows[0], rows[1:]
    return [r[header.index(spec.tsv_label_column)] for r in body]


@pytest.fixture(scope="module")
def collected(compose_cfg, data_dir, small_conll, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("predictions")
    runs = root / "runs"
    for task in GLUE:
        cfg = compose_cfg(*CELL, f"task={task}", f"data.dir={data_dir}", f"cache.dir={root}/c")
        result = run(cfg, runs / task / "tiny_bert" / "linear" / "frozen" / "seed=1")
        assert result["status"] == "ok", result.get("reason")
    cfg = compose_cfg(
        *CELL[:3],
        "seed=1",
        "task=conll2003",
        "selection.size=24",
        "trainer.max_epochs=1",
        f"data.dir={small_conll}",
        f"cache.dir={root}/c",
        "report_file=null",
    )
    result = run(cfg, runs / "conll2003" / "tiny_bert" / "linear" / "frozen" / "seed=1")
    assert result["status"] == "ok", result.get("reason")
    collect([runs], root / "results")
    return root, data_dir, small_conll


def test_every_dev_example_is_a_row_with_its_label_as_written(collected):
    root, data_dir, _ = collected
    table = read_predictions(root / "results")
    assert list(table.columns) == PREDICTION_COLUMNS
    for task in GLUE:
        rows = table[(table["task"] == task) & (table["split"] == "dev")].sort_values("example")
        labels = _tsv_labels(data_dir, task)
        assert rows["example"].tolist() == list(range(len(labels)))
        assert set(rows["token"]) == {-1}
        # The selection slice (selection=heldout) is there too, under its own split name.
        assert set(table.loc[table["task"] == task, "split"]) == {"dev", "select"}
        if task == "stsb":
            np.testing.assert_allclose(rows["label"].astype(float), np.asarray(labels, float))
        else:
            assert rows["label"].tolist() == labels  # "0"/"1" as in the TSV
            assert set(rows["pred"]) <= set(labels)
    assert rows["config_hash"].nunique() == 1 and len(rows["config_hash"].iloc[0]) == 64


def test_metrics_recomputed_from_the_parquet_equal_the_table(collected):
    root = collected[0]
    table = read_predictions(root / "results")
    results = pd.read_csv(root / "results" / "results.csv")

    def recorded(task, split, metric):
        row = results[
            (results.task == task) & (results.split == split) & (results.metric == metric)
        ]
        return float(row["value"].iloc[0])

    table = table[table.split != "select"]
    sst2 = table[table.task == "sst2"]
    assert np.mean(sst2["label"] == sst2["pred"]) == pytest.approx(
        recorded("sst2", "dev", "accuracy"), abs=1e-6
    )
    mrpc = table[table.task == "mrpc"]
    tp = np.sum((mrpc["label"] == "1") & (mrpc["pred"] == "1"))
    fp = np.sum((mrpc["label"] == "0") & (mrpc["pred"] == "1"))
    fn = np.sum((mrpc["label"] == "1") & (mrpc["pred"] == "0"))
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    assert f1 == pytest.approx(recorded("mrpc", "dev", "f1"), abs=1e-6)
    stsb = table[table.task == "stsb"]
    r = np.corrcoef(stsb["label"].astype(float), stsb["pred"].astype(float))[0, 1]
    assert r == pytest.approx(recorded("stsb", "dev", "pearson"), abs=1e-4)
    conll = table[table.task == "conll2003"]
    assert set(conll["split"]) == {"dev", "test"}
    for split in ("dev", "test"):
        rows = conll[conll.split == split].sort_values(["example", "token"])
        gold = rows.groupby("example")["label"].apply(list).tolist()
        pred = rows.groupby("example")["pred"].apply(list).tolist()
        assert len(gold) == {"dev": 24, "test": 20}[split]
        score = f1_score(gold, pred, mode="strict", scheme=IOB2, zero_division=0)
        assert score == pytest.approx(recorded("conll2003", split, "f1"), abs=1e-6)


def _copy_runs(collected, tmp_path):
    root, _, _ = collected
    shutil.copytree(root / "runs", tmp_path / "runs")
    return tmp_path / "runs"


def test_a_tampered_prediction_is_refused_and_named(collected, tmp_path, capsys):
    runs = _copy_runs(collected, tmp_path)
    path = runs / "sst2" / "tiny_bert" / "linear" / "frozen" / "seed=1" / "predictions_dev.csv"
    lines = path.read_text().splitlines()
    idx, label, pred, p0, p1 = lines[1].split(",")
    lines[1] = f"{idx},{label},{1 - int(pred)},{p1},{p0}"  # one prediction flipped
    path.write_text("\n".join(lines) + "\n")
    table = collect([runs], tmp_path / "results")
    out = capsys.readouterr().out
    assert "refused: its predictions do not re-score (dev accuracy: recorded" in out
    assert str(path.parent.name) in out
    assert set(table["task"]) == {"mrpc", "stsb", "conll2003"}
    assert set(read_predictions(tmp_path / "results")["task"]) == {"mrpc", "stsb", "conll2003"}


def test_a_missing_prediction_file_is_refused_and_named(collected, tmp_path, capsys):
    runs = _copy_runs(collected, tmp_path)
    cell = runs / "conll2003" / "tiny_bert" / "linear" / "frozen" / "seed=1"
    (cell / "predictions_test.txt").unlink()
    table = collect([runs], tmp_path / "results")
    out = capsys.readouterr().out
    assert "refused: " in out and "no predictions for test" in out
    assert "conll2003" not in set(table["task"])


def test_trials_are_collected_with_their_selection_scores(compose_cfg, data_dir, tmp_path):
    cfg = compose_cfg(
        *CELL,
        "task=rte",
        "search=random",
        "search.trials=2",
        f"data.dir={data_dir}",
        f"cache.dir={tmp_path}/c",
    )
    run_dir = tmp_path / "runs" / "rte" / "tiny_bert" / "linear" / "frozen" / "seed=1"
    result = run_with_search(cfg, run_dir, run)
    assert result["status"] == "ok", result.get("reason")
    collect([tmp_path / "runs"], tmp_path / "results")
    trials = read_trials(tmp_path / "results")
    assert trials["trial"].tolist() == [1, 2]
    for _, row in trials.iterrows():
        record = json.loads(
            (trials_dir(run_dir) / f"trial={row['trial']}" / TRIAL_FILE).read_text()
        )
        assert row["selection_score"] == pytest.approx(record["selection"]["metrics"]["accuracy"])
        assert json.loads(row["config"]) == record["trial_config"]
        assert row["head_label"] == "linear" and row["selection_metric"] == "accuracy"
    table = pd.read_csv(tmp_path / "results" / "results.csv")
    assert set(table["selection"]) == {"heldout"}
    assert table["trial"].iloc[0] == result["search"]["selected"]
