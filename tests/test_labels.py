"""Derived labels: every committed cell's labels come out of the rules, and errors are clear."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.axes.freezing import STRATEGIES, freeze_label, freeze_rank
from bench.axes.heads import HEADS, head_label, head_order
from bench.axes.layers import describe_selection
from bench.errors import ConfigError

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: The labels the deleted option files conf/layerwise/* and conf/table7/* wrote by hand.
FILED_LABELS = {
    ("linear", (3,), "concat"): "linear-L3",
    ("linear", (12,), "concat"): "linear-L12",
    ("linear", (-4, -3, -2, -1), "mean"): "linear-last4_mean",
    ("linear", (-4, -3, -2, -1), "max"): "linear-last4_max",
    ("linear", (-4, -3, -2, -1), "concat"): "linear-last4_concat",
    ("bilstm", "concat_last4", "concat"): "bilstm-concat_last4",
    ("bilstm", "embeddings", "concat"): "bilstm-embeddings",
    ("bilstm", "last", "concat"): "bilstm-last",
}


def _committed_cells() -> list[dict]:
    cells = []
    for path in sorted(RESULTS.glob("*/cells.json")):
        cells.extend(json.loads(path.read_text()))
    return cells


def test_every_committed_head_label_follows_the_rule():
    cells = _committed_cells()
    assert cells, "no committed results to check"
    for cell in cells:
        head = cell["config"]["head"]
        if head["label"] == head["name"] and head.get("layers") == "last":
            continue  # Table 7's fine-tune row: its experiment names it `linear` explicitly
        derived = head_label(head["name"], head["layers"], head["combine"], head.get("init"))
        assert derived == head["label"] == cell["cell"]["head_label"], cell["cell"]


def test_every_committed_freeze_label_follows_the_rule():
    for cell in _committed_cells():
        freeze = cell["config"]["freeze"]
        assert freeze_label(freeze["name"], freeze.get("k")) == freeze["label"], cell["cell"]


@pytest.mark.parametrize(("key", "label"), list(FILED_LABELS.items()))
def test_the_labels_the_deleted_option_files_wrote_by_hand(key, label):
    name, layers, combine = key
    spec = list(layers) if isinstance(layers, tuple) else layers
    assert head_label(name, spec, combine) == label


def test_a_head_at_its_own_default_layers_is_labelled_by_its_name_only():
    assert head_label("linear", [-1], "concat") == "linear"
    assert head_label("last4_concat", [-4, -3, -2, -1], "concat") == "last4_concat"
    assert head_label("pooler", [-1], "concat", "random") == "pooler-random"
    assert head_label("pooler", [0], "concat", "pretrained") == "pooler-pretrained-L0"
    assert describe_selection([0, 6], "mean") == "L0+6_mean"


def test_freeze_order_is_the_registry_order_with_top_k_by_k():
    labels = ["full", "top12", "reinit2", "frozen", "top2", "lora", "zzz", "llrd"]
    assert sorted(labels, key=freeze_rank) == [
        "frozen",
        "lora",
        "top2",
        "top12",
        "llrd",
        "full",
        "reinit2",
        "zzz",
    ]


def test_head_order_lists_each_preset_then_its_variants():
    assert head_order() == [
        "linear",
        "pooler",
        "pooler-random",
        "pooler-pretrained",
        "last4_concat",
        "bilstm",
        "mean_linear",
    ]


@pytest.mark.parametrize(
    ("call", "valid"),
    [
        (lambda: head_label("mlp", [-1], "concat"), list(HEADS)),
        (lambda: freeze_label("half"), list(STRATEGIES)),
    ],
)
def test_unknown_names_are_refused_with_the_valid_choices(call, valid):
    with pytest.raises(ConfigError) as err:
        call()
    assert all(name in str(err.value) for name in valid)
