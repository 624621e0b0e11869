"""``trainer=ddp``: one cell on two CPU processes (gloo) under a Hydra multirun.

With ``data.batch_size=64`` per rank on 128 training examples, every DDP step averages
the gradients of the same 128 examples that one single-process step (batch 128) sees, and
a frozen encoder with ``head.dropout=0`` draws no random numbers while training. So the
two runs must agree to float rounding: losses, per-epoch metrics and every prediction.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from bench.cell import config_hash
from bench.model.encoders import load_encoder
from bench.model.ranks import gather_rows
from bench.run.distributed import SpawnDDPStrategy, drop_output_capturing_hooks
from bench.run.train import run
from conftest import ENCODERS, ROOT

CELL = (
    "task=stsb",
    "encoder=tiny_bert",
    "head=linear",
    "head.dropout=0",
    "freeze=frozen",
    "seed=1",
    "data.train_size=128",
    "selection.size=32",  # the held-out slice: 500 by default, slow on two cores
    "data.max_length=32",
    "trainer.max_epochs=2",
    "optim.warmup_ratio=0",
    "report_file=null",
)
RUN = "stsb/tiny_bert/linear/frozen/seed=1"


def _bench(*args: str, tmp: Path, multirun: bool = False, cell: tuple[str, ...] = CELL) -> None:
    """Run ``python -m bench`` in a fresh process (the real command line and Hydra)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    flags = ["-m"] if multirun else []
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *flags, *cell, *args, f"cache.dir={tmp}/cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _predictions(run_dir: Path) -> dict[int, float]:
    with (run_dir / "predictions_dev.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    preds = {int(r["idx"]): float(r["pred"]) for r in rows}
    assert len(preds) == len(rows), "an example predicted twice"
    return preds


def test_a_two_process_ddp_cell_writes_one_result_matching_one_process(
    compose_cfg, data_dir, tmp_path
):
    ddp_runs, single_runs = tmp_path / "ddp", tmp_path / "single"
    _bench(
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "data.batch_size=64",
        f"runs_dir={ddp_runs}",
        f"results_dir={tmp_path}/results",
        tmp=tmp_path,
        multirun=True,
    )
    # the single-process reference runs in this process (same code path below Hydra's main)
    run(compose_cfg(*CELL, "data.batch_size=128", f"cache.dir={tmp_path}/cache"), single_runs / RUN)

    assert [p.relative_to(ddp_runs).as_posix() for p in ddp_runs.rglob("result.json")] == [
        f"{RUN}/result.json"
    ]
    hydra_dirs = [p.parent.relative_to(ddp_runs).as_posix() for p in ddp_runs.rglob(".hydra")]
    assert hydra_dirs == [RUN]  # no rank re-ran Hydra into a directory of its own
    ddp = json.loads((ddp_runs / RUN / "result.json").read_text())
    single = json.loads((single_runs / RUN / "result.json").read_text())
    assert ddp["status"] == single["status"] == "ok"
    assert ddp["config"]["trainer"]["strategy"] == "ddp_spawn"
    # what the rank recorded comes back to the cell's process
    assert ddp["matmul_precision"] == single["matmul_precision"] == "highest"

    assert len(ddp["history"]) == len(single["history"]) == 2
    for d, s in zip(ddp["history"], single["history"], strict=True):
        assert d["train_loss"] == pytest.approx(s["train_loss"], rel=1e-5)
        # The epoch is chosen on the selection slice (selection=heldout, the default).
        # Two training steps from a random init leave the 32 slice predictions within about
        # 1e-2 of each other, so a rounding-level difference can swap near-tied examples:
        # each adjacent swap moves Spearman by 12 / (n (n^2 - 1)) = 3.7e-4 at n = 32, and
        # CI's machine once swapped three (1.0e-3). Pearson is continuous in the predictions.
        assert d["select"]["pearson"] == pytest.approx(s["select"]["pearson"], abs=1e-3)
        assert d["select"]["spearman"] == pytest.approx(s["select"]["spearman"], abs=4e-3)
    assert ddp["best"]["epoch"] == single["best"]["epoch"]
    assert ddp["best"]["metrics"]["dev"]["pearson"] != pytest.approx(0.0, abs=1e-3)

    ddp_preds, single_preds = _predictions(ddp_runs / RUN), _predictions(single_runs / RUN)
    assert sorted(ddp_preds) == list(range(1500))  # STS-B dev, each example once
    assert ddp_preds == pytest.approx(single_preds, rel=1e-4, abs=1e-5)
    # rank 0's share of the training loop came back to the launching process
    assert ddp["throughput"]["examples"] == 2 * 64 and ddp["throughput"]["batches"] == 2
    table = (tmp_path / "results" / "results.csv").read_text()
    assert "stsb,tiny_bert,linear" in table  # collected at the end of the multirun


def test_trainer_ddp_composes_to_the_spawn_strategy(compose_cfg):
    cfg = compose_cfg("trainer=ddp", "seed=1")
    assert cfg.trainer.strategy == "ddp_spawn" and cfg.trainer.devices == 2
    assert config_hash(cfg) != config_hash(compose_cfg("seed=1"))  # DDP changes the numbers
    from bench.run.distributed import trainer_strategy

    kwargs = trainer_strategy(
        {"strategy": "ddp_spawn", "devices": 2, "process_group_backend": "gloo"}
    )
    assert isinstance(kwargs["strategy"], SpawnDDPStrategy)
    assert "process_group_backend" not in kwargs
    assert kwargs["strategy"].process_group_backend == "gloo"
    assert trainer_strategy({"devices": 1, "process_group_backend": None}) == {"devices": 1}


def test_gather_rows_keeps_each_example_once_in_order():
    rows = [(3, "c"), (1, "a"), (3, "c again"), (2, "b")]
    assert gather_rows(rows, key=lambda r: r[0]) == [(1, "a"), (2, "b"), (3, "c")]


def test_an_encoder_that_ran_can_be_pickled_for_spawn_after_dropping_its_hooks():
    encoder, _ = load_encoder(ENCODERS["tiny_bert"])
    inputs = {"input_ids": torch.tensor([[2, 5, 6, 3]]), "attention_mask": torch.ones(1, 4)}
    before = encoder(**inputs, output_hidden_states=True).hidden_states
    with pytest.raises((AttributeError, pickle.PicklingError)):  # transformers' closure hooks
        pickle.dumps(encoder)
    assert drop_output_capturing_hooks(encoder) > 0
    clone = pickle.loads(pickle.dumps(encoder))
    after = clone(**inputs, output_hidden_states=True).hidden_states
    assert len(after) == len(before) and torch.equal(after[-1], before[-1])


class _Recorder(L.LightningModule):
    """A module with a run record, as HeadbenchModule has (no training needed here)."""

    def __init__(self, record=None):
        super().__init__()
        self.record = record

    def run_record(self):
        return self.record

    def restore_run_record(self, record):
        self.record = record


def test_the_spawn_launcher_sends_a_large_run_record_through_a_file_not_the_queue():
    """Lightning joins the ranks before reading its queue: >64 KiB in it would deadlock."""
    trainer = L.Trainer(
        strategy=SpawnDDPStrategy(),
        accelerator="cpu",
        devices=2,
        logger=False,
        enable_checkpointing=False,
    )
    launcher = trainer.strategy.launcher
    record = {"best": {"predictions": {"dev": {"idx": list(range(200_000))}}}, "history": []}
    trainer.strategy.connect(_Recorder(record))  # what rank 0 holds after fit
    extra = launcher.get_extra_results(trainer)
    assert len(pickle.dumps(extra)) < 16 * 1024  # the queue carries a path, not the record
    parent = _Recorder()
    trainer.strategy.connect(parent)  # the cell's own process
    launcher.update_main_process_results(trainer, extra)
    assert parent.record == record
    assert not any(Path(v).exists() for v in extra.values() if isinstance(v, str))


@pytest.mark.slow
def test_a_ddp_token_task_cell_scores_every_sentence_once(compose_cfg, data_dir, tmp_path):
    """CoNLL-2003 under DDP: word predictions gathered from both ranks (megabytes of record).

    The token loss is a mean over each rank's words, so DDP and one process weight words
    slightly differently: scores agree closely, not to rounding.
    """
    cell = (
        "task=conll2003",
        "data.train_size=64",
        "trainer.max_epochs=1",
        *(
            o
            for o in CELL
            if o.split("=")[0] not in ("task", "data.train_size", "trainer.max_epochs")
        ),
    )
    ddp_runs = tmp_path / "ddp"
    _bench(
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "data.batch_size=32",
        f"runs_dir={ddp_runs}",
        tmp=tmp_path,
        cell=cell,
    )
    run_dir = ddp_runs / "conll2003/tiny_bert/linear/frozen/seed=1"
    ddp = json.loads((run_dir / "result.json").read_text())
    single = run(
        compose_cfg(*cell, "data.batch_size=64", f"cache.dir={tmp_path}/cache"), tmp_path / "single"
    )
    assert ddp["status"] == single["status"] == "ok"
    assert ddp["best"]["metrics"]["dev"]["f1"] == pytest.approx(
        single["best"]["metrics"]["dev"]["f1"], abs=2e-3
    )
    sentences = (run_dir / "predictions_dev.txt").read_text().strip().split("\n\n")
    single_sentences = (tmp_path / "single" / "predictions_dev.txt").read_text()
    assert len(sentences) == len(single_sentences.strip().split("\n\n"))
