"""An equal tuning budget for every head: search trials, then the cell's own seed.

A head that merely prefers another learning rate must not "lose" (DESIGN.md, "Evaluation
protocol"). With ``search=random`` a cell is trained in two stages:

1. **Trials.** ``search.trials`` configurations are drawn once, without replacement, from
   the grid declared for the cell's freezing family (``search.space.frozen`` when only the
   head trains, ``search.space.finetune`` otherwise), by a fixed-seed permutation: the draw
   depends on the space, the seed and the budget only, so every head of a comparison gets
   the same configurations, and a larger budget keeps the first ones. Each trial trains once
   (training seed ``search.seed``) and is scored on the selection slice only, never on a
   reporting split. Trials are shared by the cell's seeds and stored beside them:
   ``<task>/<encoder>/<head>/<freeze>/trials/trial=<k>/trial.json``; a finished trial is
   never trained again, and two processes share the work (a trial another process holds is
   left to it and waited for at the end).
2. **Selection and the seed.** The trial with the best selection-slice score wins (ties:
   ``search.tie_rule``, :data:`TIE_RULES`; the lower number by default); its configuration
   trains the cell's own ``seed``, whose result names the selected trial, the trials that
   tied and the rule, and lists every trial's score (``result["search"]``).

``search=grid`` (protocol v3) tries every configuration (``sampler: full_grid``), and with
``pairing: seed`` each seed runs its own search: the trials train the cell's seed, batch
order (:func:`bench.cell.batch_order_seed`: shared by every head) and selection slice
(:func:`bench.cell.slice_seed`), live in ``trials/seed=<n>/trial=<k>/``, and the selected
trial trains exactly as the cell then does.

Torch-free except through :func:`bench.run.train.run`, which it calls.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf

from bench.axes.heads import ANCHOR
from bench.cell import TRIAL_FILE, TRIALS_DIR, config_hash, pairing
from bench.data.tasks import get_task
from bench.errors import ConfigError

log = logging.getLogger(__name__)

#: Search families by freezing strategy: only ``frozen`` never trains the encoder.
FAMILIES = ("frozen", "finetune")
#: Space keys that are not ``optim`` keys: ``head_lr_ratio`` sets ``head_lr`` from ``encoder_lr``.
DERIVED_KEYS = ("head_lr_ratio",)
#: Samplers: ``random_grid`` draws the first ``trials`` of a fixed-seed permutation of the grid;
#: ``full_grid`` tries every configuration, in the grid's declared order.
SAMPLERS = ("random_grid", "full_grid")
#: ``search.tie_rule``, how trials with equal selection scores are ordered: ``trial`` = the
#: lowest trial number (the rule before the option); ``lowest_values`` = the lowest value of
#: each space key in the declared order (the frozen space: the lowest learning rate, then the
#: lowest weight decay), then the lowest trial number.
TIE_RULES = ("trial", "lowest_values")
_LOCK = ".running.lock"
#: Trial statuses that are final: a diverged trial is a real outcome of its configuration.
_FINAL = ("ok", "diverged")

#: Trains one configuration: ``runner(cfg, run_dir, **kwargs) -> result``.
Runner = Callable[..., dict[str, Any]]


def enabled(cfg: DictConfig) -> bool:
    """Whether the cell runs a search (``search.trials`` > 0; an anchor never does)."""
    if OmegaConf.select(cfg, "head.name", default=None) == ANCHOR:  # bench/run/anchors.py
        return False
    return int(OmegaConf.select(cfg, "search.trials", default=0) or 0) > 0


def family(freeze_name: str) -> str:
    """The search family of a freezing strategy: ``frozen`` or ``finetune``."""
    return "frozen" if freeze_name == "frozen" else "finetune"


def space_of(cfg: DictConfig) -> dict[str, list[Any]]:
    """The cell's declared search space (``search.space.<family>``), validated.

    Raises:
        ConfigError: For a missing family, an empty value list or an unknown key.
    """
    name = family(str(cfg.freeze.name))
    node = OmegaConf.select(cfg, f"search.space.{name}", default=None)
    if node is None:
        raise ConfigError(f"search.space.{name}: missing; the search needs a space per family")
    space = OmegaConf.to_container(node, resolve=True)
    assert isinstance(space, dict)
    optim_keys = set(cfg.optim.keys())
    for raw_key, values in space.items():
        key = str(raw_key)
        if key not in optim_keys and key not in DERIVED_KEYS:
            valid = ", ".join(sorted(optim_keys | set(DERIVED_KEYS)))
            raise ConfigError(f"search.space.{name}.{key}: not an optim key; valid: {valid}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"search.space.{name}.{key}={values!r}: give a non-empty list")
    return {str(k): list(v) for k, v in space.items()}


def draw_trials(
    space: dict[str, list[Any]], trials: int, seed: int, sampler: str = "random_grid"
) -> list[dict[str, Any]]:
    """The configurations a search trains: a fixed-seed draw, or the whole grid.

    Args:
        space: Values per key; the grid is their product in the declared order.
        trials: The budget: how many to draw (``random_grid``), or the most the grid may
            hold (``full_grid``, which trains every configuration).
        seed: The draw's seed (``random_grid``).
        sampler: One of :data:`SAMPLERS`.

    Returns:
        One dict of values per trial (trial ``k`` is entry ``k - 1``).

    Raises:
        ConfigError: When the budget exceeds the grid (``random_grid``) or the grid
            exceeds the budget (``full_grid``).
    """
    keys = list(space)
    grid = [dict(zip(keys, values, strict=True)) for values in itertools.product(*space.values())]
    sizes = " × ".join(f"{k}({len(v)})" for k, v in space.items())
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigError(f"search.trials={trials!r}: must be a positive integer")
    if sampler == "full_grid":
        if len(grid) > trials:
            raise ConfigError(
                f"search.trials={trials}: search.sampler=full_grid trains every configuration, "
                f"but the grid {sizes} has {len(grid)}; raise search.trials or shrink the space"
            )
        return grid
    if trials > len(grid):
        raise ConfigError(
            f"search.trials={trials!r}: must be an integer from 1 to {len(grid)} (the size of "
            f"the grid {sizes})"
        )
    order = np.random.default_rng(seed).permutation(len(grid))
    return [grid[i] for i in order[:trials]]


def search_seed(cfg: DictConfig) -> int:
    """The seed that draws the trials and trains them: the cell's own under ``pairing: seed``."""
    return int(cfg.seed if pairing(cfg) == "seed" else cfg.search.seed)


def draws_of(cfg: DictConfig) -> list[dict[str, Any]]:
    """The configurations of the cell's search (:func:`draw_trials` on the cell's settings)."""
    sampler = str(OmegaConf.select(cfg, "search.sampler", default="random_grid"))
    return draw_trials(space_of(cfg), int(cfg.search.trials), search_seed(cfg), sampler)


def trial_count(cfg: DictConfig) -> int:
    """How many trials the cell's search trains (0 without a search).

    ``search.trials`` for ``random_grid``; the grid's size for ``full_grid`` (where
    ``search.trials`` is only a ceiling). An invalid space counts its budget (preflight
    names the problem).
    """
    if not enabled(cfg):
        return 0
    try:
        return len(draws_of(cfg))
    except ConfigError:
        return int(cfg.search.trials)


def apply_values(cfg: DictConfig, values: dict[str, Any]) -> DictConfig:
    """A copy of ``cfg`` whose ``optim`` takes a trial's values.

    ``head_lr_ratio`` sets ``optim.head_lr`` to that multiple of ``encoder_lr`` (the
    trial's own, else the config's).
    """
    out = cfg.copy()
    optim = {k: v for k, v in values.items() if k not in DERIVED_KEYS}
    if "head_lr_ratio" in values:
        encoder_lr = float(values.get("encoder_lr", cfg.optim.encoder_lr))
        optim["head_lr"] = float(values["head_lr_ratio"]) * encoder_lr
    with_values = OmegaConf.merge(out.optim, optim)
    OmegaConf.update(out, "optim", with_values, merge=False)
    return out


def trial_config(cfg: DictConfig, values: dict[str, Any]) -> DictConfig:
    """The config a trial trains: the trial's values, the search seed, no search of its own.

    The trial's batch order comes from ``search.order_seed`` when it is set (the trials of
    every head of a setting then see the same batches: they can train in lock-step,
    :mod:`bench.run.lockstep`), else from the search seed (``order_seed`` null). Either way
    trials are shared by every seed and order seed of the cell's setting. Under
    ``search.pairing: seed`` a trial trains the cell's own seed, batch order and selection
    slice (it keeps ``pairing``), so the selected trial trains exactly as the cell does.
    """
    out = apply_values(cfg, values)
    OmegaConf.update(out, "seed", search_seed(cfg), merge=False)
    order_seed = OmegaConf.select(cfg, "search.order_seed", default=None)
    if "order_seed" in out or order_seed is not None:
        OmegaConf.update(out, "order_seed", order_seed, merge=False)
    own: dict[str, Any] = {"name": "none", "trials": 0}
    if pairing(cfg) is not None:
        own["pairing"] = pairing(cfg)
    OmegaConf.update(out, "search", own, merge=False)
    return out


def trials_dir(run_dir: str | Path, seed: int | None = None) -> Path:
    """Where the trials of a cell's setting live: beside its ``seed=<n>`` directories.

    Args:
        run_dir: The cell's run directory.
        seed: Under ``search.pairing: seed``, the seed whose own search it is
            (``trials/seed=<n>/``); None: the setting's one search (``trials/``).
    """
    root = Path(run_dir).parent / TRIALS_DIR
    return root if seed is None else root / f"seed={seed}"


def stored_trials(folder: Path, count: int) -> int:
    """How many of a search's first ``count`` trials ``folder`` holds (file names only)."""
    return sum((folder / f"trial={k}" / TRIAL_FILE).is_file() for k in range(1, count + 1))


def cell_trials_dir(cfg: DictConfig, run_dir: str | Path) -> Path:
    """The folder of the trials this cell's search reads (its own seed's under pairing)."""
    return trials_dir(run_dir, int(cfg.seed) if pairing(cfg) == "seed" else None)


def read_trial(path: Path, expected_hash: str) -> dict[str, Any] | None:
    """A finished trial's record, or None when there is none for this configuration.

    A record of another configuration (the space or the data changed) is kept as
    ``trial-<hash12>.json`` beside it, never deleted, and the trial is trained again.
    """
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        path.replace(path.with_name(f"trial-unreadable-{path.stat().st_mtime_ns}.json"))
        return None
    if record.get("config_hash") != expected_hash:
        old = str(record.get("config_hash") or "unknown")[:12]
        path.replace(path.with_name(f"trial-{old}.json"))
        return None
    if record.get("status") in _FINAL or not record.get("retryable", False):
        return record
    return None  # an environmental failure (disk, memory): tried again


def trial_lock(folder: Path) -> FileLock:
    """The lock a process holds while it trains the trial stored in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / _LOCK))


def pending_trials(
    cfg: DictConfig, run_dir: str | Path
) -> list[tuple[DictConfig, Path, dict[str, Any]]]:
    """The trials of a cell's search that are not stored yet.

    Args:
        cfg: The cell's config (with ``search``).
        run_dir: The cell's run directory (its trials live beside it).

    Returns:
        Per missing trial: the config it trains, its folder and the fields its record adds
        (``kind``, ``trial``, ``trial_config``), as :func:`run_trials` would train it.

    Raises:
        ConfigError: For an invalid space or budget.
    """
    missing = []
    for k, values in enumerate(draws_of(cfg), start=1):
        folder = cell_trials_dir(cfg, run_dir) / f"trial={k}"
        tcfg = trial_config(cfg, values)
        if read_trial(folder / TRIAL_FILE, config_hash(tcfg)) is None:
            missing.append((tcfg, folder, _trial_extra(k, values)))
    return missing


def _trial_extra(k: int, values: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "trial", "trial": k, "trial_config": values}


def _run_trial(
    cfg: DictConfig, folder: Path, k: int, values: dict[str, Any], runner: Runner, wait: bool
) -> dict[str, Any] | None:
    """Read or train trial ``k`` in ``folder`` under its lock; None when another holds it."""
    lock = trial_lock(folder)
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        return None
    try:
        tcfg = trial_config(cfg, values)
        record = read_trial(folder / TRIAL_FILE, config_hash(tcfg))
        if record is None:
            log.info("search trial %d: %s", k, values)
            record = runner(
                tcfg,
                folder,
                result_file=TRIAL_FILE,
                report=False,
                extra=_trial_extra(k, values),
            )
        return record
    finally:
        lock.release()


def run_trials(cfg: DictConfig, run_dir: str | Path, runner: Runner) -> list[dict[str, Any]]:
    """Read or train every trial of the cell's setting; trials others hold are waited for.

    Args:
        cfg: The cell's config (with ``search``).
        run_dir: The cell's run directory (its trials live beside it).
        runner: Trains one configuration (:func:`bench.run.train.run`).

    Returns:
        One record per trial, in trial order.
    """
    draws = draws_of(cfg)
    root = cell_trials_dir(cfg, run_dir)
    records: dict[int, dict[str, Any]] = {}
    for wait in (False, True):  # first the free trials, then those other processes hold
        for k, values in enumerate(draws, start=1):
            if k not in records:
                record = _run_trial(cfg, root / f"trial={k}", k, values, runner, wait)
                if record is not None:
                    records[k] = record
    return [records[k] for k in sorted(records)]


def selection_score(record: dict[str, Any], metric: str) -> float:
    """A trial's selection-slice score of ``metric``; -inf when it has none (failed)."""
    if record.get("status") != "ok":
        return -math.inf
    value = ((record.get("selection") or {}).get("metrics") or {}).get(metric)
    return -math.inf if value is None or not math.isfinite(value) else float(value)


def tie_rule(cfg: DictConfig) -> str:
    """The cell's ``search.tie_rule`` (:data:`TIE_RULES`); ``trial`` when the config has none."""
    return str(OmegaConf.select(cfg, "search.tie_rule", default=None) or TIE_RULES[0])


def select_trial(
    records: list[dict[str, Any]], metric: str, rule: str = "trial", keys: list[str] | None = None
) -> dict[str, Any] | None:
    """The trial with the best selection score, ties broken by ``rule``; None if all failed.

    Args:
        records: The trials' records (``trial``, ``status``, ``selection``, ``trial_config``).
        metric: The selection metric (higher is better).
        rule: One of :data:`TIE_RULES`.
        keys: The space's keys in declared order (``lowest_values``); None: the order of
            each record's ``trial_config``.
    """
    scored = [(selection_score(r, metric), r) for r in records]
    best = max((s for s, _ in scored), default=-math.inf)
    if best == -math.inf:
        return None
    tied = [r for s, r in scored if s == best]

    def order(record: dict[str, Any]) -> tuple[Any, ...]:
        values = record.get("trial_config") or {}
        lowest = [values[k] for k in keys or values] if rule == "lowest_values" else []
        return (*lowest, int(record["trial"]))

    return min(tied, key=order)


def search_record(
    cfg: DictConfig, records: list[dict[str, Any]], chosen: dict[str, Any]
) -> dict[str, Any]:
    """What the cell's result says about its search.

    ``tied`` lists the trials that share the best selection score (one trial: no tie),
    ``tie_rule`` how :func:`select_trial` chose among them.
    """
    metric = get_task(str(cfg.task.name)).main_metric
    scores = {str(r["trial"]): selection_score(r, metric) for r in records}
    best = scores[str(chosen["trial"])]
    return {
        "name": str(cfg.search.name),
        "sampler": str(cfg.search.get("sampler", "random_grid")),
        "trials": len(records),
        "seed": search_seed(cfg),
        "pairing": pairing(cfg),
        "family": family(str(cfg.freeze.name)),
        "metric": metric,
        "selected": int(chosen["trial"]),
        "selected_config": chosen["trial_config"],
        "tie_rule": tie_rule(cfg),
        "tied": [int(k) for k, v in scores.items() if v == best],
        "scores": scores,
        "statuses": {str(r["trial"]): r.get("status") for r in records},
        "train_time_s": sum(float(r.get("wall_time_s") or 0.0) for r in records),
    }


def select_config(
    cfg: DictConfig, run_dir: str | Path, runner: Runner
) -> tuple[DictConfig, dict[str, Any]]:
    """What a cell trains after its search, reading or training the trials first.

    Args:
        cfg: The cell's composed config.
        run_dir: The cell's run directory.
        runner: Trains a trial (:func:`bench.run.train.run`).

    Returns:
        The config to train (the selected trial's values on the cell's config; the cell's
        own config without a search) and the runner's keyword arguments for the cell:
        ``extra`` and ``cell_hash`` after a search, ``failure`` when it selected nothing.
    """
    if not enabled(cfg):
        return cfg, {}
    try:
        records = run_trials(cfg, run_dir, runner)
    except ConfigError as err:
        return cfg, {"failure": str(err)}
    metric = get_task(str(cfg.task.name)).main_metric
    chosen = select_trial(records, metric, tie_rule(cfg), list(space_of(cfg)))
    if chosen is None:
        reasons = "; ".join(f"trial {r['trial']}: {r.get('reason')}" for r in records)
        return cfg, {"failure": f"every search trial failed ({reasons})"}
    return apply_values(cfg, chosen["trial_config"]), {
        "extra": {"search": search_record(cfg, records, chosen)},
        "cell_hash": config_hash(cfg),
    }


def run_with_search(cfg: DictConfig, run_dir: str | Path, runner: Runner) -> dict[str, Any]:
    """Train a cell: directly, or after its search when ``search.trials`` > 0.

    Args:
        cfg: The cell's composed config.
        run_dir: The cell's run directory.
        runner: :func:`bench.run.train.run` (its keyword arguments ``result_file``,
            ``report``, ``extra``, ``cell_hash``, ``failure``).

    Returns:
        The cell's result as written.
    """
    trained, kwargs = select_config(cfg, run_dir, runner)
    return runner(trained, run_dir, **kwargs)
