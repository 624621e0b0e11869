"""NER scores: seqeval strict IOB2 against an independent conlleval port, and the baseline."""

from __future__ import annotations

import random

import pytest
from conlleval import evaluate as conlleval_evaluate

from bench.data.conll import conll_file, is_valid_iob2, read_conll
from bench.data.ner_metrics import entity_scores, ids_to_tags, majority_baseline
from bench.data.tasks import get_task

SPEC = get_task("conll2003")
TYPES = SPEC.entity_types


def conlleval(gold, pred):
    """Score with the `conlleval` PyPI port (a line-by-line port of conlleval.pl)."""
    lines = []
    for g_sent, p_sent in zip(gold, pred, strict=True):
        lines += [f"w {g} {p}" for g, p in zip(g_sent, p_sent, strict=True)] + [""]
    out = conlleval_evaluate(lines)
    overall = out["overall"]["chunks"]
    per_type = {t: v["evals"]["f1"] for t, v in out["slots"]["chunks"].items()}
    return overall["evals"], overall["stats"], per_type


def corrupt(tags, rng, valid_only):
    """Perturb gold tags the way a tagger errs: wrong types, split/merged/missed entities."""
    out = list(tags)
    for i in range(len(out)):
        if rng.random() < 0.15:
            out[i] = rng.choice(SPEC.label_names)
    if valid_only:  # repair into valid IOB2: a stray I-X becomes B-X
        prev = "O"
        for i, tag in enumerate(out):
            if tag.startswith("I-") and prev[2:] != tag[2:]:
                out[i] = "B-" + tag[2:]
            prev = out[i]
    return out


@pytest.fixture(scope="module")
def dev_gold(data_dir):
    cols = read_conll(conll_file(data_dir, SPEC, "dev.txt"), SPEC)
    return ids_to_tags(cols["label"], SPEC.label_names)


def test_strict_scores_equal_conlleval_on_valid_iob2_predictions(dev_gold):
    rng = random.Random(0)
    pred = [corrupt(tags, rng, valid_only=True) for tags in dev_gold]
    assert all(is_valid_iob2(p) for p in pred)
    ours = entity_scores(dev_gold, pred, TYPES)
    theirs, stats, per_type = conlleval(dev_gold, pred)
    assert stats["gold"] == 5942  # entities in CoNLL-2003 dev (conlleval's count)
    assert 0.3 < ours["f1"] < 0.95
    assert ours["precision"] == pytest.approx(theirs["prec"], abs=1e-12)
    assert ours["recall"] == pytest.approx(theirs["rec"], abs=1e-12)
    assert ours["f1"] == pytest.approx(theirs["f1"], abs=1e-12)
    assert ours["f1_conlleval"] == pytest.approx(theirs["f1"], abs=1e-12)
    for kind in TYPES:
        assert ours[f"f1_{kind}"] == pytest.approx(per_type[kind], abs=1e-12)


def test_invalid_predictions_strict_mode_drops_stray_inside_tags(dev_gold):
    """conlleval starts an entity at a stray I-X; strict IOB2 does not. f1_conlleval keeps
    conlleval's reading so both are on record."""
    rng = random.Random(1)
    pred = [corrupt(tags, rng, valid_only=False) for tags in dev_gold]
    assert not all(is_valid_iob2(p) for p in pred)
    ours = entity_scores(dev_gold, pred, TYPES)
    theirs, _, _ = conlleval(dev_gold, pred)
    assert ours["f1_conlleval"] == pytest.approx(theirs["f1"], abs=1e-12)
    assert ours["f1"] != pytest.approx(theirs["f1"], abs=1e-6)
    hand = entity_scores([["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]], TYPES)
    assert hand["f1"] == 0.0 and hand["f1_conlleval"] == 1.0


def test_perfect_and_empty_predictions():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-MISC"]]
    perfect = entity_scores(gold, gold, TYPES)
    assert perfect["f1"] == perfect["precision"] == perfect["recall"] == 1.0
    assert perfect["f1_ORG"] is None  # no ORG in gold or predictions
    nothing = entity_scores(gold, [["O"] * 4, ["O"] * 2], TYPES)
    assert nothing["f1"] == nothing["precision"] == nothing["recall"] == 0.0
    with pytest.raises(ValueError, match="sentence 1"):
        entity_scores(gold, [["O"] * 4, ["O"]], TYPES)


def test_majority_baseline_is_all_o_and_scores_zero(dev_gold, data_dir):
    train = read_conll(conll_file(data_dir, SPEC, "train.txt"), SPEC)["label"]
    dev = [[SPEC.label_names.index(t) for t in tags] for tags in dev_gold]
    base = majority_baseline(SPEC, train, dev)
    assert base["prediction"] == "O" and base["strategy"] == "majority"
    assert base["metrics"]["f1"] == 0.0 and base["metrics"]["recall"] == 0.0
