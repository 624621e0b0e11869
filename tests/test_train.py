"""One cell end to end: real Hydra config, real data, real Trainer, result files on disk."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from bs4 import BeautifulSoup
from scipy.stats import pearsonr
from sklearn.metrics import accuracy_score, f1_score

from bench.cell import cell_path
from bench.data.tasks import get_task
from bench.report.readme import experiment_readme
from bench.results.run_records import read_launch_log
from bench.run.timing import PHASES, phase
from bench.run.train import run
from conftest import ROOT

# selection=heldout (the default) with a small slice keeps these tests quick.
FAST = (
    "trainer.max_epochs=2",
    "data.max_length=48",
    "data.batch_size=16",
    "selection.size=64",
)


def _read_predictions(path):
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    return rows


def test_single_sentence_cell_writes_a_complete_result(compose_cfg, data_dir, tmp_path):
    cfg = compose_cfg(
        "encoder=tiny_bert",
        "head=bilstm",
        "freeze=frozen",
        "task=sst2",
        "seed=1",
        "data.train_size=96",
        f"data.dir={data_dir}",
        *FAST,
    )
    assert cell_path(cfg) == "sst2/tiny_bert/bilstm/frozen/seed=1"
    result = run(cfg, tmp_path)
    on_disk = json.loads((tmp_path / "result.json").read_text())
    assert on_disk["status"] == result["status"] == "ok", result.get("reason")
    assert on_disk["cell"] == {
        "task": "sst2",
        "encoder": "tiny_bert",
        "head": "bilstm",
        "head_label": "bilstm",
        "layers": "-1",
        "freeze": "frozen",
        "freeze_label": "frozen",
        "seed": 1,
        "train_size": cfg.data.train_size,
        "order_seed": None,
    }
    assert [h["epoch"] for h in on_disk["history"]] == [0, 1]
    assert all(h["train_loss"] is not None for h in on_disk["history"])
    assert on_disk["best"]["epoch"] in (0, 1)
    assert on_disk["baseline"]["dev"]["metrics"]["accuracy"] == pytest.approx(
        444 / 872, abs=1e-6
    ) or on_disk["baseline"]["dev"]["metrics"]["accuracy"] == pytest.approx(428 / 872, abs=1e-6)
    assert on_disk["params"]["encoder_trainable"] == 0 and on_disk["params"]["trainable"] > 0
    assert on_disk["data"]["n_train"] == 96 and on_disk["data"]["n_dev"] == {
        "select": 64,
        "dev": 872,
    }
    for key in (
        "wall_time_s",
        "train_time_s",
        "peak_memory",
        "git",
        "versions",
        "hardware",
        "config",
        "config_hash",
        "encoder_info",
    ):
        assert key in on_disk
    assert on_disk["versions"]["torch"] and on_disk["encoder_info"]["trained"] is False
    # The allocator setting the cell ran with (runtime.malloc, default tuned; not hashed).
    malloc = on_disk["runtime"]["malloc"]
    assert malloc["mode"] == "tuned" and malloc["applied"] is (sys.platform == "linux")
    # The training loop's work and time (validation excluded): wall and the process's CPU time.
    tp = on_disk["throughput"]
    assert tp["examples"] == 2 * 96 and tp["batches"] == 2 * 96 // 16
    assert 0 < tp["train_loop_s"] < on_disk["train_time_s"] and tp["train_loop_cpu_s"] > 0
    # The first batch timed apart (a compiled encoder's compilation lands there), and the rest.
    assert 0 < tp["first_batch_s"] < tp["train_loop_s"]
    assert tp["examples_per_s_after_first"] == pytest.approx(
        (tp["examples"] - 16) / (tp["train_loop_s"] - tp["first_batch_s"])
    )
    # Where the wall time went: every phase once, inside the cell's wall time.
    phases = on_disk["phases_s"]
    assert set(phases) == set(PHASES) and all(v >= 0 for v in phases.values())
    assert phases["fit"] <= on_disk["train_time_s"]
    assert sum(phases.values()) <= on_disk["wall_time_s"]
    # Predictions per example id, consistent with the recorded best metric.
    rows = _read_predictions(tmp_path / "predictions_dev.csv")
    assert sorted(int(r["idx"]) for r in rows) == list(range(872))
    acc = accuracy_score([int(r["label"]) for r in rows], [int(r["pred"]) for r in rows])
    assert acc == pytest.approx(on_disk["best"]["metrics"]["dev"]["accuracy"], abs=1e-6)
    assert (tmp_path / "logs" / "metrics.csv").is_file()  # CSV logger curves
    # The prediction histogram of the best epoch, and the "one class for all" flag.
    names = get_task("sst2").label_names
    histogram = {n: sum(int(r["pred"]) == i for r in rows) for i, n in enumerate(names)}
    assert on_disk["predictions_summary"]["histogram"] == histogram
    assert on_disk["degenerate"] is (min(histogram.values()) == 0)


def test_pair_classification_and_regression_cells(compose_cfg, data_dir, tmp_path):
    mrpc = run(
        compose_cfg(
            "encoder=tiny_roberta",
            "head=last4_concat",
            "freeze=top_k",
            "task=mrpc",
            "seed=2",
            "data.train_size=64",
            f"data.dir={data_dir}",
            *FAST,
        ),
        tmp_path / "mrpc",
    )
    assert mrpc["status"] == "ok", mrpc.get("reason")
    rows = _read_predictions(tmp_path / "mrpc" / "predictions_dev.csv")
    f1 = f1_score([int(r["label"]) for r in rows], [int(r["pred"]) for r in rows])
    assert f1 == pytest.approx(mrpc["best"]["metrics"]["dev"]["f1"], abs=1e-5)

    stsb = run(
        compose_cfg(
            "encoder=tiny_bert",
            "head=pooler",
            "freeze=full",
            "task=stsb",
            "seed=2",
            "data.train_size=64",
            f"data.dir={data_dir}",
            *FAST,
        ),
        tmp_path / "stsb",
    )
    assert stsb["status"] == "ok", stsb.get("reason")
    rows = _read_predictions(tmp_path / "stsb" / "predictions_dev.csv")
    r = pearsonr([float(x["label"]) for x in rows], [float(x["pred"]) for x in rows])[0]
    assert r == pytest.approx(stsb["best"]["metrics"]["dev"]["pearson"], abs=1e-4)
    assert stsb["baseline"]["dev"]["strategy"] == "mean"


def test_a_failing_cell_is_recorded_not_raised(compose_cfg, data_dir, tmp_path):
    cfg = compose_cfg(
        "encoder=tiny_bert", "task=rte", "seed=1", "data.train_size=99999", f"data.dir={data_dir}"
    )
    result = run(cfg, tmp_path)
    assert result["status"] == "failed"
    assert "data.train_size=99999" in result["reason"] and "2490" in result["reason"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"


def _frozen_cell(compose_cfg, data_dir, lr, *extra):
    """A tiny frozen SST-2 cell of 64 examples (4 steps an epoch) at head learning rate lr."""
    return compose_cfg(
        "encoder=tiny_bert",
        "task=sst2",
        "freeze=frozen",
        "seed=1",
        "data.train_size=64",
        f"optim.frozen_head_lr={lr}",
        "optim.warmup_ratio=0",
        f"data.dir={data_dir}",
        *FAST,
        *extra,
    )


def test_non_finite_loss_stops_the_cell_as_diverged(compose_cfg, data_dir, tmp_path):
    result = run(_frozen_cell(compose_cfg, data_dir, "1e36"), tmp_path)
    assert result["status"] == "diverged", result.get("reason")
    assert result["diverged_step"] >= 1 and "non-finite" in result["reason"]


@pytest.mark.parametrize("lr", ["1e-2", "1e36"], ids=["trains", "diverges"])
def test_checking_the_loss_every_50_steps_records_what_checking_every_step_does(
    compose_cfg, data_dir, tmp_path, lr
):
    """runtime.loss_check_steps reads the loss less often; it changes no recorded number."""
    results = []
    for every in (1, 50):
        cfg = _frozen_cell(compose_cfg, data_dir, lr, f"runtime.loss_check_steps={every}")
        results.append(run(cfg, tmp_path / str(every)))
    every_step, every_50 = results
    keys = ("status", "reason", "diverged_step", "history", "selection", "best")
    assert {k: every_step.get(k) for k in keys} == {k: every_50.get(k) for k in keys}
    if lr == "1e36":  # diverged in the first epoch (4 steps): seen by the evaluation's check
        assert every_50["status"] == "diverged" and every_50["diverged_step"] < 4
    else:
        assert every_50["status"] == "ok" and len(every_50["history"]) == 2


def test_multirun_from_the_command_line_collects_a_table(data_dir, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "-m",
            "encoder=tiny_bert",
            "task=sst2",
            "head=linear,bilstm",
            "freeze=frozen",
            "seed=1",
            "data.train_size=48",
            f"data.dir={data_dir}",
            f"runs_dir={tmp_path}/runs",
            f"results_dir={tmp_path}/results",
            *FAST,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for head in ("linear", "bilstm"):
        result = (
            tmp_path / "runs" / "sst2" / "tiny_bert" / head / "frozen" / "seed=1" / "result.json"
        )
        assert json.loads(result.read_text())["status"] == "ok"
        assert (result.parent / ".hydra" / "config.yaml").is_file()
    with (tmp_path / "results" / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["head"], r["metric"]) for r in rows} == {
        ("linear", "accuracy"),
        ("bilstm", "accuracy"),
    }
    assert "accuracy" in proc.stdout and "bilstm" in proc.stdout
    # The same callback writes the report, and the sweep's launch is logged with its command.
    report = tmp_path / "results" / "report.html"
    assert f"report: {report}" in proc.stdout
    sections = BeautifulSoup(report.read_text(encoding="utf-8"), "html.parser").find_all("section")
    # Every section, calibration included (the cells store class probabilities).
    assert [s["id"] for s in sections][-2:] == ["calibration", "provenance"]
    assert len(sections) == 8
    # ... and the generated results README (results_readme), from the same statistics.
    readme = tmp_path / "results" / "README.md"
    assert f"README: {readme}" in proc.stdout
    assert readme.read_text(encoding="utf-8") == experiment_readme(tmp_path / "results")
    launches = read_launch_log([tmp_path / "runs"])
    assert [r["event"] for r in launches] == ["launch"]
    assert launches[0]["command"].startswith("python -m bench -m encoder=tiny_bert task=sst2")
    for name in ("history.csv", "cells.json", "launches.jsonl"):
        assert (tmp_path / "results" / name).is_file()


def test_minilm_frozen_linear_beats_the_majority_baseline_on_real_sst2(
    compose_cfg, data_dir, tmp_path
):
    cfg = compose_cfg(
        "experiment=quick", "head=linear", "freeze=frozen", "hydra.mode=RUN", f"data.dir={data_dir}"
    )
    assert cfg.data.train_size == 2000
    result = run(cfg, tmp_path)
    assert result["status"] == "ok", result.get("reason")
    best = result["best"]["metrics"]["dev"]["accuracy"]
    baseline = result["baseline"]["dev"]["metrics"]["accuracy"]
    assert best >= baseline + 0.10, (best, baseline)


MNLI_HEADER = "\t".join(
    [
        "index",
        "promptID",
        "pairID",
        "genre",
        "sentence1_binary_parse",
        "sentence2_binary_parse",
        "sentence1_parse",
        "sentence2_parse",
        "sentence1",
        "sentence2",
        "label1",
        "gold_label",
    ]
)


def _mnli_rows(n: int, offset: int) -> str:
    labels = ("entailment", "neutral", "contradiction")
    rows = []
    for i in range(n):
        label = labels[(i + offset) % 3]
        texts = f"The premise number {i} is here .\tA hypothesis {i % 7} ."
        rows.append(f"{i}\t1\t1x\tfiction\t(a)\t(b)\t(ROOT a)\t(ROOT b)\t{texts}\t{label}\t{label}")
    return "\n".join([MNLI_HEADER, *rows]) + "\n"


def test_mnli_reports_matched_and_mismatched(compose_cfg, tmp_path):
    """MNLI is not in ../shared/data; its layout is rebuilt here with MNLI's 12-column header."""
    folder = tmp_path / "data" / "glue" / "MNLI"
    folder.mkdir(parents=True)
    (folder / "train.tsv").write_text(_mnli_rows(48, 0))
    (folder / "dev_matched.tsv").write_text(_mnli_rows(20, 1))
    (folder / "dev_mismatched.tsv").write_text(_mnli_rows(16, 2))
    cfg = compose_cfg(
        "encoder=tiny_bert",
        "task=mnli",
        "seed=1",
        f"data.dir={tmp_path / 'data'}",
        "trainer.max_epochs=1",
        "selection.size=20",
    )
    result = run(cfg, tmp_path / "run")
    assert result["status"] == "ok", result.get("reason")
    assert set(result["best"]["metrics"]) == {"dev", "dev_mismatched"}  # reporting splits
    assert result["data"]["n_dev"] == {"select": 20, "dev": 20, "dev_mismatched": 16}
    assert result["data"]["n_train"] == 28
    rows = _read_predictions(tmp_path / "run" / "predictions_dev_mismatched.csv")
    assert len(rows) == 16 and {int(r["label"]) for r in rows} == {0, 1, 2}


def test_config_hash_follows_what_changes_the_numbers(compose_cfg):
    from bench.cell import config_hash

    base = config_hash(compose_cfg("seed=1", "data.dir=/a"))
    assert config_hash(compose_cfg("seed=1", "data.dir=/b", "data.num_workers=2")) == base
    assert config_hash(compose_cfg("seed=1", "data.dir=/a", "runtime.malloc=default")) == base
    # The feature cache: hashed for cells that read it, only when not the defaults.
    from bench.cache.keys import DEFAULT_DTYPE
    from bench.cell import CACHE_DEFAULTS

    assert CACHE_DEFAULTS["dtype"] == DEFAULT_DTYPE
    frozen = config_hash(compose_cfg("seed=1", "freeze=frozen"))
    for same in (
        "cache.enabled=true",
        "cache.dtype=float32",
        "cache.dir=/x",
        "cache.store_layers=all",
    ):
        assert config_hash(compose_cfg("seed=1", "freeze=frozen", same)) == frozen
    uncached = config_hash(compose_cfg("seed=1", "freeze=frozen", "cache.enabled=false"))
    fp16 = config_hash(compose_cfg("seed=1", "freeze=frozen", "cache.dtype=float16"))
    assert len({frozen, uncached, fp16}) == 3
    top2 = config_hash(compose_cfg("seed=1", "freeze=top_k", "freeze.k=2"))
    assert (
        config_hash(compose_cfg("seed=1", "freeze=top_k", "freeze.k=2", "cache.enabled=false"))
        != top2
    )
    assert config_hash(compose_cfg("seed=1", "cache.enabled=false")) == config_hash(
        compose_cfg("seed=1")
    )  # full fine-tuning never reads the cache
    assert config_hash(compose_cfg("seed=2", "data.dir=/a")) != base
    assert config_hash(compose_cfg("seed=1", "data.dir=/a", "head.dropout=0.2")) != base
    assert config_hash(compose_cfg("seed=1", "data.dir=/a", "data.train_size=10")) != base


def test_a_phase_adds_its_seconds_even_when_the_block_raises():
    result: dict = {}
    with phase(result, "data"):
        pass
    with pytest.raises(RuntimeError), phase(result, "data"):
        raise RuntimeError("stop")
    assert set(result["phases_s"]) == {"data"} and result["phases_s"]["data"] >= 0
    with pytest.raises(ValueError, match="valid: data, model"), phase(result, "loading"):
        pass
