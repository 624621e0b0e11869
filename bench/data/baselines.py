"""The best constant: the highest score a single constant prediction reaches on a split.

A run that scores at or below it has learnt nothing a constant could not do (DESIGN.md,
evaluation protocol 3). Each metric is maximised on its own, over every constant:

- accuracy: the majority share of the split's labels (on a token task, of its tags);
- binary F1 (positive class = label id 1, as the task's metric): all-positive gives
  ``2p / (1 + p)`` for a positive share ``p``, any other constant 0;
- Matthews correlation: 0 for every constant (scikit-learn's and our metric's value);
- Pearson and Spearman: a constant has no correlation (the coefficient is undefined,
  0 / 0); it is *defined as 0* here, so "at or below the baseline" means "not positively
  correlated";
- entity precision, recall, F1 and per-type F1 (seqeval, strict IOB2, as
  :mod:`bench.data.ner_metrics` scores them): ``O`` and every ``I-X`` predict no entity
  (strict IOB2 starts an entity only at ``B-X``), while ``B-X`` on every word predicts
  each word as a one-word ``X`` entity and so finds every one-word gold ``X`` entity.
  With ``s`` such entities, ``N`` words and ``G`` gold entities: precision ``s / N``,
  recall ``s / G``, F1 ``2s / (N + G)`` (``G`` of type ``X`` alone for ``f1_X``). On
  CoNLL-2003 this is small but not 0.

Counts only, no scoring library and no torch: the tests check every value against
scikit-learn and seqeval run on every constant.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from bench.data.tasks import Task, TaskSpec, TokenTaskSpec
from bench.errors import ConfigError

#: The positive class of GLUE's binary F1 (MRPC ``equivalent``, QQP ``duplicate``).
POSITIVE_LABEL = 1
#: What the description says for a metric every constant scores the same on.
ANY_CONSTANT = "any constant"
NO_CORRELATION = "any constant (a constant has no correlation: defined as 0)"


class BestConstant(TypedDict):
    """The best constant of one split.

    Attributes:
        metrics: Metric name -> the best value a constant prediction reaches.
        prediction: Metric name -> the constant(s) reaching it (``all 'positive'``,
            ``all 'B-LOC'``, ``any constant``).
    """

    metrics: dict[str, float]
    prediction: dict[str, str]


def best_constant(spec: Task, labels: Sequence[Any]) -> BestConstant:
    """The best score any single constant prediction reaches, metric by metric.

    Args:
        spec: The task (:class:`TaskSpec` or :class:`TokenTaskSpec`).
        labels: Gold labels of the split as the data modules hold them: class ids (GLUE
            classification), float scores (STS-B), or one list of tag ids per sentence
            (CoNLL-2003).

    Returns:
        ``{"metrics": {metric: value}, "prediction": {metric: description}}`` for every
        metric in ``spec.metrics``; plain floats and strings (JSON-safe).

    Raises:
        ValueError: If there are no labels, or a label is not a valid id of the task.
        ConfigError: If the task has a metric this baseline does not know.
    """
    if isinstance(spec, TokenTaskSpec):
        per_constant = _token_scores(spec, labels)
    else:
        per_constant = _sequence_scores(spec, labels)
    result: BestConstant = {"metrics": {}, "prediction": {}}
    for metric in spec.metrics:
        if metric not in per_constant:
            raise ConfigError(
                f"task {spec.name!r}: no best-constant rule for metric {metric!r}; "
                f"known here: {', '.join(per_constant)}"
            )
        value, description = _best(per_constant[metric])
        result["metrics"][metric] = value
        result["prediction"][metric] = description
    return result


def _best(scores: dict[str, float] | tuple[float, str]) -> tuple[float, str]:
    """The best value of one metric over the constants, and which constants reach it."""
    if isinstance(scores, tuple):  # a fixed value with its own description
        return scores
    best = max(scores.values())
    winners = [name for name, value in scores.items() if value == best]
    if len(winners) == len(scores) and len(scores) > 1:
        return best, ANY_CONSTANT
    return best, " or ".join(f"all {name!r}" for name in winners)


def _class_id(label: Any, num_labels: int, where: str) -> int:
    if isinstance(label, bool) or int(label) != label or not 0 <= int(label) < num_labels:
        raise ValueError(f"{where}: label {label!r} is not a class id in 0..{num_labels - 1}")
    return int(label)


def _sequence_scores(
    spec: TaskSpec, labels: Sequence[Any]
) -> dict[str, dict[str, float] | tuple[float, str]]:
    n = len(labels)
    if n == 0:
        raise ValueError(f"task {spec.name!r}: no labels to compute a best constant on")
    if spec.is_regression:
        return {"pearson": (0.0, NO_CORRELATION), "spearman": (0.0, NO_CORRELATION)}
    counts = Counter(_class_id(y, spec.num_labels, f"task {spec.name!r}") for y in labels)
    names = spec.label_names
    positives = counts[POSITIVE_LABEL]
    scores: dict[str, dict[str, float] | tuple[float, str]] = {
        "accuracy": {names[c]: counts[c] / n for c in range(spec.num_labels)},
        "mcc": dict.fromkeys(names, 0.0),
    }
    if spec.num_labels == 2:  # GLUE's F1 is binary F1 of the positive class
        # All-positive: tp = positives, fp = n - positives, fn = 0; any other constant: tp = 0.
        scores["f1"] = {
            names[c]: 2 * positives / (n + positives) if c == POSITIVE_LABEL else 0.0
            for c in range(2)
        }
    return scores


def _strict_iob2_entities(
    sentences: Iterable[Sequence[int]], names: Sequence[str]
) -> tuple[Counter[str], Counter[str]]:
    """Gold entities per type (strict IOB2): all of them, and those one word long."""
    entities: Counter[str] = Counter()
    single: Counter[str] = Counter()
    for tags in sentences:
        i = 0
        while i < len(tags):
            tag = names[tags[i]]
            if not tag.startswith("B-"):
                i += 1  # O, or a stray I-X: strict IOB2 starts no entity there
                continue
            kind, end = tag[2:], i + 1
            while end < len(tags) and names[tags[end]] == f"I-{kind}":
                end += 1
            entities[kind] += 1
            single[kind] += int(end - i == 1)
            i = end
    return entities, single


def _token_scores(
    spec: TokenTaskSpec, labels: Sequence[Sequence[Any]]
) -> dict[str, dict[str, float] | tuple[float, str]]:
    where = f"task {spec.name!r}"
    sentences = [[_class_id(t, spec.num_labels, where) for t in tags] for tags in labels]
    tag_counts = Counter(t for tags in sentences for t in tags)
    n_words = sum(tag_counts.values())
    if n_words == 0:
        raise ValueError(f"{where}: no labelled words to compute a best constant on")
    names = spec.label_names
    entities, single = _strict_iob2_entities(sentences, names)
    n_entities = sum(entities.values())

    def found(tag: str, kind: str | None = None) -> int:
        """One-word gold entities (of ``kind``, or of any type) the constant ``tag`` finds."""
        if not tag.startswith("B-") or kind not in (None, tag[2:]):
            return 0
        return single[tag[2:]]

    def ratio(num: float, den: float) -> float:
        return num / den if den else 0.0  # seqeval's zero_division=0, as the metric

    scores: dict[str, dict[str, float] | tuple[float, str]] = {
        "accuracy": {tag: tag_counts[i] / n_words for i, tag in enumerate(names)},
        "precision": {tag: ratio(found(tag), n_words) for tag in names},
        "recall": {tag: ratio(found(tag), n_entities) for tag in names},
        "f1": {tag: ratio(2 * found(tag), n_words + n_entities) for tag in names},
    }
    for kind in spec.entity_types:
        scores[f"f1_{kind}"] = {
            tag: ratio(2 * found(tag, kind), n_words + entities[kind]) for tag in names
        }
    return scores
