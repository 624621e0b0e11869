"""Task specifications: fields, labels, metrics and file layouts of GLUE and CoNLL-2003.

A :class:`TaskSpec` is pure data. It says where a task's examples live on the Hub
(``nyu-mll/glue``) and in GLUE's download layout (``<dir>/glue/<TASK>/*.tsv``), which
columns hold the texts and the label, how labels are named (labels are always mapped
by *name*, never by position), and which metrics GLUE reports for it.

A :class:`TokenTaskSpec` does the same for token classification (CoNLL-2003 NER): one
label per word, scored at the entity level. Both carry ``kind`` (``sequence`` or
``token``), which picks the data module, the head family and the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.errors import ConfigError

GLUE_HUB_ID = "nyu-mll/glue"


@dataclass(frozen=True)
class SplitSource:
    """Where one evaluation or training split comes from.

    Attributes:
        hub_split: Split name in the Hugging Face dataset (``train``, ``validation``...).
        filename: File name inside ``<dir>/glue/<TASK>/`` in GLUE's download layout.
    """

    hub_split: str
    filename: str


@dataclass(frozen=True)
class TaskSpec:
    """Everything headbench needs to know about one sequence-level task.

    Attributes:
        name: Short task name, equal to the Hydra option name (``sst2``).
        glue_dir: Folder name in GLUE's download layout (``SST-2``).
        hub_config: Configuration name of ``nyu-mll/glue``.
        text_fields: One (single sentence) or two (pair) column names, in Hub naming.
        tsv_columns: For each Hub column name, the column name in the TSV header, or an
            integer position for header-less files (CoLA).
        tsv_label_column: The label column in the TSV (name, or position).
        has_header: Whether the TSV files start with a header line.
        label_names: Label names in the Hub's id order; empty for regression.
        tsv_label_map: TSV label string -> label name, where the TSV does not hold names.
        metrics: GLUE's official metrics for the task, in reporting order.
        main_metric: The metric that selects the best epoch.
        train: Source of the training split.
        dev: Evaluation splits by headbench name (``dev``; MNLI adds ``dev_mismatched``).
    """

    name: str
    glue_dir: str
    hub_config: str
    text_fields: tuple[str, ...]
    tsv_columns: dict[str, str | int]
    tsv_label_column: str | int
    has_header: bool
    label_names: tuple[str, ...]
    metrics: tuple[str, ...]
    main_metric: str
    train: SplitSource = SplitSource("train", "train.tsv")
    dev: dict[str, SplitSource] = field(
        default_factory=lambda: {"dev": SplitSource("validation", "dev.tsv")}
    )
    tsv_label_map: dict[str, str] = field(default_factory=dict)
    kind: str = "sequence"

    @property
    def is_regression(self) -> bool:
        """True for STS-B-style tasks with one real-valued output."""
        return not self.label_names

    @property
    def num_labels(self) -> int:
        """Number of outputs of the classifier (1 for regression)."""
        return 1 if self.is_regression else len(self.label_names)


def _map01(zero: str, one: str) -> dict[str, str]:
    return {"0": zero, "1": one}


TASKS: dict[str, TaskSpec] = {
    "cola": TaskSpec(
        name="cola",
        glue_dir="CoLA",
        hub_config="cola",
        text_fields=("sentence",),
        tsv_columns={"sentence": 3},
        tsv_label_column=1,
        has_header=False,
        label_names=("unacceptable", "acceptable"),
        tsv_label_map=_map01("unacceptable", "acceptable"),
        metrics=("mcc", "accuracy"),
        main_metric="mcc",
    ),
    "sst2": TaskSpec(
        name="sst2",
        glue_dir="SST-2",
        hub_config="sst2",
        text_fields=("sentence",),
        tsv_columns={"sentence": "sentence"},
        tsv_label_column="label",
        has_header=True,
        label_names=("negative", "positive"),
        tsv_label_map=_map01("negative", "positive"),
        metrics=("accuracy",),
        main_metric="accuracy",
    ),
    "mrpc": TaskSpec(
        name="mrpc",
        glue_dir="MRPC",
        hub_config="mrpc",
        text_fields=("sentence1", "sentence2"),
        tsv_columns={"sentence1": "#1 String", "sentence2": "#2 String"},
        tsv_label_column="Quality",
        has_header=True,
        label_names=("not_equivalent", "equivalent"),
        tsv_label_map=_map01("not_equivalent", "equivalent"),
        metrics=("f1", "accuracy"),
        main_metric="f1",
    ),
    "qqp": TaskSpec(
        name="qqp",
        glue_dir="QQP",
        hub_config="qqp",
        text_fields=("question1", "question2"),
        tsv_columns={"question1": "question1", "question2": "question2"},
        tsv_label_column="is_duplicate",
        has_header=True,
        label_names=("not_duplicate", "duplicate"),
        tsv_label_map=_map01("not_duplicate", "duplicate"),
        metrics=("f1", "accuracy"),
        main_metric="f1",
    ),
    "stsb": TaskSpec(
        name="stsb",
        glue_dir="STS-B",
        hub_config="stsb",
        text_fields=("sentence1", "sentence2"),
        tsv_columns={"sentence1": "sentence1", "sentence2": "sentence2"},
        tsv_label_column="score",
        has_header=True,
        label_names=(),
        metrics=("pearson", "spearman"),
        main_metric="pearson",
    ),
    "rte": TaskSpec(
        name="rte",
        glue_dir="RTE",
        hub_config="rte",
        text_fields=("sentence1", "sentence2"),
        tsv_columns={"sentence1": "sentence1", "sentence2": "sentence2"},
        tsv_label_column="label",
        has_header=True,
        label_names=("entailment", "not_entailment"),
        metrics=("accuracy",),
        main_metric="accuracy",
    ),
    "wnli": TaskSpec(
        name="wnli",
        glue_dir="WNLI",
        hub_config="wnli",
        text_fields=("sentence1", "sentence2"),
        tsv_columns={"sentence1": "sentence1", "sentence2": "sentence2"},
        tsv_label_column="label",
        has_header=True,
        label_names=("not_entailment", "entailment"),
        tsv_label_map=_map01("not_entailment", "entailment"),
        metrics=("accuracy",),
        main_metric="accuracy",
    ),
    "qnli": TaskSpec(
        name="qnli",
        glue_dir="QNLI",
        hub_config="qnli",
        text_fields=("question", "sentence"),
        tsv_columns={"question": "question", "sentence": "sentence"},
        tsv_label_column="label",
        has_header=True,
        label_names=("entailment", "not_entailment"),
        metrics=("accuracy",),
        main_metric="accuracy",
    ),
    "mnli": TaskSpec(
        name="mnli",
        glue_dir="MNLI",
        hub_config="mnli",
        text_fields=("premise", "hypothesis"),
        tsv_columns={"premise": "sentence1", "hypothesis": "sentence2"},
        tsv_label_column="gold_label",
        has_header=True,
        label_names=("entailment", "neutral", "contradiction"),
        metrics=("accuracy",),
        main_metric="accuracy",
        dev={
            "dev": SplitSource("validation_matched", "dev_matched.tsv"),
            "dev_mismatched": SplitSource("validation_mismatched", "dev_mismatched.tsv"),
        },
    ),
}


@dataclass(frozen=True)
class TokenTaskSpec:
    """Everything headbench needs to know about one token-classification task.

    Attributes:
        name: Short task name, equal to the Hydra option name (``conll2003``).
        hub_id: Hugging Face dataset id.
        hub_revision: Dataset revision (the Parquet conversion: script datasets fail on
            ``datasets>=4``).
        hub_tags_column: Column of the per-word tag ids (a sequence of ``ClassLabel``).
        local_dir: Folder name under the data directory (``<dir>/conll2003/``).
        label_names: Tag names (IOB2), ``O`` first; tags are mapped by name.
        entity_types: Entity types, in reporting order (per-type F1 keys).
        metrics: Metric names reported per split.
        main_metric: The metric that selects the best epoch (on ``dev`` only).
        train: Source of the training split.
        dev: Evaluation splits by headbench name; the first selects the best epoch.
    """

    name: str
    hub_id: str
    hub_revision: str
    hub_tags_column: str
    local_dir: str
    label_names: tuple[str, ...]
    entity_types: tuple[str, ...]
    metrics: tuple[str, ...]
    main_metric: str
    train: SplitSource
    dev: dict[str, SplitSource]
    kind: str = "token"
    is_regression: bool = False

    @property
    def num_labels(self) -> int:
        """Number of tags C."""
        return len(self.label_names)

    @property
    def outside_label(self) -> int:
        """Id of the ``O`` tag (the majority class of any NER corpus)."""
        return self.label_names.index("O")


Task = TaskSpec | TokenTaskSpec

_CONLL_TYPES = ("PER", "ORG", "LOC", "MISC")
TOKEN_TASKS: dict[str, TokenTaskSpec] = {
    "conll2003": TokenTaskSpec(
        name="conll2003",
        hub_id="eriktks/conll2003",
        hub_revision="refs/convert/parquet",
        hub_tags_column="ner_tags",
        local_dir="conll2003",
        # The Hub's id order (O, B-PER, I-PER, B-ORG, ...); local files map by name too.
        label_names=("O", *(f"{p}-{t}" for t in _CONLL_TYPES for p in ("B", "I"))),
        entity_types=_CONLL_TYPES,
        metrics=("precision", "recall", "f1", *(f"f1_{t}" for t in _CONLL_TYPES)),
        main_metric="f1",
        train=SplitSource("train", "train.txt"),
        dev={"dev": SplitSource("validation", "dev.txt"), "test": SplitSource("test", "test.txt")},
    ),
}
ALL_TASKS: dict[str, Task] = {**TASKS, **TOKEN_TASKS}


def validate(name: object) -> Task:
    """The registered task called ``name`` (the task registry's one name check).

    Args:
        name: ``task.name``, e.g. ``sst2``.

    Returns:
        The task's spec.

    Raises:
        ConfigError: If the task is unknown; the message lists the valid choices.
    """
    if not isinstance(name, str) or name not in ALL_TASKS:
        raise ConfigError(
            f"unknown task {name!r} (task.name); valid choices: {', '.join(sorted(ALL_TASKS))}"
        )
    return ALL_TASKS[name]


def get_task(name: str) -> Task:
    """Return the spec of a task by name (:func:`validate` for lookups that expect KeyError).

    Args:
        name: Task name, e.g. ``sst2``.

    Returns:
        The task's :class:`TaskSpec`.

    Raises:
        KeyError: If the task is unknown; the message lists the valid names.
    """
    try:
        return validate(name)
    except ConfigError as err:
        raise KeyError(str(err)) from None
