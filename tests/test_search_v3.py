"""Protocol v3's search: the full grid, early stopping, seeds that pair and replicate.

``search=grid`` tries every configuration; under ``search.pairing: seed`` one seed fixes the
batch order of every head, and each seed runs its own search on its own selection slice;
ties are broken by the declared rule and recorded. Real Hydra composition, a real Lightning
Trainer, the tiny random BERT.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.model_selection import ParameterGrid
from torch.utils.data import RandomSampler

from bench.cell import TRIAL_FILE, config_hash
from bench.data.selection import carve_selection
from bench.data.sequence_datamodule import subset
from bench.errors import ConfigError
from bench.results.collect import tidy
from bench.results.trials import trials_table
from bench.run import search
from bench.run.preflight import check_protocol, check_types
from bench.run.search import run_with_search
from bench.run.train import run

FAST = ("trainer.max_epochs=2", "data.max_length=32", "data.batch_size=16")
# A grid of two trials whose learning rate is 0: both score alike (weight decay scales with the
# rate), a planted tie; declared with the larger decay first, so the rules disagree.
TIED = ("search.space.frozen.frozen_head_lr=[0.0]", "search.space.frozen.weight_decay=[0.1,0.0]")


def _cell(compose_cfg, data_dir, tmp_path, *overrides, head="linear", seed=1):
    cfg = compose_cfg(
        "encoder=tiny_bert",
        f"head={head}",
        "freeze=frozen",
        "task=rte",
        f"seed={seed}",
        "data.train_size=160",
        "selection.size=48",
        f"data.dir={data_dir}",
        f"cache.dir={tmp_path / 'cache'}",
        *FAST,
        *overrides,
    )
    return cfg, tmp_path / "runs" / "rte" / "tiny_bert" / head / "frozen" / f"seed={seed}"


# --- the grid ------------------------------------------------------------------------------


def test_the_full_grid_tries_every_configuration_of_the_v3_space(compose_cfg):
    frozen = compose_cfg("freeze=frozen", "search=grid", "seed=3")
    draws = search.draws_of(frozen)
    space = search.space_of(frozen)
    assert space["frozen_head_lr"] == [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
    assert space["weight_decay"] == [0.0, 0.1, 1.0]
    key = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    assert len(draws) == 21 and sorted(map(key, draws)) == sorted(map(key, ParameterGrid(space)))
    finetune = compose_cfg("freeze=full", "search=grid", "seed=3")
    assert max(search.space_of(finetune)["encoder_lr"]) == 1e-4
    assert len(search.draws_of(finetune)) == 6
    check_protocol(frozen)  # valid as shipped
    with pytest.raises(ConfigError, match=r"search.trials=20: .*full_grid.* has 21"):
        search.draws_of(compose_cfg("freeze=frozen", "search=grid", "seed=3", "search.trials=20"))


def test_the_new_options_keep_old_hashes_and_enter_new_ones(compose_cfg):
    old = compose_cfg("seed=1", "search=random")
    same = compose_cfg("seed=1", "search=random", "+search.pairing=null", "+search.tie_rule=trial")
    assert config_hash(same) == config_hash(old)
    off = compose_cfg("seed=1", "+trainer.early_stopping=null")
    assert config_hash(off) == config_hash(compose_cfg("seed=1"))
    changed = [
        ("+search.pairing=seed",),
        ("+search.tie_rule=lowest_values",),
        ("+trainer.early_stopping.patience=2",),
    ]
    assert all(
        config_hash(compose_cfg("seed=1", "search=random", *c)) != config_hash(old) for c in changed
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("search.pairing=order",), r"search.pairing='order'; valid choices: null, seed"),
        (("search.tie_rule=first",), r"search.tie_rule='first'; valid choices: trial, low"),
        (("search.sampler=all",), r"search.sampler='all'; valid choices: random_grid, full"),
        (("order_seed=4",), r"order_seed=4 with search.pairing=seed: .*leave order_seed null"),
    ],
)
def test_bad_protocol_options_are_named(compose_cfg, overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_protocol(compose_cfg("freeze=frozen", "search=grid", "seed=1", *overrides))


def test_a_patience_below_one_is_refused(compose_cfg):
    with pytest.raises(ConfigError, match=r"trainer.early_stopping.patience"):
        check_types(compose_cfg("seed=1", "+trainer.early_stopping.patience=0"))
    with pytest.raises(ConfigError, match=r"trainer.early_stopping=3: give the patience as"):
        check_protocol(compose_cfg("seed=1", "+trainer.early_stopping=3"))


# --- ties ----------------------------------------------------------------------------------


def test_ties_are_broken_by_the_declared_rule():
    def trial(k, score, lr, wd):
        config = {"frozen_head_lr": lr, "weight_decay": wd}
        return {
            "trial": k,
            "status": "ok",
            "trial_config": config,
            "selection": {"metrics": {"f1": score}},
        }

    records = [
        trial(1, 0.8, 3e-2, 0.0),
        trial(2, 0.8, 1e-3, 1.0),
        trial(3, 0.8, 1e-3, 0.1),
        trial(4, 0.7, 1e-4, 0.0),
    ]
    keys = ["frozen_head_lr", "weight_decay"]
    assert search.select_trial(records, "f1", "lowest_values", keys)["trial"] == 3
    assert search.select_trial(records, "f1", "trial", keys)["trial"] == 1
    # the declared key order decides: weight decay first
    assert search.select_trial(records, "f1", "lowest_values", keys[::-1])["trial"] == 1


# --- end to end: pairing, per-seed searches, the tie recorded, early stopping -------------


def test_two_heads_with_one_seed_see_the_same_batches(compose_cfg, data_dir, tmp_path, monkeypatch):
    drawn: list[list[int]] = []
    original = RandomSampler.__iter__

    def recording(self):
        order = list(original(self))
        drawn.append(order)
        return iter(order)

    monkeypatch.setattr(RandomSampler, "__iter__", recording)

    def orders(*overrides):
        out = []
        for head in ("linear", "last4_concat"):  # heads that draw different initialisations
            drawn.clear()
            cfg, run_dir = _cell(
                compose_cfg, data_dir, tmp_path / str(len(overrides)), *overrides, head=head
            )
            assert run(cfg, run_dir)["status"] == "ok"
            out.append([list(epoch) for epoch in drawn])
        return out

    paired = orders("+search.pairing=seed")
    assert len(paired[0]) == 2 and paired[0] == paired[1]  # every epoch's batches, both heads
    assert paired[0][0] != paired[0][1]  # a new order each epoch
    unpaired = orders()
    assert unpaired[0] != unpaired[1]  # the order followed each head's initialisation


def test_each_seed_runs_its_own_search_and_the_tie_is_recorded(compose_cfg, data_dir, tmp_path):
    results = {}
    for seed in (1, 2):
        cfg, run_dir = _cell(compose_cfg, data_dir, tmp_path, "search=grid", *TIED, seed=seed)
        result = run_with_search(cfg, run_dir, run)
        assert result["status"] == "ok", result.get("reason")
        result["run_dir"] = str(run_dir)
        results[seed] = result
        folder = search.cell_trials_dir(cfg, run_dir)
        assert folder.name == f"seed={seed}"
        trials = [json.loads((folder / f"trial={k}" / TRIAL_FILE).read_text()) for k in (1, 2)]
        assert [t["cell"]["seed"] for t in trials] == [seed, seed]  # the seed's own search
        scores = [t["selection"]["metrics"]["accuracy"] for t in trials]
        assert scores[0] == scores[1]  # the planted tie
        record = result["search"]
        assert record["seed"] == seed and record["tied"] == [1, 2]
        assert record["tie_rule"] == "lowest_values" and record["selected"] == 2
        assert record["selected_config"] == {"frozen_head_lr": 0.0, "weight_decay": 0.0}
        # the selected trial trained exactly as the cell: same seed, batches, slice
        assert trials[1]["selection"]["ids"] == result["selection"]["ids"]
        assert trials[1]["history"] == result["history"]
        assert result["data"]["order_seed"] == seed and result["selection"]["slice_seed"] == seed
    one, two = (set(results[s]["selection"]["ids"]) for s in (1, 2))
    trained = set(subset({"idx": list(range(2490))}, 160, 0, "train")["idx"])
    assert one != two and len(one) == len(two) == 48  # a slice per seed,
    assert not (one | two) & trained  # both outside the one fixed training subset
    table = trials_table(results.values())
    assert table[["seed", "trial", "selected", "tie_rule", "tied"]].values.tolist() == [
        [1, 1, False, "lowest_values", True],
        [1, 2, True, "lowest_values", True],
        [2, 1, False, "lowest_values", True],
        [2, 2, True, "lowest_values", True],
    ]


def test_early_stopping_stops_a_run_that_stops_improving(compose_cfg, data_dir, tmp_path):
    still = ("optim.frozen_head_lr=0.0", "trainer.max_epochs=5")  # the metric never moves
    cfg, run_dir = _cell(
        compose_cfg, data_dir, tmp_path / "a", *still, "+trainer.early_stopping.patience=2"
    )
    stopped = run(cfg, run_dir)
    assert stopped["status"] == "ok", stopped.get("reason")
    # epoch 0 sets the best, epochs 1 and 2 do not improve: stop after epoch 2 of 5
    assert stopped["selection"]["stopped_early"] is True
    assert stopped["best"]["epoch"] == 0 and len(stopped["history"]) == 3
    cfg, run_dir = _cell(compose_cfg, data_dir, tmp_path / "b", *still)
    full = run(cfg, run_dir)
    assert "stopped_early" not in full["selection"] and len(full["history"]) == 5  # off
    with_patience = _cell(
        compose_cfg, data_dir, tmp_path / "c", "+trainer.early_stopping.patience=9"
    )
    assert run(*with_patience)["selection"]["stopped_early"] is False  # on, never triggered
    # the same epochs up to the stop: early stopping changes when training ends, nothing else
    assert [h["select"] for h in full["history"][:3]] == [h["select"] for h in stopped["history"]]
    # the results table says which runs stopped early, and has no such column without it
    column = tidy([stopped, full])["stopped_early"]
    assert column.iloc[0] is True and column.isna().iloc[1]
    assert "stopped_early" not in tidy([full]).columns


def test_a_seed_slice_is_its_own_and_rte_is_repartitioned_when_few_remain():
    labels = np.array([i % 2 for i in range(2490)])
    subset = np.sort(np.random.default_rng(0).permutation(2490)[:160])
    fixed = [carve_selection(labels, subset, 500, 0, "class", "t", seed)[1] for seed in (1, 2)]
    assert not np.array_equal(*fixed)
    for select in fixed:  # outside the fixed subset, stratified
        share = np.delete(labels, subset).mean()  # the class share outside the subset
        assert not set(select) & set(subset) and abs(labels[select].sum() - 500 * share) < 1
    assert np.array_equal(fixed[0], carve_selection(labels, subset, 500, 0, "class", "t", 1)[1])
    # RTE trained on 2,000 of 2,490: the 490 left would be every seed's slice; re-partitioned
    big = np.sort(np.random.default_rng(0).permutation(2490)[:2000])
    parts = [carve_selection(labels, big, 500, 0, "class", "t", seed) for seed in (1, 2)]
    for train, select in parts:
        assert (len(train), len(select)) == (2000, 490) and not set(train) & set(select)
    assert not np.array_equal(parts[0][1], parts[1][1])
    # without a seed of its own, the old slice: the 490 examples the subset leaves
    assert carve_selection(labels, big, 500, 0, "class", "t")[1].tolist() == sorted(
        set(range(2490)) - set(big)
    )


def test_the_trial_count_is_the_grid_size_under_the_full_grid(compose_cfg):
    assert search.trial_count(compose_cfg("freeze=frozen", "search=grid", "seed=1")) == 21
    assert search.trial_count(compose_cfg("freeze=full", "search=grid", "seed=1")) == 6
    assert search.trial_count(compose_cfg("freeze=frozen", "search=random", "seed=1")) == 6
    assert search.trial_count(compose_cfg("freeze=frozen", "seed=1")) == 0
