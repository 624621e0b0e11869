"""Entity-level NER scores with seqeval (strict IOB2), and the all-``O`` baseline.

The main numbers are seqeval's strict IOB2 mode: an entity is a ``B-X`` followed by
``I-X`` tags, and an ``I-X`` that does not continue a ``B-X``/``I-X`` starts no entity.
``f1_conlleval`` adds seqeval's default mode, which chunks like the Perl ``conlleval``
script (a stray ``I-X`` starts an entity). The two agree whenever the predictions are
valid IOB2 (always, with a CRF), which is what the BERT paper's numbers assume.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from seqeval.metrics import classification_report, f1_score
from seqeval.scheme import IOB2

from bench.data.tasks import TokenTaskSpec

Tags = Sequence[Sequence[str]]


def entity_scores(gold: Tags, pred: Tags, entity_types: Sequence[str]) -> dict[str, float | None]:
    """Entity-level micro precision, recall and F1 (strict IOB2) plus per-type scores.

    Args:
        gold: Gold tags per sentence (IOB2 names).
        pred: Predicted tags per sentence, the same lengths as ``gold``.
        entity_types: Types to report per type (``PER``, ``ORG``...).

    Returns:
        ``precision``, ``recall``, ``f1`` (fractions in [0, 1]; 0.0 when nothing is
        predicted or nothing is gold), ``f1_<TYPE>`` (None for a type absent from gold
        and predictions) and ``f1_conlleval``.

    Raises:
        ValueError: If a sentence's predicted length differs from its gold length.
    """
    gold_lists = [list(tags) for tags in gold]
    pred_lists = [list(tags) for tags in pred]
    for i, (g, p) in enumerate(zip(gold_lists, pred_lists, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(p)} predicted tags for {len(g)} words")
    report = classification_report(
        gold_lists, pred_lists, mode="strict", scheme=IOB2, output_dict=True, zero_division=0
    )
    micro = report["micro avg"]
    scores: dict[str, float | None] = {
        "precision": float(micro["precision"]),
        "recall": float(micro["recall"]),
        "f1": float(micro["f1-score"]),
    }
    for kind in entity_types:
        row = report.get(kind)
        scores[f"f1_{kind}"] = None if row is None else float(row["f1-score"])
    scores["f1_conlleval"] = float(f1_score(gold_lists, pred_lists, zero_division=0))
    return scores


def ids_to_tags(sentences: Sequence[Sequence[int]], label_names: Sequence[str]) -> list[list[str]]:
    """Map tag ids to names, sentence by sentence."""
    return [[label_names[i] for i in sentence] for sentence in sentences]


def score_ids(
    spec: TokenTaskSpec, gold: Sequence[Sequence[int]], pred: Sequence[Sequence[int]]
) -> dict[str, float | None]:
    """Score tag-id sequences of a token task (see :func:`entity_scores`)."""
    names = spec.label_names
    return entity_scores(ids_to_tags(gold, names), ids_to_tags(pred, names), spec.entity_types)


def majority_baseline(
    spec: TokenTaskSpec,
    train_labels: Sequence[Sequence[int]],
    dev_labels: Sequence[Sequence[int]],
) -> dict[str, Any]:
    """Score the constant tagger: the most frequent training tag on every word.

    For any NER corpus that tag is ``O``, which finds no entity: entity F1 is 0.0. It is
    computed here, not assumed.

    Args:
        spec: The task.
        train_labels: Tag ids per training sentence (the training data actually used).
        dev_labels: Gold tag ids per evaluation sentence.

    Returns:
        ``{"strategy": "majority", "prediction": <tag name>, "metrics": {...}}``.
    """
    counts = Counter(tag for sentence in train_labels for tag in sentence)
    majority = counts.most_common(1)[0][0]
    constant = [[majority] * len(sentence) for sentence in dev_labels]
    return {
        "strategy": "majority",
        "prediction": spec.label_names[majority],
        "metrics": score_ids(spec, dev_labels, constant),
    }
