"""Optional axes: the batch-order seed apart from the training seed, and training size as a
level of the run directory (bench/axes/optional.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from scipy import stats as sps
from test_train import FAST

from bench.cell import cell_of, cell_path, check_identity, config_hash
from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_tokenizer
from bench.results import crossed, frames
from bench.results.collect import cell_key, tidy
from bench.results.result_file import with_axes
from bench.results.stats import normalize_table, run_values
from bench.run.plan import plan
from bench.run.train import run
from conftest import CONF, frozen_sst2_key


def _module(data_dir, order_seed, group_by_length=False):
    encoder = OmegaConf.to_container(OmegaConf.load(CONF / "encoder" / "minilm.yaml"))
    dm = GlueDataModule(
        get_task("rte"),
        load_tokenizer(encoder),
        data_dir=data_dir,
        train_size=96,
        data_seed=0,
        max_length=64,
        batch_size=16,
        eval_batch_size=64,
        group_by_length=group_by_length,
        order_seed=order_seed,
    )
    dm.setup("fit")
    return dm


def _epochs(dm, global_seed, n=2):
    """The `idx` of every training example, batch by batch, over n epochs of one loader."""
    torch.manual_seed(global_seed)
    loader = dm.train_dataloader()
    torch.rand(7)  # what initialising another head would draw from the global generator
    return [[b["idx"].tolist() for b in loader] for _ in range(n)]


@pytest.mark.parametrize("group_by_length", [False, True, "bucket"])
def test_an_order_seed_fixes_the_batches_whatever_the_training_seed(data_dir, group_by_length):
    dm = _module(data_dir, order_seed=5, group_by_length=group_by_length)
    first = _epochs(dm, global_seed=1)
    assert _epochs(dm, global_seed=2) == first  # the training seed no longer moves them
    assert first[0] != first[1]  # each epoch still draws a new order
    seen = sorted(i for batch in first[0] for i in batch)
    assert seen == sorted(dm.train[i]["idx"] for i in range(len(dm.train)))
    other = _epochs(_module(data_dir, order_seed=6, group_by_length=group_by_length), 1)
    assert other != first


def test_without_an_order_seed_the_training_seed_draws_the_order(data_dir):
    dm = _module(data_dir, order_seed=None)
    assert _epochs(dm, global_seed=1) == _epochs(dm, global_seed=1)
    assert _epochs(dm, global_seed=1) != _epochs(dm, global_seed=2)


def test_order_seed_names_the_cell_and_is_hashed_only_when_set(compose_cfg):
    old = compose_cfg("task=sst2", "head=linear", "freeze=frozen", "seed=3")
    new = compose_cfg("task=sst2", "head=linear", "freeze=frozen", "seed=3", "order_seed=2")
    assert cell_path(old) == "sst2/minilm/linear/frozen/seed=3"
    assert cell_path(new) == "sst2/minilm/linear/frozen/seed=3-order=2"
    assert cell_of(new)["order_seed"] == 2 and cell_of(old)["order_seed"] is None
    assert config_hash(new) != config_hash(old)
    del old["order_seed"]  # a config from before the axis hashes as it did
    assert config_hash(old) == config_hash(compose_cfg("task=sst2", "freeze=frozen", "seed=3"))


def test_train_size_is_a_directory_level_only_when_listed(compose_cfg):
    plain = compose_cfg("data.train_size=400", "seed=1")
    listed = compose_cfg("data.train_size=400", "seed=1", "axes=[train_size]")
    whole = compose_cfg("seed=1", "axes=[train_size]", "order_seed=4")
    assert cell_path(plain) == "sst2/minilm/linear/full/seed=1"
    assert cell_path(listed) == "sst2/minilm/linear/full/train_size=400/seed=1"
    assert cell_path(whole) == "sst2/minilm/linear/full/train_size=all/seed=1-order=4"
    assert config_hash(listed) == config_hash(plain)  # `axes` moves files, not numbers


@pytest.mark.parametrize(
    ("override", "needle"),
    [("axes=[seed]", "axes=['seed']: must be a list"), ("order_seed=-2", "order_seed=-2")],
)
def test_bad_axes_are_named(compose_cfg, override, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        check_identity(compose_cfg("seed=1", override))


def test_the_sweep_writes_where_cell_path_says(tmp_path):
    cells = plan(
        CONF,
        [
            f"runs_dir={tmp_path}",
            "freeze=frozen",
            "data.train_size=100,400",
            "axes=[train_size]",
            "seed=1,2",
            "order_seed=7",
        ],
        multirun=True,
    )
    got = sorted(c.run_dir.relative_to(tmp_path).as_posix() for c in cells)
    assert got == [
        f"sst2/minilm/linear/frozen/train_size={n}/seed={s}-order=7"
        for n in (100, 400)
        for s in (1, 2)
    ]


def _result(seed, order_seed, value, head="linear", train_size=2000):
    cell = frozen_sst2_key(head, seed)
    config = {"data": {"train_size": train_size}, "order_seed": order_seed}
    return with_axes(
        {
            "cell": cell,
            "config": config,
            "status": "ok",
            "main_metric": "accuracy",
            "best": {"epoch": 1, "metrics": {"dev": {"accuracy": value}}},
            "finished_at": "2026-11-25T00:00:00Z",
        }
    )


def test_results_from_before_the_axes_take_them_from_their_config():
    res = _result(1, None, 0.8)
    assert res["cell"]["train_size"] == 2000 and res["cell"]["order_seed"] is None
    crossed = [_result(1, o, 0.8) for o in (1, 2)]
    assert cell_key(crossed[0]) != cell_key(crossed[1])
    table = normalize_table(tidy([res, *crossed]))
    assert sorted(table["order_seed"]) == [-1, 1, 2] and set(table["train_size"]) == {2000}


def test_heads_are_paired_by_seed_and_order_seed():
    rng = np.random.default_rng(0)
    runs = [(s, o) for s in (1, 2, 3) for o in (1, 2)]
    a = {r: float(v) for r, v in zip(runs, rng.uniform(0.7, 0.9, len(runs)), strict=True)}
    b = {r: float(v) for r, v in zip(runs, rng.uniform(0.7, 0.9, len(runs)), strict=True)}
    results = [_result(s, o, a[s, o], "linear") for s, o in runs]
    results += [_result(s, o, b[s, o], "mean_linear") for s, o in runs]
    results.append(_result(4, 1, 0.85, "linear"))  # no partner: not paired
    table = tidy(results)
    assert len(run_values(table)) == 13
    runs_table = run_values(table)
    row = frames.comparisons(runs_table, frames.scores(runs_table)).iloc[0]
    diffs = np.array([a[r] - b[r] for r in runs])
    assert row["n_pairs"] == 6
    assert row["estimate"] == pytest.approx(diffs.mean())
    # every seed ran with both orders: a crossed grid, its error with seed and order effects
    grid = pd.DataFrame(diffs.reshape(3, 2), index=[1, 2, 3], columns=[1, 2])
    assert row["se_seed"] == pytest.approx(crossed.crossed_mean(grid).se)
    naive = sps.ttest_rel([a[r] for r in runs], [b[r] for r in runs])
    assert row["p"] != pytest.approx(naive.pvalue)
    sizes = tidy([_result(1, None, 0.8, train_size=100), _result(1, None, 0.9, train_size=400)])
    assert list(pd.unique(normalize_table(sizes)["train_size"])) == [100, 400]
    assert len(run_values(sizes)) == 2  # two training sizes: two runs, not one


def test_a_cell_trains_with_its_order_seed(compose_cfg, data_dir, tmp_path):
    histories = []
    for seed in (1, 2):
        cfg = compose_cfg(
            "encoder=tiny_bert",
            "head=linear",
            "freeze=frozen",
            "task=sst2",
            f"seed={seed}",
            "order_seed=5",
            "data.train_size=64",
            f"data.dir={data_dir}",
            *FAST,
        )
        result = run(cfg, tmp_path / f"seed={seed}-order=5")
        assert result["status"] == "ok", result.get("reason")
        assert result["data"]["order_seed"] == 5 and result["cell"]["order_seed"] == 5
        histories.append([h["train_loss"] for h in result["history"]])
    assert histories[0] != histories[1]  # another initialisation, the same batches
