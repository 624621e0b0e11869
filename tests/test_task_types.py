"""Task types: sequence and token tasks differ only through their task type."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from bench.data.sequence_datamodule import GlueDataModule
from bench.data.tasks import get_task
from bench.data.token_datamodule import TokenDataModule
from bench.errors import ConfigError
from bench.model.heads import SequenceHead, TokenHead
from bench.model.heads.base import StatesHead
from bench.model.task_types import task_type

BILSTM = {"name": "bilstm", "layers": [-1], "lstm_hidden": 8, "dropout": 0.0}


def test_each_kind_brings_its_data_module_and_head_family():
    sst2, conll = task_type(get_task("sst2")), task_type(get_task("conll2003"))
    assert sst2.datamodule_class is GlueDataModule
    assert conll.datamodule_class is TokenDataModule
    seq_head = sst2.build_head({**BILSTM, "pool": "final"}, hidden_size=16, num_layers=2)
    tok_head = conll.build_head({**BILSTM, "pool": None}, hidden_size=16, num_layers=2)
    assert isinstance(seq_head, SequenceHead) and isinstance(tok_head, TokenHead)
    assert isinstance(seq_head, StatesHead) and isinstance(tok_head, StatesHead)
    states = [torch.randn(3, 5, 16) for _ in range(3)]
    mask = torch.ones(3, 5, dtype=torch.long)
    assert seq_head(states, mask).shape == (3, 2)
    assert tok_head(states, mask).shape == (3, 5, len(get_task("conll2003").label_names))


def test_sequence_evaluation_scores_and_collects_a_split():
    kind = task_type(get_task("sst2"))
    evaluation = kind.evaluation(["dev"])
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [0.0, 2.0]])
    batch = {"labels": torch.tensor([0, 1, 0]), "idx": torch.tensor([7, 8, 9])}
    assert kind.loss(torch.nn.Identity(), logits, batch) > 0
    evaluation.update("dev", torch.nn.Identity(), logits, batch)
    assert evaluation.scores("dev", world_size=1)["accuracy"] == pytest.approx(2 / 3)
    kept = evaluation.collect("dev")
    assert {k: kept[k] for k in ("idx", "label", "pred")} == {
        "idx": [7, 8, 9],
        "label": [0, 1, 0],
        "pred": [0, 1, 1],
    }
    high = math.exp(2) / (math.exp(2) + 1)  # classification also keeps softmax probabilities
    expected = [[high, 1 - high], [1 - high, high], [1 - high, high]]
    assert [pytest.approx(row, abs=1e-15) for row in expected] == kept["prob"]
    evaluation.clear()
    assert evaluation.collect("dev") == {"idx": [], "label": [], "pred": []}


def test_an_unknown_kind_is_refused_with_the_valid_ones():
    spec = dataclasses.replace(get_task("sst2"), kind="span")
    with pytest.raises(ConfigError, match="kind='span'; valid kinds: sequence, token"):
        task_type(spec)
