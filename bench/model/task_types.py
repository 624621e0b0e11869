"""Task types: what differs between sequence tasks (GLUE) and token tasks (CoNLL-2003).

A task type owns every difference the training side sees, so the ``LightningModule`` and
the run path never ask which kind of task they hold:

- the data module class (collation: padded sentences vs. words with ``word_pos``),
- the head family (:func:`~bench.model.heads.build_head` vs.
  :func:`~bench.model.heads.build_token_head`) and the loss,
- the evaluation: torchmetrics in the loop vs. one decoded tag per word scored with seqeval
  (:class:`Evaluation`: keep predictions, score a split, gather them under DDP),
- the majority-class baseline (shown beside the results; a run's failure threshold is the
  best constant prediction, :mod:`bench.data.baselines`) and the prediction files' format.

The feature cache needs nothing per type: both kinds store unpadded token states.

The torch-free half of a task (its :class:`~bench.data.tasks.TaskSpec`, metric functions)
lives in :mod:`bench.data`; this module adds the half that needs torch and the heads, and
:func:`task_type` is the one place that maps a spec's ``kind`` to it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torchmetrics import MetricCollection

from bench.data import ner_metrics
from bench.data.sequence_datamodule import GlueDataModule, SplitLoaders, write_predictions
from bench.data.tasks import Task, TaskSpec, TokenTaskSpec
from bench.data.token_datamodule import TokenDataModule, write_word_predictions
from bench.errors import ConfigError
from bench.model import metrics
from bench.model.heads import TokenHead, build_head, build_token_head
from bench.model.ranks import gather_rows

#: What a split's kept predictions look like in the result: ``idx``, ``label``, ``pred`` lists
#: (classification also ``prob``: the softmax of the logits per example, in class-id order).
Predictions = dict[str, list[Any]]


class Evaluation(nn.Module):
    """Keeps a validation epoch's predictions per split and scores them.

    A module so that in-loop metrics move to the model's device with it.
    """

    def __init__(self, dev_names: Sequence[str]) -> None:
        super().__init__()
        self.dev_names = list(dev_names)

    @abstractmethod
    def update(self, name: str, head: nn.Module, logits: Tensor, batch: dict[str, Tensor]) -> None:
        """Keep one validation batch's predictions for split ``name``."""

    @abstractmethod
    def scores(self, name: str, world_size: int) -> dict[str, float | None]:
        """The split's metrics over everything kept this epoch."""

    @abstractmethod
    def gather(self) -> None:
        """Under DDP: give every rank all ranks' predictions, each example once."""

    @abstractmethod
    def collect(self, name: str) -> Predictions:
        """The split's kept predictions as plain lists, sorted by ``idx`` where it matters."""

    @abstractmethod
    def clear(self) -> None:
        """Forget the epoch's predictions."""


class SequenceEvaluation(Evaluation):
    """One prediction per example, scored by torchmetrics in the loop (DDP-correct).

    Classification also keeps each example's class probabilities (softmax of the logits,
    computed in float64) for calibration; they change no metric.

    Args:
        spec: The task.
        dev_names: Names of the evaluation splits.
    """

    def __init__(self, spec: TaskSpec, dev_names: Sequence[str]) -> None:
        super().__init__(dev_names)
        self.spec = spec
        self.metrics = nn.ModuleDict({n: metrics.build_metrics(spec) for n in self.dev_names})
        self._outputs: dict[str, list[tuple[Tensor, Tensor, Tensor]]] = {}
        self._probs: dict[str, list[Tensor]] = {}  # classification: (B, C) float64 per batch

    def _metrics(self, name: str) -> MetricCollection:
        return cast(MetricCollection, self.metrics[name])

    def update(self, name: str, head: nn.Module, logits: Tensor, batch: dict[str, Tensor]) -> None:
        """Update the split's metrics and keep ``(idx, label, pred)`` (and probabilities)."""
        preds = logits.squeeze(-1) if self.spec.is_regression else logits.argmax(dim=-1)
        self._metrics(name).update(preds, batch["labels"])
        self._outputs.setdefault(name, []).append(
            (batch["idx"].cpu(), batch["labels"].cpu(), preds.detach().cpu())
        )
        if not self.spec.is_regression:
            probs = torch.softmax(logits.detach().to(torch.float64), dim=-1)  # (B, C)
            self._probs.setdefault(name, []).append(probs.cpu())

    def scores(self, name: str, world_size: int) -> dict[str, float | None]:
        """The split's metrics; under DDP computed once over the gathered split."""
        if world_size > 1:  # score the gathered split, each example once
            self._metrics(name).reset()  # its synced state counts the sampler's padding twice
            scores = metrics.build_metrics(self.spec).to("cpu")
            for metric in scores.values():
                metric.sync_on_compute = False  # every rank already holds the whole split
            _, labels, preds = self._outputs[name][0]
            scores.update(preds, labels)
            return {k: metrics.finite_or_none(v) for k, v in scores.compute().items()}
        values = {k: metrics.finite_or_none(v) for k, v in self._metrics(name).compute().items()}
        self._metrics(name).reset()
        return values

    def gather(self) -> None:
        """Lightning's ``DistributedSampler`` pads shards with repeats; ``idx`` tells them apart."""
        for name in self.dev_names:
            local = self.collect(name)  # this rank's idx, label, pred (and prob) lists
            probs = local.get("prob", [None] * len(local["idx"]))
            rows = gather_rows(
                list(zip(local["idx"], local["label"], local["pred"], probs, strict=True)),
                key=lambda r: r[0],
            )
            dtype = torch.float32 if self.spec.is_regression else torch.long
            self._outputs[name] = [
                (
                    torch.tensor([r[0] for r in rows], dtype=torch.long),
                    torch.tensor([r[1] for r in rows], dtype=dtype),
                    torch.tensor([r[2] for r in rows], dtype=dtype),
                )
            ]
            if rows and rows[0][3] is not None:  # classification: probabilities travel along
                self._probs[name] = [torch.tensor([r[3] for r in rows], dtype=torch.float64)]

    def collect(self, name: str) -> Predictions:
        """``idx``, ``label``, ``pred`` per example, in the order seen; ``prob`` lists too."""
        parts = self._outputs.get(name, [])
        if not parts:
            return {"idx": [], "label": [], "pred": []}
        idx, labels, preds = (torch.cat(p).tolist() for p in zip(*parts, strict=True))
        kept: Predictions = {"idx": idx, "label": labels, "pred": preds}
        if self._probs.get(name):
            kept["prob"] = torch.cat(self._probs[name]).tolist()
        return kept

    def clear(self) -> None:
        """Forget the epoch's predictions (the metrics reset as they are computed)."""
        self._outputs.clear()
        self._probs.clear()


class TokenEvaluation(Evaluation):
    """One tag per word, decoded by the head and scored with seqeval at the epoch's end.

    Args:
        spec: The task.
        dev_names: Names of the evaluation splits.
    """

    def __init__(self, spec: TokenTaskSpec, dev_names: Sequence[str]) -> None:
        super().__init__(dev_names)
        self.spec = spec
        self._words: dict[str, list[tuple[int, list[int], list[int]]]] = {}

    def update(self, name: str, head: nn.Module, logits: Tensor, batch: dict[str, Tensor]) -> None:
        """Decode one tag per word; words without a sub-token (truncated) get ``O``."""
        assert isinstance(head, TokenHead)
        preds = head.decode(logits, batch["word_pos"])  # (B, W), -1 where absent
        preds = preds.masked_fill(preds < 0, self.spec.outside_label).cpu()
        gold = batch["word_labels"].cpu()  # (B, W), -100 on padding
        for row, idx in enumerate(batch["idx"].tolist()):
            n_words = int((gold[row] >= 0).sum())
            self._words.setdefault(name, []).append(
                (idx, gold[row, :n_words].tolist(), preds[row, :n_words].tolist())
            )

    def scores(self, name: str, world_size: int) -> dict[str, float | None]:
        """Entity-level seqeval scores of the kept sentences."""
        rows = self._words.get(name, [])
        gold, pred = [r[1] for r in rows], [r[2] for r in rows]
        return ner_metrics.score_ids(self.spec, gold, pred)

    def gather(self) -> None:
        """Every rank gets all ranks' sentences, each once (by ``idx``)."""
        for name in self.dev_names:
            self._words[name] = gather_rows(self._words.get(name, []), key=lambda r: r[0])

    def collect(self, name: str) -> Predictions:
        """Per sentence, sorted by ``idx``: gold and predicted tag ids per word."""
        rows = sorted(self._words.get(name, []))
        return {
            "idx": [r[0] for r in rows],
            "label": [r[1] for r in rows],
            "pred": [r[2] for r in rows],
        }

    def clear(self) -> None:
        """Forget the epoch's sentences."""
        self._words.clear()


class TaskType(ABC):
    """What a kind of task decides on the training side.

    Args:
        spec: The task.
    """

    #: The data module class that reads, encodes and collates this kind of task.
    datamodule_class: ClassVar[type[SplitLoaders]]

    def __init__(self, spec: Task) -> None:
        self.spec = spec

    def datamodule(self, tokenizer: Any, **kwargs: Any) -> SplitLoaders:
        """The task's data module.

        Args:
            tokenizer: A fast tokenizer.
            **kwargs: The other arguments of
                :class:`~bench.data.sequence_datamodule.SplitLoaders`.

        Returns:
            The data module (not set up yet).
        """
        return self.datamodule_class(self.spec, tokenizer, **kwargs)

    @abstractmethod
    def build_head(
        self,
        cfg: dict[str, Any],
        hidden_size: int,
        num_layers: int,
        summary: str = "first",
        pair: bool = False,
    ) -> nn.Module:
        """The head family's head for the ``head`` config (sizes, summary token: the encoder's).

        ``pair``: the task's pairs are encoded one sentence at a time (``pair_encoding=siamese``).
        """

    @abstractmethod
    def loss(self, head: nn.Module, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The training loss of a batch's logits."""

    @abstractmethod
    def evaluation(self, dev_names: Sequence[str]) -> Evaluation:
        """A fresh :class:`Evaluation` for the evaluation splits."""

    @abstractmethod
    def majority_baseline(
        self, train_labels: Sequence[Any], labels: Sequence[Any]
    ) -> dict[str, Any]:
        """Score the constant predictor fitted on the training labels on ``labels``."""

    @abstractmethod
    def write_predictions(
        self, run_dir: Path, predictions: dict[str, Predictions], datamodule: Any
    ) -> None:
        """Write the best epoch's predictions per split into ``run_dir`` (atomically)."""


class SequenceTaskType(TaskType):
    """GLUE: one label (or score) per sentence or pair."""

    datamodule_class = GlueDataModule
    spec: TaskSpec

    def build_head(
        self,
        cfg: dict[str, Any],
        hidden_size: int,
        num_layers: int,
        summary: str = "first",
        pair: bool = False,
    ) -> nn.Module:
        """A sequence head from :func:`~bench.model.heads.build_head`."""
        return build_head(cfg, hidden_size, num_layers, self.spec.num_labels, summary, pair)

    def loss(self, head: nn.Module, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """Mean squared error for regression (STS-B), else cross-entropy."""
        labels = batch["labels"]
        if self.spec.is_regression:
            return F.mse_loss(logits.squeeze(-1), labels.float())
        return F.cross_entropy(logits, labels)

    def stacked_loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The training losses of N heads' logits on one batch, at once.

        One cross-entropy over the flattened ``(N * B, C)`` logits (one mean squared error
        for regression), then each head's mean: each row's gradient is the one
        :meth:`loss` gives that head alone (bit for bit on CPU, tested), while the loss
        values can differ from :meth:`loss`'s in the last bits (another summation order).

        Args:
            logits: ``(N, B, C)``, one row per head.
            batch: The batch (its ``labels``).

        Returns:
            ``(N,)``: each head's mean loss over the batch.
        """
        labels = batch["labels"]
        n, b = logits.shape[:2]
        if self.spec.is_regression:
            target = labels.float().expand(n, b)
            return F.mse_loss(logits.squeeze(-1), target, reduction="none").mean(1)
        flat = F.cross_entropy(logits.reshape(n * b, -1), labels.repeat(n), reduction="none")
        return flat.view(n, b).mean(1)

    def evaluation(self, dev_names: Sequence[str]) -> SequenceEvaluation:
        """Torchmetrics per split."""
        return SequenceEvaluation(self.spec, dev_names)

    def majority_baseline(
        self, train_labels: Sequence[Any], labels: Sequence[Any]
    ) -> dict[str, Any]:
        """The most frequent training class (the mean score for regression)."""
        return metrics.majority_baseline(self.spec, train_labels, labels)

    def write_predictions(
        self, run_dir: Path, predictions: dict[str, Predictions], datamodule: Any
    ) -> None:
        """``predictions_<split>.csv``: ``idx,label,pred`` rows."""
        write_predictions(run_dir, predictions)


class TokenTaskType(TaskType):
    """CoNLL-2003: one IOB2 tag per word, scored at the entity level."""

    datamodule_class = TokenDataModule
    spec: TokenTaskSpec

    def build_head(
        self,
        cfg: dict[str, Any],
        hidden_size: int,
        num_layers: int,
        summary: str = "first",
        pair: bool = False,
    ) -> nn.Module:
        """A token head from :func:`~bench.model.heads.build_token_head` (no summary token).

        Raises:
            ConfigError: For ``pair``: a token task has no sentence pairs.
        """
        if pair:
            raise ConfigError(
                f"pair_encoding=siamese: task {self.spec.name!r} has no sentence pairs"
            )
        return build_token_head(cfg, hidden_size, num_layers, self.spec.label_names)

    def loss(self, head: nn.Module, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        """The head's per-word loss (cross-entropy or the CRF's negative log-likelihood)."""
        assert isinstance(head, TokenHead)
        return head.loss(logits, batch["word_pos"], batch["word_labels"])

    def evaluation(self, dev_names: Sequence[str]) -> TokenEvaluation:
        """Decoded words per split, scored with seqeval."""
        return TokenEvaluation(self.spec, dev_names)

    def majority_baseline(
        self, train_labels: Sequence[Any], labels: Sequence[Any]
    ) -> dict[str, Any]:
        """The most frequent training tag on every word."""
        return ner_metrics.majority_baseline(self.spec, train_labels, labels)

    def write_predictions(
        self, run_dir: Path, predictions: dict[str, Predictions], datamodule: Any
    ) -> None:
        """``predictions_<split>.txt``: ``word gold pred`` lines (conlleval input)."""
        write_word_predictions(run_dir, predictions, datamodule.dev_tokens, self.spec.label_names)


TASK_TYPES: dict[str, type[TaskType]] = {"sequence": SequenceTaskType, "token": TokenTaskType}


def task_type(spec: Task) -> TaskType:
    """The task type of a task spec (by its ``kind``).

    Raises:
        ConfigError: For a ``kind`` no task type handles.
    """
    try:
        cls = TASK_TYPES[spec.kind]
    except KeyError:
        raise ConfigError(
            f"task {spec.name!r} has kind={spec.kind!r}; valid kinds: {', '.join(TASK_TYPES)}"
        ) from None
    return cls(spec)
