"""Lock-step training of frozen heads (#22 item 2): each cell as if it had trained alone.

Real config, real SST-2 / STS-B data, a tiny random BERT, the real feature cache: a
lock-step group and the same cells trained one by one with :func:`bench.run.train.run`
must select the same epochs and give the same metrics (within 1e-5) and predictions.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from bench.cell import config_hash
from bench.run import lockstep
from bench.run.lockstep import NotLockstep, group_cells, group_key, train_group, train_trials
from bench.run.search import run_with_search, select_config
from bench.run.train import prepare_cell, run
from conftest import bench_in_this_process


def _cfg(compose_cfg, data_dir, tmp_path: Path, *overrides: str):
    size = () if "selection=dev" in overrides else ("selection.size=32",)
    return compose_cfg(
        "encoder=tiny_bert",
        "task=sst2",
        "freeze=frozen",
        "order_seed=7",
        f"data.dir={data_dir}",
        "data.train_size=64",
        *size,
        "trainer.max_epochs=2",
        "data.max_length=32",
        "data.batch_size=16",
        f"cache.dir={tmp_path / 'cache'}",
        *overrides,
    )


def _alone_and_together(compose_cfg, data_dir, tmp_path, cells, *common):
    cfgs = [_cfg(compose_cfg, data_dir, tmp_path, *common, *cell) for cell in cells]
    alone = [run(cfg, tmp_path / "alone" / str(i)) for i, cfg in enumerate(cfgs)]
    dirs = [tmp_path / "together" / str(i) for i in range(len(cfgs))]
    began = time.perf_counter()
    together = train_group(cfgs, dirs)
    elapsed = time.perf_counter() - began
    # each cell's wall is its share: the group's cells add up to the group's wall, not n x it
    walls = [r["wall_time_s"] for r in together]
    assert all(r["lockstep"]["wall_time"] == "share" for r in together)
    assert sum(walls) <= elapsed
    assert sum(walls) >= 0.8 * together[0]["lockstep"]["train_s"]
    return cfgs, alone, together


def _same_numbers(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a["status"] == b["status"] == "ok", (a.get("reason"), b.get("reason"))
    assert a["best"]["epoch"] == b["best"]["epoch"]
    assert a["selection"]["best_epoch"] == b["selection"]["best_epoch"]
    for ha, hb in zip(a["history"], b["history"], strict=True):
        assert ha["step"] == hb["step"]
        # a stack's losses are averaged in another order (stacked_loss): the recorded mean
        # can differ in its last bits while the gradients, and so everything else, do not
        assert ha["train_loss"] == pytest.approx(hb["train_loss"], rel=1e-6, abs=tol)
        for split in [k for k, v in ha.items() if isinstance(v, dict)]:  # evaluated splits
            for metric, value in ha[split].items():
                assert value == pytest.approx(hb[split][metric], abs=tol), (split, metric)
    for split, metrics in a["best"]["metrics"].items():
        for metric, value in metrics.items():
            assert value == pytest.approx(b["best"]["metrics"][split][metric], abs=tol)
    for key in ("cell", "cell_path", "config_hash", "baseline", "best_constant", "params"):
        assert a[key] == b[key], key


def test_linear_family_in_lockstep_equals_each_cell_alone(compose_cfg, data_dir, tmp_path):
    cells = [
        (f"head={head}", f"seed={seed}")
        for head in ("linear", "pooler", "mean_linear")
        for seed in (1, 2)
    ]
    # trial-like cells: other learning rates and weight decay in the same stack
    cells += [("head=linear", "seed=3", "optim.frozen_head_lr=0.003", "optim.weight_decay=0.1")]
    _, alone, together = _alone_and_together(compose_cfg, data_dir, tmp_path, cells)
    for i, (a, b) in enumerate(zip(alone, together, strict=True)):
        _same_numbers(a, b, tol=0.0)  # the same kernels: bit for bit on CPU
        assert b["lockstep"]["size"] == len(cells)
        assert 0 < b["train_time_s"] < b["lockstep"]["train_s"]
        # its phases: its own setup (the first cell builds data and features for the group),
        # its share of the training, its own conclusion; no Trainer is built in a group
        assert set(b["phases_s"]) == {"data", "model", "features", "fit", "conclude"}
        assert b["phases_s"]["fit"] == b["train_time_s"]
        assert sum(b["phases_s"].values()) <= b["wall_time_s"] + 1e-6
        for name in ("predictions_dev.csv", "predictions_select.csv"):
            left = (tmp_path / "alone" / str(i) / name).read_text()
            right = (tmp_path / "together" / str(i) / name).read_text()
            assert left == right, (cells[i], name)
    # each cell is charged its own computation and a share of the rest: the sum is the group's
    total = sum(r["train_time_s"] for r in together)
    assert total == pytest.approx(together[0]["lockstep"]["train_s"], rel=0.05)


def test_bilstm_and_bucketed_batches_in_lockstep(compose_cfg, data_dir, tmp_path):
    """The BiLSTM trains per cell in the shared batch loop; length-bucketed batches served
    as examples (not resident)."""
    cells = [("head=bilstm", "seed=1", "head.lstm_hidden=32"), ("head=linear", "seed=1")]
    cells += [("head=linear", "seed=2")]
    _, alone, together = _alone_and_together(
        compose_cfg,
        data_dir,
        tmp_path,
        cells,
        "data.group_by_length=bucket",
        "cache.resident=false",
    )
    assert together[0]["lockstep"]["stacked"] == 2  # the two linear heads; the BiLSTM alone
    for a, b in zip(alone, together, strict=True):
        # per cell, the single run's kernels: equal bit for bit on CPU (the issue allows
        # float tolerance for the BiLSTM, whose training amplifies rounding)
        _same_numbers(a, b, tol=0.0)
    # the trained weights agree: every probability of both scored splits, to the last digit
    for i in range(len(cells)):
        for name in ("predictions_dev.csv", "predictions_select.csv"):
            left = (tmp_path / "alone" / str(i) / name).read_text()
            assert left == (tmp_path / "together" / str(i) / name).read_text(), (cells[i], name)


def test_last4_concat_and_regression_selected_on_dev(compose_cfg, data_dir, tmp_path):
    cells = [("head=last4_concat", f"seed={seed}") for seed in (1, 2)]
    _, alone, together = _alone_and_together(compose_cfg, data_dir, tmp_path / "sst2", cells)
    for a, b in zip(alone, together, strict=True):
        _same_numbers(a, b, tol=0.0)
    # STS-B: one output, where baddbmm would round differently from the cell's addmm: the
    # output layer runs per cell (F.linear), and the numbers are the same bit for bit
    cells = [("head=linear", f"seed={seed}") for seed in (1, 2)] + [("head=pooler", "seed=1")]
    _, alone, together = _alone_and_together(
        compose_cfg, data_dir, tmp_path / "stsb", cells, "task=stsb", "selection=dev"
    )
    assert together[0]["selection"]["split"] == "dev"  # dev selects: no reporting pass
    for a, b in zip(alone, together, strict=True):
        _same_numbers(a, b, tol=0.0)


def test_a_diverging_cell_leaves_the_group_and_the_others_finish(
    compose_cfg, data_dir, tmp_path, monkeypatch
):
    cells = [
        ("head=linear", "seed=1"),
        ("head=linear", "seed=2", "optim.frozen_head_lr=1e37", "optim.weight_decay=0.0"),
        ("head=pooler", "seed=1"),
    ]
    record = lockstep.record_failure

    def slow_record(*args, **kwargs):
        """Recording the divergence takes a while (a slow disk): the cell's own time, in its
        wall, never also shared among the cells still training (CI, 2026-11-27: the walls
        added up to more than the group's wall when it was both)."""
        time.sleep(0.5)
        return record(*args, **kwargs)

    monkeypatch.setattr(lockstep, "record_failure", slow_record)
    _, alone, together = _alone_and_together(compose_cfg, data_dir, tmp_path, cells)
    assert alone[1]["status"] == together[1]["status"] == "diverged"
    assert alone[1]["diverged_step"] == together[1]["diverged_step"]
    assert together[1]["reason"] == alone[1]["reason"]
    for i in (0, 2):
        _same_numbers(alone[i], together[i], tol=0.0)
    stored = json.loads((tmp_path / "together" / "1" / "result.json").read_text())
    assert stored["status"] == "diverged"


def test_cells_that_cannot_train_in_lockstep_are_refused_with_the_reason(
    compose_cfg, data_dir, tmp_path
):
    ok = _cfg(compose_cfg, data_dir, tmp_path, "head=linear", "seed=1")
    refused = {
        "order_seed=null": r"order_seed is null: .* set order_seed=<int>",
        "freeze=full": r"freeze=full: lock-step trains frozen heads only \(valid choice: frozen\)",
        "search=random": r"search.trials=\d+: a cell's search selects its configuration first",
        "trainer.precision=bf16-mixed": r"trainer.precision=bf16-mixed: .*valid: 32-true",
        "trainer.matmul_precision=high": r"trainer.matmul_precision=high: .*valid: highest",
        "cache.enabled=false": r"cache.enabled=false",
        "+trainer.accumulate_grad_batches=2": r"trainer.accumulate_grad_batches is set",
    }
    for override, message in refused.items():
        cfg = _cfg(compose_cfg, data_dir, tmp_path, "head=linear", "seed=1", override)
        with pytest.raises(NotLockstep, match=message):
            group_key(cfg)
    # another task, another order seed, another layer set: another group
    others = [
        _cfg(compose_cfg, data_dir, tmp_path, "head=linear", "seed=2"),
        _cfg(compose_cfg, data_dir, tmp_path, "head=linear", "seed=1", "order_seed=8"),
        _cfg(compose_cfg, data_dir, tmp_path, "head=last4_concat", "seed=1"),
        _cfg(compose_cfg, data_dir, tmp_path, "head=linear", "seed=1", "order_seed=null"),
    ]
    groups, alone = group_cells([ok, *others])
    assert groups == [[0, 1]]
    assert set(alone) == {2, 3, 4}
    assert "order_seed is null" in alone[4]
    assert "no other cell shares" in alone[2]
    with pytest.raises(NotLockstep, match="2 lock-step groups"):
        train_group([ok, others[1]], [tmp_path / "a", tmp_path / "b"])


def test_the_lockstep_launcher_groups_a_sweep_and_resumes_it(data_dir, tmp_path):
    """``hydra/launcher=lockstep``: after their search, the eligible cells train as a group,
    the rest alone."""
    command = [
        "-m",
        "hydra/launcher=lockstep",
        "task=sst2",
        "encoder=tiny_bert",
        "head=linear,pooler",
        "freeze=frozen",
        "seed=1",
        "order_seed=7,null",
        "search=random",
        "search.trials=2",
        "data.train_size=32",
        "selection.size=32",
        "data.max_length=32",
        "data.batch_size=16",
        "trainer.max_epochs=1",
        "report_file=null",
        f"runs_dir={tmp_path}/runs",
        f"results_dir={tmp_path}/results",
        f"cache.dir={tmp_path}/cache",
    ]
    first = bench_in_this_process(*command)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "lock-step group of 2 cells" in first.stdout
    assert first.stdout.count("alone (order_seed is null") == 2
    results = {
        p.parent.relative_to(tmp_path / "runs").as_posix(): json.loads(p.read_text())
        for p in (tmp_path / "runs").rglob("result.json")
    }
    assert len(results) == 4 and all(r["status"] == "ok" for r in results.values())
    grouped = {k for k, r in results.items() if "lockstep" in r}
    assert grouped == {
        "sst2/tiny_bert/linear/frozen/seed=1-order=7",
        "sst2/tiny_bert/pooler-random/frozen/seed=1-order=7",
    }
    for cell in grouped:
        assert (tmp_path / "runs" / cell / ".hydra" / "config.yaml").is_file()
        assert results[cell]["search"]["trials"] == 2  # trained its selected configuration
    trials = list((tmp_path / "runs").rglob("trial.json"))
    assert len(trials) == 4  # 2 heads x 2 trials, shared by each head's cells
    assert (tmp_path / "results" / "results.csv").is_file()  # the sweep's callback ran
    again = bench_in_this_process(*command)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("skip (done)") == 4
    assert "lock-step group of" not in again.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_lockstep_agrees_with_each_cell_alone(compose_cfg, data_dir, tmp_path):
    """Batched kernels may round differently from the single cell's on a GPU: 1e-5."""
    cells = [(f"head={head}", f"seed={seed}") for head in ("linear", "pooler") for seed in (1, 2)]
    _, alone, together = _alone_and_together(compose_cfg, data_dir, tmp_path, cells)
    for a, b in zip(alone, together, strict=True):
        assert b["lockstep"]["device"] == "cuda"
        _same_numbers(a, b, tol=1e-5)


def test_search_trials_with_an_order_seed_train_in_lockstep(compose_cfg, data_dir, tmp_path):
    """``search.order_seed``: the trials of every head share batches and train together."""
    search = ("search=random", "search.trials=2", "search.order_seed=5")
    heads = ("linear", "pooler")
    results = {}
    for side in ("alone", "together"):
        cfgs = [
            _cfg(compose_cfg, data_dir, tmp_path, f"head={h}", "seed=1", *search) for h in heads
        ]
        dirs = [tmp_path / side / h / "seed=1" for h in heads]
        if side == "together":
            assert train_trials(cfgs, dirs) == 4  # 2 heads x 2 trials, one group
            assert train_trials(cfgs, dirs) == 0  # stored: nothing left
        results[side] = [run_with_search(c, d, run) for c, d in zip(cfgs, dirs, strict=True)]
    for h, a, b in zip(heads, results["alone"], results["together"], strict=True):
        assert a["search"]["scores"] == b["search"]["scores"]
        assert a["search"]["selected"] == b["search"]["selected"]
        _same_numbers(a, b, tol=0.0)
        for k in (1, 2):
            trial = tmp_path / "together" / h / "trials" / f"trial={k}" / "trial.json"
            record = json.loads(trial.read_text())
            assert record["kind"] == "trial" and "lockstep" in record
            assert record["config"]["order_seed"] == 5
    # unset, the trials keep their old batch order and hash
    plain = _cfg(compose_cfg, data_dir, tmp_path, "head=linear", "seed=1", *search[:2])
    assert config_hash(plain) != config_hash(
        _cfg(compose_cfg, data_dir, tmp_path, "head=linear", "seed=1", *search)
    )
    assert "order_seed" not in OmegaConf.to_container(plain.search) or (
        plain.search.order_seed is None
    )


def test_a_group_shares_its_data_features_and_frozen_encoder(compose_cfg, data_dir, tmp_path):
    first = prepare_cell(_cfg(compose_cfg, data_dir, tmp_path, "head=linear", "seed=1"), {}, True)
    cfg = _cfg(compose_cfg, data_dir, tmp_path, "head=pooler", "seed=2")
    second = prepare_cell(cfg, {}, True, first)
    assert not first.module.encoder_drew_random  # loading drew nothing: sharing is exact
    assert second.module.encoder is first.module.encoder
    assert second.datamodule is first.datamodule and second.served is first.served


def test_searched_cells_train_their_selected_configurations_in_lockstep(
    compose_cfg, data_dir, tmp_path
):
    """After the search (trials as a cell alone trains them), the cells are a group."""
    cells = [(f"head={h}", f"seed={seed}") for h in ("linear", "pooler") for seed in (1, 2)]
    search = ("search=random", "search.trials=2")
    results = {}
    for side in ("alone", "together"):
        cfgs = [_cfg(compose_cfg, data_dir, tmp_path, *c, *search) for c in cells]
        dirs = [tmp_path / side / c[0] / c[1] for c in cells]
        if side == "alone":
            results[side] = [run_with_search(c, d, run) for c, d in zip(cfgs, dirs, strict=True)]
            continue
        chosen = [select_config(c, d, run) for c, d in zip(cfgs, dirs, strict=True)]
        with pytest.raises(NotLockstep, match="selects its configuration first"):
            group_key(chosen[0][0])
        assert group_cells([c for c, _ in chosen], selected=True)[0] == [[0, 1, 2, 3]]
        results[side] = train_group(
            [c for c, _ in chosen],
            dirs,
            extras=[kw["extra"] for _, kw in chosen],
            cell_hashes=[kw["cell_hash"] for _, kw in chosen],
            selected=True,
        )
    for a, b in zip(results["alone"], results["together"], strict=True):
        assert a["search"] == {**b["search"], "train_time_s": a["search"]["train_time_s"]}
        assert a["config"]["optim"] == b["config"]["optim"]  # the selected trial's values
        _same_numbers(a, b, tol=0.0)  # config_hash too: the cell's own, as alone
