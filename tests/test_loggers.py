"""Experiment trackers (``logger=``): real MLflow stores and real W&B offline runs.

The MLflow tests read back with MLflow's own client (``mlflow.search_runs``), the W&B tests
read the run's ``.wandb`` file; both skip, naming the extra, when it is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from bench.cell import config_hash
from bench.errors import ConfigError
from bench.run import trackers
from bench.run.train import run
from conftest import ROOT

FAST = (
    "encoder=tiny_bert",
    "task=sst2",
    "head=linear",
    "freeze=frozen",
    "trainer.max_epochs=1",
    "data.train_size=48",
    "data.max_length=32",
    "data.batch_size=16",
    "selection.size=32",
)
SWEEP = "trackers_test"


def _needs(package: str) -> None:
    pytest.importorskip(package, reason=f"logger={package} needs the extra headbench[{package}]")


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory):
    """An empty MLflow SQLite store, migrated once (MLflow's migrations take seconds)."""
    _needs("mlflow")
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow") / trackers.MLFLOW_DB
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def runs_dir(tmp_path, migrated_db):
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(migrated_db, folder / trackers.MLFLOW_DB)
    return folder


@pytest.fixture
def no_tracker_env(monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)


def _search(store, experiment=SWEEP):
    """The experiment's runs as MLflow lists them: a SQLite file, or any tracking URI."""
    import mlflow

    mlflow.set_tracking_uri(str(store) if str(store).startswith("file:") else f"sqlite:///{store}")
    return mlflow.search_runs(experiment_names=[experiment])


def test_the_logger_changes_no_config_hash(compose_cfg):
    hashes = {
        config_hash(compose_cfg("seed=1", f"logger={name}", "logger.tensorboard=false"))
        for name in trackers.LOGGERS
    }
    assert hashes == {config_hash(compose_cfg("seed=1"))}


def test_bad_logger_settings_name_the_key(compose_cfg):
    assert compose_cfg("seed=1").logger.name == "default"  # CSV, TensorBoard if installed
    with pytest.raises(ConfigError, match=r"logger.tensorboard='yes'; valid choices"):
        trackers.check_logger(compose_cfg("seed=1", "logger.tensorboard=yes"))
    with pytest.raises(ConfigError, match=r"logger.mode='cloud'; valid choices"):
        trackers.check_logger(compose_cfg("seed=1", "logger=wandb", "+logger.mode=cloud"))


@pytest.mark.parametrize("name", ["mlflow", "wandb"])
def test_a_missing_extra_is_named_before_anything_runs(compose_cfg, monkeypatch, name):
    monkeypatch.setitem(sys.modules, name, None)  # as if not installed: find_spec says None
    with pytest.raises(ConfigError) as caught:
        trackers.check_logger(compose_cfg("seed=1", f"logger={name}"))
    assert str(caught.value) == (
        f"logger={name} needs the optional extra {name!r} ({name} is not installed): "
        f"pip install 'headbench[{name}]'"
    )


def test_a_sweep_with_a_missing_extra_stops_before_training(data_dir, tmp_path):
    """The launching process refuses the sweep (exit 2), naming the extra; no cell runs."""
    code = (
        "import sys; sys.modules['mlflow'] = None; "
        "from bench.run.cli import main; sys.argv[0] = 'bench'; main()"
    )
    args = [f"runs_dir={tmp_path}/runs", f"results_dir={tmp_path}/results", "logger=mlflow"]
    sweep = subprocess.run(
        [sys.executable, "-c", code, "-m", *FAST, "seed=1,2", f"data.dir={data_dir}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sweep.returncode == 2, sweep.stderr[-2000:]
    assert "logger=mlflow needs the optional extra 'mlflow'" in sweep.stderr
    assert "pip install 'headbench[mlflow]'" in sweep.stderr
    assert not list((tmp_path / "runs").rglob("result.json"))


def test_a_single_run_with_a_missing_extra_exits_2(monkeypatch):
    from bench.run.cli import _logger_problem

    monkeypatch.setitem(sys.modules, "wandb", None)
    message = _logger_problem(["seed=1", "logger=wandb"])
    assert message is not None and message.startswith("error: logger=wandb needs")
    assert _logger_problem(["seed=1", "logger=csv"]) is None


def test_mlflow_cell_is_one_run_tagged_with_its_axes_and_final_metrics(
    compose_cfg, data_dir, runs_dir, no_tracker_env
):
    cfg = compose_cfg(
        *FAST, "seed=1", f"data.dir={data_dir}", f"runs_dir={runs_dir}", f"sweep_name={SWEEP}",
        "logger=mlflow",
    )  # fmt: skip
    result = run(cfg, runs_dir / "cell")
    assert result["status"] == "ok", result.get("reason")
    on_disk = json.loads((runs_dir / "cell" / "result.json").read_text())
    record = on_disk["tracker"]
    assert record["tracking_uri"] == f"sqlite:///{(runs_dir / 'mlflow.db').resolve()}"
    assert record["experiment"] == SWEEP and "error" not in record
    table = _search(runs_dir / "mlflow.db")
    assert len(table) == 1
    row = table.iloc[0]
    assert row["run_id"] == record["run_id"] and row["status"] == "FINISHED"
    assert row["tags.mlflow.runName"] == "sst2/tiny_bert/linear/frozen/seed=1"
    expected_tags = {
        "task": "sst2",
        "encoder": "tiny_bert",
        "head_label": "linear",
        "freeze_label": "frozen",
        "seed": "1",
        "config_hash": on_disk["config_hash"],
        "selection": "heldout",
        "sweep": SWEEP,
        "status": "ok",
    }
    assert {k: row[f"tags.{k}"] for k in expected_tags} == expected_tags
    assert row["tags.git_commit"].startswith(on_disk["git"]["commit"])
    # The final numbers, logged once, are the result file's.
    assert row["metrics.final/dev/accuracy"] == on_disk["best"]["metrics"]["dev"]["accuracy"]
    assert row["metrics.final/selection/accuracy"] == on_disk["selection"]["metrics"]["accuracy"]
    assert row["metrics.final/best_epoch"] == on_disk["best"]["epoch"]
    assert row["metrics.final/trainable_params"] == on_disk["params"]["trainable"]
    from mlflow.tracking import MlflowClient

    history = MlflowClient().get_metric_history(record["run_id"], "final/dev/accuracy")
    assert len(history) == 1
    # The curves came through Lightning, the hyperparameters too; the CSV is still written.
    assert "metrics.select/accuracy" in table.columns and row["params.head/name"] == "linear"
    assert (runs_dir / "cell" / "logs" / "metrics.csv").is_file()


def test_a_failed_cell_ends_its_run_failed_in_a_file_store(
    compose_cfg, tmp_path, monkeypatch, no_tracker_env
):
    """A cell that fails (here: its search found nothing) is a FAILED run with the reason."""
    _needs("mlflow")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    store = tmp_path / "mlruns"
    cfg = compose_cfg(
        *FAST, "seed=3", f"runs_dir={tmp_path}", f"sweep_name={SWEEP}", "logger=mlflow",
        f"logger.tracking_uri=file:{store}",
    )  # fmt: skip
    result = run(cfg, tmp_path / "cell", failure="every search trial failed (test)")
    assert result["status"] == "failed"
    assert os.environ["MLFLOW_ALLOW_FILE_STORE"] == "true"  # MLflow 3 asks for the opt-in
    assert result["tracker"]["tracking_uri"] == f"file:{store}"
    table = _search(f"file:{store}")
    assert len(table) == 1 and table.iloc[0]["status"] == "FAILED"
    assert table.iloc[0]["tags.status"] == "failed"
    assert "every search trial failed" in table.iloc[0]["tags.reason"]
    assert not any(c.startswith("metrics.final/dev") for c in table.columns)


def test_a_sweep_is_one_experiment_with_a_run_per_cell(data_dir, runs_dir, no_tracker_env, capsys):
    sweep = subprocess.run(
        [
            sys.executable, "-m", "bench", "-m", *FAST, "seed=1,2", f"data.dir={data_dir}",
            f"runs_dir={runs_dir}", f"results_dir={runs_dir.parent}/results",
            f"sweep_name={SWEEP}", "logger=mlflow", "report_file=null",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    table = _search(runs_dir / "mlflow.db")
    assert sorted(table["tags.mlflow.runName"]) == [
        "sst2/tiny_bert/linear/frozen/seed=1",
        "sst2/tiny_bert/linear/frozen/seed=2",
    ]
    for _, row in table.iterrows():
        result = json.loads((runs_dir / row["tags.cell_path"] / "result.json").read_text())
        assert result["tracker"]["run_id"] == row["run_id"]
        assert row["tags.config_hash"] == result["config_hash"]
        assert row["metrics.final/dev/accuracy"] == result["best"]["metrics"]["dev"]["accuracy"]
    # The same runs, listed by the sweep's runs directory (python -m bench.run.trackers).
    trackers.main([str(runs_dir)])
    listing = capsys.readouterr().out
    assert listing.count(f"mlflow {SWEEP} sst2/tiny_bert/linear/frozen/seed=") == 2


def test_wandb_offline_run_holds_the_tags_and_final_metrics(
    compose_cfg, data_dir, tmp_path, no_tracker_env
):
    _needs("wandb")
    cfg = compose_cfg(
        *FAST, "seed=2", f"data.dir={data_dir}", f"runs_dir={tmp_path}", f"sweep_name={SWEEP}",
        "logger=wandb",
    )  # fmt: skip
    result = run(cfg, tmp_path / "cell")
    assert result["status"] == "ok", result.get("reason")
    assert result["tracker"]["mode"] == "offline"  # no API key: nothing leaves the machine
    folders = trackers.wandb_runs(tmp_path / "wandb")
    assert len(folders) == 1 and str(folders[0]) == result["tracker"]["dir"]
    assert folders[0].name.startswith("offline-run-")
    assert folders[0].name.endswith(result["tracker"]["run_id"])
    offline = trackers.read_wandb_run(folders[0])
    assert offline["project"] == SWEEP and offline["exit_code"] == 0
    assert offline["name"] == "sst2/tiny_bert/linear/frozen/seed=2"
    assert offline["group"] == "sst2/tiny_bert/linear/frozen"
    assert {
        "task=sst2",
        "encoder=tiny_bert",
        "head_label=linear",
        "freeze_label=frozen",
        "seed=2",
        f"config_hash={result['config_hash'][:12]}",
        "selection=heldout",
        "status=ok",
    } <= set(offline["tags"])
    assert offline["config"]["headbench"]["config_hash"] == result["config_hash"]
    summary = offline["summary"]
    assert summary["final/dev/accuracy"] == result["best"]["metrics"]["dev"]["accuracy"]
    assert summary["final/best_epoch"] == result["best"]["epoch"]
    assert "select/accuracy" in summary  # the curves came through Lightning
    # A torn tail (a killed writer) loses only what was not written whole.
    data = (next(folders[0].glob("*.wandb"))).read_bytes()
    torn = tmp_path / "torn.wandb"
    torn.write_bytes(data[: len(data) - 5])
    assert trackers.read_wandb_run(torn)["name"] == offline["name"]


def test_search_trials_log_no_tracker_run(compose_cfg, data_dir, runs_dir, no_tracker_env):
    """Trials belong to the setting, not to one seed: only the cell is a tracker run."""
    cfg = compose_cfg(
        *FAST, "seed=1", f"data.dir={data_dir}", f"runs_dir={runs_dir}", f"sweep_name={SWEEP}",
        "logger=mlflow", "search=random", "search.trials=2",
    )  # fmt: skip
    from bench.run.search import run_with_search

    result = run_with_search(cfg, runs_dir / "setting" / "seed=1", run)
    assert result["status"] == "ok", result.get("reason")
    table = _search(runs_dir / "mlflow.db")
    assert len(table) == 1
    assert table.iloc[0]["tags.search_selected_trial"] == str(result["search"]["selected"])
    assert table.iloc[0]["tags.search"] == "random (2 trials)"
