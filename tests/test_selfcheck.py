"""The benchmark checks itself: a slice of a committed experiment, re-run and compared.

The comparison is tested on the committed ``fair_heads`` results themselves: fed back as
"today's" results they reproduce, identical; moved, they do not. Every number of its frames
is recomputed here with NumPy and SciPy from values read straight from the committed
``result.json`` files. The slow test re-trains the default slice with today's code.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from scipy import stats as sps

from bench.cell import config_hash
from bench.errors import DataError
from bench.results.collect import read_table
from bench.results.predictions import read_predictions
from bench.results.reproduction import IDENTICAL_ATOL, compare, prediction_changes
from bench.results.selfcheck_record import cell_frame, head_frame, read_record
from bench.run.selfcheck import (
    RECORD_FILE,
    SLICES,
    Slice,
    committed_cells,
    main,
    prepare,
    print_record,
    read_rerun,
)

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "results" / "fair_heads"
DEFAULT = SLICES["default"]


@pytest.fixture(scope="module")
def committed() -> pd.DataFrame:
    return read_table(EXPERIMENT)


@pytest.fixture(scope="module")
def committed_predictions() -> pd.DataFrame:
    return read_predictions(EXPERIMENT)


@pytest.fixture(scope="module")
def as_today() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The default slice's committed cells, read back as the check reads its re-run cells."""
    cells = prepare(EXPERIMENT, "default")
    roots = [c.run_dir / "result.json" for c in cells]
    table, predictions, problems = read_rerun(roots, [c.result["cell"] for c in cells])
    assert problems == []
    return table, predictions


def _shifted(table: pd.DataFrame, head: str, seeds: list[int], by: float) -> pd.DataFrame:
    out = table.copy()
    rows = (out["head_label"] == head) & out["seed"].isin(seeds) & (out["split"] == "dev")
    out.loc[rows, "value"] += by
    return out


def test_the_default_slice_trains_what_the_committed_cells_trained():
    cells = prepare(EXPERIMENT, "default")
    assert [c.path for c in cells] == DEFAULT.cell_paths()
    assert len(cells) == len(DEFAULT.heads) * len(DEFAULT.seeds) == 6
    for cell in cells:
        trained = OmegaConf.to_container(cell.config, resolve=True)
        assert trained["optim"] == cell.result["config"]["optim"], cell.path
        assert trained["seed"] == cell.result["cell"]["seed"]
        selected = cell.result["search"]["selected_config"]
        assert trained["optim"]["frozen_head_lr"] == selected["frozen_head_lr"]
        assert config_hash(cell.config) == config_hash(OmegaConf.create(cell.result["config"]))


@pytest.mark.skipif(not (ROOT / "results" / "fair_heads_gpu" / "runs").is_dir(), reason="not run")
def test_the_gpu_slice_finds_cells_whose_batch_order_follows_their_seed():
    experiment = ROOT / "results" / "fair_heads_gpu"
    chosen = SLICES["gpu-trained"]
    cells = prepare(experiment, "gpu-trained")
    assert len(cells) == len(chosen.tasks) * len(chosen.heads) * len(chosen.seeds) == 24
    assert chosen.cell_paths()[0] == "mrpc/minilm/linear/frozen/seed=1"  # without runs/
    for cell in cells:
        seed = cell.result["cell"]["seed"]
        assert cell.path.endswith(f"/seed={seed}-order={seed}")
        assert cell.result["cell"]["order_seed"] == seed
        # what the slice promises: trained on a GPU, in a lock-step group
        assert cell.result["hardware"]["gpu"].startswith("NVIDIA")
        assert cell.result["lockstep"]["device"] == "cuda"
        assert config_hash(cell.config) == config_hash(OmegaConf.create(cell.result["config"]))


def _committed_values(head: str) -> pd.Series:
    """A setting's dev accuracies by seed, read straight from its committed result files."""
    folder = EXPERIMENT / "runs" / "sst2" / "minilm" / head / "frozen"
    results = [json.loads((d / "result.json").read_text()) for d in folder.glob("seed=*")]
    values = {r["cell"]["seed"]: r["best"]["metrics"]["dev"]["accuracy"] for r in results}
    return pd.Series(values, dtype=float).sort_index()


def _expected_heads(today: dict[tuple[str, int], float]) -> pd.DataFrame:
    """Each default-slice head's committed mean, t interval and mean with today's values."""
    rows = []
    for head in sorted(DEFAULT.heads):
        x = _committed_values(head)
        mixed = x.copy()
        for (h, seed), value in today.items():
            if h == head:
                mixed[seed] = value
        low, high = sps.t.interval(0.95, df=x.size - 1, loc=x.mean(), scale=sps.sem(x))
        rows.append(
            {
                "head_label": head,
                "n": x.size,
                "committed_mean": x.mean(),
                "t_low": low,
                "t_high": high,
                "today_mean": mixed.mean(),
                "shift": mixed.mean() - x.mean(),
                "in_t": low <= mixed.mean() <= high,
            }
        )
    return pd.DataFrame(rows).set_index("head_label")


def _check_heads(rep, today: dict[tuple[str, int], float]) -> pd.DataFrame:
    """The settings frame against the values recomputed here; returns the expected frame."""
    expected = _expected_heads(today)
    got = rep.settings.set_index("head_label").loc[expected.index]
    assert (got["n"] == expected["n"]).all() and (got["n"] == 10).all()
    for column in ("committed_mean", "t_low", "t_high", "today_mean", "shift"):
        np.testing.assert_allclose(got[column], expected[column], rtol=0, atol=1e-12)
    assert got["in_t"].tolist() == expected["in_t"].tolist()
    assert all(seeds == [1, 2, 3] for seeds in got["seeds"])
    return expected


def _today(today: pd.DataFrame) -> dict[tuple[str, int], float]:
    """The re-run cells' dev accuracies by (head, seed)."""
    dev = today[(today["split"] == "dev") & (today["metric"] == "accuracy")]
    return {(r.head_label, int(r.seed)): float(r.value) for r in dev.itertuples()}


def test_the_committed_results_reproduce_themselves(committed, committed_predictions, as_today):
    today, predictions = as_today
    rep = compare(committed, today, committed_predictions, predictions)
    assert rep.ok
    assert len(rep.cells) == 6 and (rep.cells["diff"] == 0).all() and rep.cells["identical"].all()
    assert (rep.cells["changed"] == 0).all() and (rep.cells["n_predictions"] == 872).all()
    for _, cell in rep.cells.iterrows():
        assert cell["committed"] == _committed_values(cell["head_label"])[cell["seed"]]
    expected = _check_heads(rep, _today(today))
    assert (expected["shift"] == 0).all() and expected["in_t"].all()
    assert rep.settings["reproduces"].all()
    record = json.loads(json.dumps(rep.records(), allow_nan=False))  # strict JSON
    assert record["ok"] and record["cells"][0]["committed"] == rep.cells["committed"][0]
    assert cell_frame(record)["identical"].all() and head_frame(record)["inside"].all()


def test_a_shifted_head_does_not_reproduce(committed, as_today):
    today, _ = as_today
    # three seeds 5 points lower move a ten-seed mean 1.5 points
    shifted = _shifted(today, "last4_concat", [1, 2, 3], -0.05)
    rep = compare(committed, shifted)
    assert not rep.ok
    expected = _check_heads(rep, _today(shifted))
    assert expected.loc["last4_concat", "shift"] == pytest.approx(-0.015)
    assert not expected.loc["last4_concat", "in_t"] and expected.loc["mean_linear", "in_t"]
    moved = rep.settings.set_index("head_label")
    assert not moved.loc["last4_concat", "reproduces"] and moved.loc["mean_linear", "reproduces"]
    heads = head_frame(rep.records()).set_index("head_label")
    assert heads["inside"].to_dict() == {"last4_concat": False, "mean_linear": True}


def test_one_changed_example_reproduces_within_the_intervals(committed, as_today):
    today, _ = as_today
    moved = _shifted(today, "mean_linear", [2], 1 / 872)
    rep = compare(committed, moved)
    assert rep.ok and rep.cells["identical"].sum() == 5
    cell = rep.cells.set_index(["head_label", "seed"]).loc[("mean_linear", 2)]
    assert not cell["identical"] and cell["diff"] == pytest.approx(1 / 872, abs=1e-7)
    expected = _check_heads(rep, _today(moved))
    assert expected.loc["mean_linear", "shift"] == pytest.approx(1 / 8720, abs=1e-8)
    # float noise is not a change
    rep = compare(committed, _shifted(today, "mean_linear", [2], IDENTICAL_ATOL / 2))
    assert rep.cells["identical"].all()


def test_a_cell_whose_predictions_changed_at_the_same_score_is_not_identical(
    committed, committed_predictions, as_today
):
    today, predictions = as_today
    changed = predictions.copy()
    mine = (
        (changed["head_label"] == "mean_linear")
        & (changed["seed"] == 2)
        & (changed["split"] == "dev")
    )
    right = changed.index[mine & (changed["pred"] == changed["label"])][0]
    wrong = changed.index[mine & (changed["pred"] != changed["label"])][0]
    other = {"0": "1", "1": "0"}
    for row in (right, wrong):  # one right answer turned wrong, one wrong turned right
        changed.loc[row, "pred"] = other[str(changed.loc[row, "pred"])]
    rep = compare(committed, today, committed_predictions, changed)
    cell = rep.cells.set_index(["head_label", "seed"]).loc[("mean_linear", 2)]
    assert cell["identical"] and cell["changed"] == 2  # the record's score-only flag
    cells = cell_frame(rep.records()).set_index(["head_label", "seed"])
    assert cells.loc[("mean_linear", 2), "same_score"]
    assert not cells.loc[("mean_linear", 2), "identical"]  # predictions moved
    assert cells["identical"].sum() == 5


def test_a_failed_rerun_does_not_reproduce(committed, as_today):
    today, _ = as_today
    failed = today.copy()
    row = (failed["head_label"] == "mean_linear") & (failed["seed"] == 3)
    failed.loc[row, ["status", "reason", "value"]] = ["failed", "out of memory", np.nan]
    rep = compare(committed, failed)
    assert not rep.ok
    setting = rep.settings.set_index("head_label").loc["mean_linear"]
    assert setting["failed_seeds"] == [3] and not setting["reproduces"]
    # today's mean leaves the failed seed out: the other nine seeds' values
    x = _committed_values("mean_linear")
    assert setting["today_mean"] == pytest.approx(x.drop(3).mean(), abs=1e-12)
    cell = rep.cells.set_index(["head_label", "seed"]).loc[("mean_linear", 3)]
    assert (cell["status"], cell["reason"]) == ("failed", "out of memory")
    assert not head_frame(rep.records()).set_index("head_label").loc["mean_linear", "reproduces"]


def test_a_cell_the_experiment_lacks_is_refused(committed, as_today):
    today, _ = as_today
    other = today.assign(seed=today["seed"] + 100)
    with pytest.raises(ValueError, match=r"not in the committed results table: .*seed=101"):
        compare(committed, other)


def test_regression_scores_change_beyond_float_noise(committed_predictions):
    rows = committed_predictions[
        (committed_predictions["task"] == "stsb")
        & (committed_predictions["head_label"] == "mean_linear")
        & (committed_predictions["seed"] == 1)
    ]
    assert len(rows[rows["split"] == "dev"]) == 1500

    def moved(by: float) -> pd.DataFrame:
        return rows.assign(pred=(rows["pred"].astype(float) + by).map(repr))

    noise = prediction_changes(committed_predictions, moved(2e-6)).iloc[0]
    assert noise["changed"] == 0 and noise["score_diff"] == pytest.approx(2e-6, rel=1e-3)
    real = prediction_changes(committed_predictions, moved(-0.01)).iloc[0]
    assert real["changed"] == real["n_predictions"] == 1500
    classes = committed_predictions[
        (committed_predictions["task"] == "sst2")
        & (committed_predictions["head_label"] == "mean_linear")
        & (committed_predictions["seed"] == 1)
    ]
    flipped = classes.assign(pred=classes["pred"].where(classes["example"] != 0, "x"))
    change = prediction_changes(committed_predictions, flipped).iloc[0]
    assert (change["changed"], change["n_predictions"]) == (1, 872)
    assert np.isnan(change["score_diff"])


def test_bad_input_names_the_path_and_the_valid_choices(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([str(ROOT / "results" / "no_such_experiment")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "no_such_experiment: not a committed experiment (no such directory)" in err
    assert str(EXPERIMENT) in err and "fair_table7" in err

    with pytest.raises(SystemExit) as exit_:
        main([str(EXPERIMENT), "--slice", "everything"])
    assert exit_.value.code == 2
    assert "invalid choice: 'everything'" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_:
        main([str(EXPERIMENT), "--out", str(EXPERIMENT / "check")])
    assert exit_.value.code == 2
    assert "the check never writes there" in capsys.readouterr().err
    assert not (EXPERIMENT / "check").exists()

    layer3 = Slice("linear-L3", tasks=("sst2",), heads=("linear-L3",), seeds=(1,))
    with pytest.raises(DataError) as err_:
        committed_cells(EXPERIMENT, layer3)
    message = str(err_.value)
    assert "runs/sst2/minilm/linear-L3/frozen/seed=1: not committed: no head 'linear-L3'" in message
    assert "committed there: bilstm, last4_concat, linear, mean_linear, pooler-random" in message

    eleven = Slice("seed 11", tasks=("sst2",), heads=("mean_linear",), seeds=(11,))
    with pytest.raises(DataError, match=r"no seed 'seed=11' .* seed=1, seed=10, seed=2"):
        committed_cells(EXPERIMENT, eleven)


def _copy_experiment(tmp_path: Path, cells: list[str]) -> Path:
    """A committed experiment of a few cells (run directories and the full results table)."""
    copy = tmp_path / "fair_heads"
    for path in cells:
        shutil.copytree(EXPERIMENT / "runs" / path, copy / "runs" / path)
    shutil.copy(EXPERIMENT / "results.csv", copy / "results.csv")
    return copy


def test_committed_files_that_disagree_are_bad_input(tmp_path):
    one = Slice("one", tasks=("sst2",), heads=("mean_linear",), seeds=(1,))
    copy = _copy_experiment(tmp_path, one.cell_paths())
    assert [c.path for c in committed_cells(copy, one)] == one.cell_paths()

    table = pd.read_csv(copy / "results.csv")
    table[table["run_dir"].str.endswith("mean_linear/frozen/seed=1")].to_csv(
        copy / "results.csv", index=False
    )
    committed_cells(copy, one)
    table[~table["run_dir"].str.endswith("mean_linear/frozen/seed=1")].to_csv(
        copy / "results.csv", index=False
    )
    with pytest.raises(
        DataError, match=r"seed=1: committed, but not in the results table of .*fair_heads"
    ):
        committed_cells(copy, one)
    table.to_csv(copy / "results.csv", index=False)

    config = copy / "runs" / one.cell_paths()[0] / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("max_epochs: 3", "max_epochs: 4"))
    with pytest.raises(DataError, match=r"config\.yaml: hashes to .* the committed files"):
        committed_cells(copy, one)
    config.write_text("head: [unclosed\n")
    with pytest.raises(DataError, match=r"config\.yaml: unreadable config"):
        committed_cells(copy, one)
    config.unlink()
    with pytest.raises(DataError, match=r"config\.yaml: missing"):
        committed_cells(copy, one)


def test_the_printout_shows_every_cell_and_head_of_a_record(capsys):
    record = read_record(EXPERIMENT)
    assert record is not None
    print_record(record)
    out = capsys.readouterr().out
    for cell in record["cells"]:
        name = f"{cell['task']}/minilm/{cell['head_label']}/frozen/seed={cell['seed']}"
        assert f"{name} " in out and f"{cell['committed']:.6f}" in out
    for setting in record["settings"]:
        assert f"{setting['task']}/minilm/{setting['head_label']}/frozen " in out
    assert out.splitlines()[-1].startswith("REPRODUCED" if record["ok"] else "NOT REPRODUCED")


@pytest.mark.slow
def test_the_default_slice_reproduces_the_committed_fair_heads(tmp_path):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    before = sorted(p for p in EXPERIMENT.rglob("*") if p.is_file())
    done = subprocess.run(
        [sys.executable, "-m", "bench.run.selfcheck", "results/fair_heads", "--out", tmp_path],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((tmp_path / RECORD_FILE).read_text())
    assert record["ok"] and record["slice"]["name"] == "default"
    assert [c["status"] for c in record["cells"]] == ["ok"] * 6
    assert all(s["reproduces"] for s in record["settings"])
    assert sorted((tmp_path / "runs").rglob("result.json"))  # the re-run cells, kept by --out
    assert sorted(p for p in EXPERIMENT.rglob("*") if p.is_file()) == before  # nothing written
