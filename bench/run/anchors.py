"""Converged anchors: what a linear read-out, or no training at all, reaches on a frozen encoder.

A ``head=anchor`` cell is fitted, not trained (DESIGN.md, evaluation protocol 3). It is
prepared as the frozen cell of the head whose features it reads
(:data:`bench.axes.heads.ANCHOR_FEATURES`: ``cls`` → ``linear``, ``mean`` → ``mean_linear``,
``last4`` → ``last4_concat``) by :func:`bench.run.train.prepare_cell`, so it reads the same
cached hidden states, training subset, selection slice and reporting splits, through that
head's own pooling (:meth:`~bench.model.heads.base.SequenceHead.features`). Then:

- ``cls``, ``mean``, ``last4``: the features are standardised (training statistics) and
  scikit-learn's ``LogisticRegression`` (``Ridge`` for regression, ``alpha = 1/C``) is fitted
  for every ``head.C``; the value with the best selection-slice score wins (ties: the
  stronger regularisation, the earlier in the sorted grid);
- ``cosine`` (pairs): each sentence is encoded alone (:func:`bench.cache.store.encode_split`),
  its last layer mean-pooled over its tokens; the prediction is the two embeddings' cosine
  (regression: scored as it is), or for two classes a threshold and direction chosen on the
  selection slice (ties: the lowest threshold, the cosine rising with class 1 first).

The cell then ends as a trained cell does (:func:`bench.run.train.conclude_cell`): the same
``result.json`` fields (``anchor`` records the fit), the same prediction files. It draws no
random number, so every seed of a setting gives the same value where the seeds share their
data (their standard error over seeds is 0); a seed is still its own cell, to pair with the
heads' runs of that seed.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from bench.axes.heads import ANCHOR_FEATURES
from bench.cache.keys import DTYPES
from bench.cache.resident import ResidentSplit
from bench.cache.serve import pad_states
from bench.cache.store import encode_split
from bench.data.selection import SELECTION_SPLIT
from bench.data.sequence_datamodule import load_split
from bench.data.tasks import TaskSpec
from bench.model import metrics

log = logging.getLogger(__name__)

#: Iterations ``LogisticRegression`` may take (lbfgs); a fit that needs more is recorded
#: ``converged: false`` and warned about.
MAX_ITER = 5000


def stand_in(cfg: DictConfig) -> DictConfig:
    """The cell's config with the head whose features the anchor reads (cosine: ``mean_linear``)."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    plain["head"] = {"name": ANCHOR_FEATURES[cfg.head.features] or "mean_linear"}
    return OmegaConf.create(plain)


def _examples(split: Any) -> Any:
    """A served split's cached split (a resident one wraps it)."""
    return split.source if isinstance(split, ResidentSplit) else split


@torch.no_grad()
def split_features(setup: Any, name: str) -> np.ndarray:
    """The pooled features the stand-in head reads for every example of a served split.

    Args:
        setup: The prepared stand-in cell (its module reads the cache).
        name: ``train`` or an evaluation split.

    Returns:
        (N, D) float64, in the split's order.
    """
    module, flat = setup.module, _examples(setup.served.splits[name]).flat
    assert module.feature_plan is not None, "an anchor reads the feature cache"
    step = int(setup.datamodule.eval_batch_size)
    out = []
    for start in range(0, len(flat), step):
        rows = range(start, min(start + step, len(flat)))
        states = pad_states([flat.example(i) for i in rows])  # (B, T, n, H)
        lengths = flat.index[start : rows.stop, 1]
        mask = (torch.arange(states.shape[1])[None, :] < lengths[:, None]).long()  # (B, T)
        hidden = module.feature_plan.hidden_states(module.encoder, states, mask)
        out.append(module.head.features(hidden, mask).double())
    return torch.cat(out).numpy()


def _column(setup: Any, name: str, key: str) -> list[Any]:
    examples = _examples(setup.served.splits[name]).examples
    return [examples[i][key] for i in range(len(examples))]


def estimator(spec: TaskSpec, c: float) -> Pipeline:
    """Standardisation, then ``LogisticRegression(C=c)`` (``Ridge(alpha=1/c)`` for regression)."""
    if spec.is_regression:
        return make_pipeline(StandardScaler(), Ridge(alpha=1.0 / c))
    return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=MAX_ITER))


def _columns(spec: TaskSpec, model: Pipeline, x: np.ndarray, idx: list[int], y: list[Any]) -> Any:
    """A split's predictions as a cell keeps them (``idx``, ``label``, ``pred``, ``prob``)."""
    if spec.is_regression:
        return {"idx": idx, "label": y, "pred": model.predict(x).tolist()}
    prob = model.predict_proba(x)
    return {"idx": idx, "label": y, "pred": prob.argmax(1).tolist(), "prob": prob.tolist()}


def fit_linear(setup: Any, grid: list[float]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fit the read-out for every C on train, keep the best on the selection split.

    Args:
        setup: The prepared stand-in cell.
        grid: The inverse regularisation strengths (``head.C``).

    Returns:
        The predictions per evaluation and reporting split, and the fit's record.
    """
    spec, dm = setup.spec, setup.datamodule
    select = dm.eval_names[0]  # the selection slice (or dev, selection=dev)
    x_train, y_train = split_features(setup, "train"), _column(setup, "train", "labels")
    x_select, y_select = split_features(setup, select), _column(setup, select, "labels")
    tried, best = [], None
    for c in sorted(float(c) for c in grid):
        model = estimator(spec, c)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            model.fit(x_train, y_train)
        converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        preds = _columns(spec, model, x_select, [], y_select)["pred"]
        score = metrics.score(spec, preds, y_select)[spec.main_metric]
        tried.append({"C": c, "score": score, "converged": converged})
        if score is not None and (best is None or score > best[1]):
            best = (model, score, c, converged)
    if best is None:
        raise ValueError(f"no value of head.C={grid} gives a defined {spec.main_metric}")
    model, _, chosen, converged = best
    if not converged:
        log.warning(
            "anchor: LogisticRegression(C=%s) did not converge in %d steps", chosen, MAX_ITER
        )
    predictions = {
        name: _columns(
            spec,
            model,
            x_select if name == select else split_features(setup, name),
            _column(setup, name, "idx"),
            _column(setup, name, "labels"),
        )
        for name in _scored(setup)
    }
    kind = "Ridge" if spec.is_regression else "LogisticRegression"
    record = {"estimator": kind, "C": chosen, "converged": converged, "grid": tried}
    return predictions, {**record, "standardized": True, "n_train": len(y_train)}


def _scored(setup: Any) -> list[str]:
    """The splits an anchor predicts: the selecting split, then the reporting splits."""
    names = setup.datamodule.eval_names + (setup.datamodule.report_names if setup.report else [])
    return list(dict.fromkeys(names))


@torch.no_grad()
def sentence_embeddings(setup: Any, sentences: list[str]) -> torch.Tensor:
    """Each sentence encoded alone: its last layer mean-pooled over its tokens, (N, H) float64."""
    dm, info = setup.datamodule, setup.module.encoder_info
    tokenizer = dm.tokenizer
    enc = tokenizer(sentences, truncation=True, max_length=int(dm.max_length))
    examples = [{k: enc[k][i] for k in enc} for i in range(len(sentences))]
    flat = encode_split(
        setup.module.encoder,
        lambda items: dict(tokenizer.pad(items, padding=True, return_tensors="pt")),
        examples,
        [info.num_layers],
        int(dm.eval_batch_size),
        DTYPES["float32"],
        info.causal,
    )
    return torch.stack([flat.example(i)[:, 0].double().mean(0) for i in range(len(flat))])


def pair_cosines(setup: Any, cfg: DictConfig, name: str) -> np.ndarray:
    """The cosine of each pair's two sentence embeddings, in the served split's order."""
    spec = setup.spec
    source = spec.train if name == SELECTION_SPLIT else spec.dev[name]
    columns = load_split(spec, source, cfg.data.dir)
    row = {int(i): r for r, i in enumerate(columns["idx"])}
    rows = [row[int(i)] for i in _column(setup, name, "idx")]
    u, v = (
        sentence_embeddings(setup, [columns[field][r] for r in rows]) for field in spec.text_fields
    )
    return torch.nn.functional.cosine_similarity(u, v, dim=1).numpy()


def fit_cosine(setup: Any, cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cosine anchor's predictions per split, and its record (threshold and direction).

    Args:
        setup: The prepared stand-in cell.
        cfg: The cell's config (``data.dir``: where the texts are read again).

    Returns:
        The predictions per evaluation and reporting split, and the fit's record.
    """
    spec, select = setup.spec, setup.datamodule.eval_names[0]
    cosines = {name: pair_cosines(setup, cfg, name) for name in _scored(setup)}
    record: dict[str, Any] = {"estimator": "cosine"}
    if not spec.is_regression:  # a threshold: the cosine above it predicts class `direction`
        scores, y = np.sort(np.unique(cosines[select])), _column(setup, select, "labels")
        cuts = np.concatenate([[scores[0] - 1.0], (scores[1:] + scores[:-1]) / 2])
        best = max(
            (
                (
                    metrics.score(spec, _classes(cosines[select], cut, up), y)[spec.main_metric],
                    cut,
                    up,
                )
                for up in (1, 0)
                for cut in cuts
            ),
            key=lambda r: -np.inf if r[0] is None else r[0],
        )
        record.update(threshold=float(best[1]), above=int(best[2]), score=best[0])
    predictions = {}
    for name, cos in cosines.items():
        pred = (
            cos.tolist()
            if spec.is_regression
            else _classes(cos, record["threshold"], record["above"])
        )
        predictions[name] = {
            "idx": _column(setup, name, "idx"),
            "label": _column(setup, name, "labels"),
            "pred": pred,
        }
    return predictions, record


def _classes(cosines: np.ndarray, cut: float, above: int) -> list[int]:
    """Class ``above`` where the cosine exceeds ``cut``, the other class elsewhere."""
    return np.where(cosines > cut, above, 1 - above).tolist()


def fit_anchor(cfg: DictConfig, setup: Any, result: dict[str, Any]) -> None:
    """Fit an anchor cell and leave its module as training would, ready to be concluded.

    Args:
        cfg: The anchor cell's config.
        setup: The cell prepared with :func:`stand_in`'s config
            (:func:`bench.run.train.prepare_cell`); its module is given the selected
            ``best`` and the reporting splits' ``report``, as training would leave them.
        result: The result being built (``anchor``, ``train_time_s``, ``history`` are set).
    """
    started = time.perf_counter()
    if cfg.head.features == "cosine":
        predictions, record = fit_cosine(setup, cfg)
    else:
        predictions, record = fit_linear(setup, list(cfg.head.C))
    result["train_time_s"] = time.perf_counter() - started
    result["anchor"] = {"features": str(cfg.head.features), **record}
    result["history"] = []
    spec, dm = setup.spec, setup.datamodule
    scored = {name: metrics.score(spec, p["pred"], p["label"]) for name, p in predictions.items()}
    select = dm.eval_names
    setup.module.best = {
        "epoch": 0,
        "metrics": {name: scored[name] for name in select},
        "predictions": {name: predictions[name] for name in select},
    }
    reporting = dm.report_names if setup.report else []
    setup.module.report = {
        "metrics": {name: scored[name] for name in reporting},
        "predictions": {name: predictions[name] for name in reporting},
    }
