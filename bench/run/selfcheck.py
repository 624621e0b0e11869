"""A benchmark that checks itself: re-run a fixed slice of a committed experiment.

``python -m bench.run.selfcheck results/fair_heads`` re-trains a small, fixed slice of the
experiment's committed cells (:data:`SLICES`) with today's code into a fresh temporary run
directory, never into ``results/``, and compares them with the committed results
(:mod:`bench.results.reproduction`): each cell's reporting-split main metric beside the
committed one, and each head's committed mean with the re-run seeds' values from today
against its committed 95% t interval. It prints both tables and a one-line verdict.

Each cell trains exactly what its committed run trained, by the path a sweep takes
(:func:`bench.run.search.run_with_search`, stage 2): the planned config of its run directory
(``.hydra/config.yaml``, checked against the recorded config hash) with the selected search
trial's values (:func:`bench.run.search.apply_values`), trained by
:func:`bench.run.train.run` with the cell's recorded config hash. The hidden-state cache is
built afresh in the temporary directory, so today's encoder code computes every state;
``--reuse-cache`` reads and fills the usual cache instead (faster; states cached by earlier
code are then not recomputed).

Exit status: 0 when the slice reproduces within the committed intervals, 1 when it does not
(or a re-run cell fails), 2 for bad input: an unknown experiment directory, a slice cell the
experiment did not commit, committed files that disagree, an unusable ``--out``.

Examples:
    python -m bench.run.selfcheck results/fair_heads
    python -m bench.run.selfcheck results/fair_heads --slice frozen-linear --out /tmp/check
"""

from __future__ import annotations

import argparse
import copy
import itertools
import logging
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from yaml import YAMLError

from bench.atomic import atomic_write_json, unwritable_reason
from bench.axes.optional import leaf_dir
from bench.axes.resolvers import register as register_resolvers
from bench.cell import RESULT_FILE, cell_path, config_hash
from bench.clock import utc_now
from bench.errors import ConfigError, DataError, HeadbenchError
from bench.results.collect import cell_key, has_table, read_results, read_table, tidy
from bench.results.predictions import predictions_table, read_predictions
from bench.results.reproduction import Reproduction, compare
from bench.results.rescore import verified
from bench.results.result_file import load_result
from bench.results.selfcheck_record import (
    RECORD_FILE,
    cell_frame,
    device_name,
    environment,
    head_frame,
)
from bench.results.stats import RUN_KEYS, run_key, run_values
from bench.run.cli import JOB_CONFIG_DIR
from bench.run.search import apply_values

#: The folder of the committed run directories inside an experiment directory.
RUNS_DIR = "runs"
#: What each level of ``runs/<task>/<encoder>/<head>/<freeze>/seed=N`` is, for messages.
_LEVELS = ("task", "encoder", "head", "freezing strategy", "seed")


@dataclass(frozen=True)
class Slice:
    """A fixed set of committed cells: every task × head × seed of one encoder and strategy.

    Attributes:
        description: One line for the output.
        tasks: Task names.
        heads: Head labels (the run directories' names, e.g. ``pooler-random``).
        seeds: Training seeds.
        encoder: Encoder name.
        freeze: Freezing-strategy label.
        split: The reporting split compared (its main metric).
    """

    description: str
    tasks: tuple[str, ...]
    heads: tuple[str, ...]
    seeds: tuple[int, ...]
    encoder: str = "minilm"
    freeze: str = "frozen"
    split: str = "dev"

    def cell_paths(self, runs: Path | None = None) -> list[str]:
        """The cells' paths below ``runs/``: ``task/encoder/head/freeze/seed=N``.

        Args:
            runs: The committed ``runs/`` folder. Where it holds no ``seed=N`` but a
                ``seed=N-order=N`` (a sweep whose batch order follows its seed, e.g.
                ``fair_heads_gpu``), that one is the cell's path.

        Returns:
            One path per task × head × seed, in that order.
        """
        paths = []
        for task, head, seed in itertools.product(self.tasks, self.heads, self.seeds):
            setting = f"{task}/{self.encoder}/{head}/{self.freeze}"
            path = f"{setting}/{leaf_dir(seed)}"
            ordered = f"{setting}/{leaf_dir(seed, order_seed=seed)}"
            if runs is not None and not (runs / path).is_dir() and (runs / ordered).is_dir():
                path = ordered
            paths.append(path)
        return paths


#: The slices the check can run; ``default`` is what ``python -m bench.run.selfcheck`` runs.
SLICES: dict[str, Slice] = {
    "default": Slice(
        description=(
            "SST-2, frozen MiniLM, heads mean_linear and last4_concat, seeds 1-3: six cells "
            "that train in seconds from the hidden-state cache"
        ),
        tasks=("sst2",),
        heads=("mean_linear", "last4_concat"),
        seeds=(1, 2, 3),
    ),
    "frozen-linear": Slice(
        description=(
            "every headline task (SST-2, MRPC, RTE, CoLA, STS-B), frozen MiniLM, heads "
            "mean_linear, last4_concat and pooler-random, seeds 1-3: 45 cells, every metric"
        ),
        tasks=("sst2", "mrpc", "rte", "cola", "stsb"),
        heads=("mean_linear", "last4_concat", "pooler-random"),
        seeds=(1, 2, 3),
    ),
    "gpu-trained": Slice(
        description=(
            "MRPC and RTE, frozen MiniLM, heads linear, mean_linear, pooler-random and "
            "bilstm, seeds 1-3: 24 cells that fair_heads_gpu trained on a GPU in lock-step "
            "(stacked, and grouped for the BiLSTM), each trained alone here"
        ),
        tasks=("mrpc", "rte"),
        heads=("linear", "mean_linear", "pooler-random", "bilstm"),
        seeds=(1, 2, 3),
    ),
}


@dataclass(frozen=True)
class CommittedCell:
    """One committed cell of a slice, ready to be trained again.

    Attributes:
        path: Its path below ``runs/`` (``task/encoder/head/freeze/seed=N``).
        run_dir: Its committed run directory.
        result: Its committed ``result.json``.
        config: The config it trained (the planned config with the selected trial's values).
    """

    path: str
    run_dir: Path
    result: dict[str, Any]
    config: DictConfig


def committed_experiments(root: Path) -> list[str]:
    """The experiment directories in ``root`` with a results table and committed runs."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / RUNS_DIR).is_dir() and has_table(p))


def check_experiment(experiment: Path) -> None:
    """Check that ``experiment`` holds committed runs and a results table.

    Raises:
        DataError: Naming the directory and the committed experiments beside it.
    """
    if not experiment.is_dir():
        why = "no such directory"
    else:
        lacks = {
            f"{RUNS_DIR}/": (experiment / RUNS_DIR).is_dir(),
            "results table": has_table(experiment),
        }
        missing = [what for what, present in lacks.items() if not present]
        if not missing:
            return
        why = "no " + " and no ".join(missing)
    found = committed_experiments(experiment.parent)
    valid = ", ".join(str(experiment.parent / name) for name in found) or "none"
    raise DataError(
        f"{experiment}: not a committed experiment ({why}); committed experiments: {valid}"
    )


def _missing_cell(runs: Path, path: str) -> DataError:
    """The error for a slice cell without a committed run directory, naming what exists."""
    folder = runs
    for level, part in zip(_LEVELS, path.split("/"), strict=True):
        if not (folder / part).is_dir():
            there = (
                sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
            )
            valid = ", ".join(there) or "none"
            return DataError(
                f"{runs / path}: not committed: no {level} {part!r} in {folder}; "
                f"committed there: {valid}"
            )
        folder = folder / part
    return DataError(f"{runs / path}: not committed: no {RESULT_FILE} there")


def trained_config(run_dir: Path, result: dict[str, Any]) -> DictConfig:
    """The config a committed cell trained, built as its sweep built it.

    The planned config of the run directory (``.hydra/config.yaml``, which must hash to the
    recorded ``config_hash``), with the selected search trial's ``optim`` values when the cell
    ran a search (:func:`bench.run.search.apply_values`, stage 2 of
    :func:`bench.run.search.run_with_search`); the result must name the same config.

    Args:
        run_dir: The committed run directory.
        result: Its ``result.json``.

    Returns:
        The config to train.

    Raises:
        DataError: When the planned config is missing or the committed files disagree.
    """
    register_resolvers()  # the planned config derives labels and the data directory
    path = run_dir / JOB_CONFIG_DIR / "config.yaml"
    if not path.is_file():
        raise DataError(f"{path}: missing; re-running a committed cell needs its planned config")
    try:
        cfg = OmegaConf.load(path)
        if not isinstance(cfg, DictConfig):
            raise DataError(f"{path}: not a mapping of config keys")
        planned = config_hash(cfg)
    except (YAMLError, OmegaConfBaseException) as err:
        raise DataError(f"{path}: unreadable config ({type(err).__name__}: {err})") from None
    if planned != result.get("config_hash"):
        raise DataError(
            f"{path}: hashes to {planned[:12]}, but {run_dir / RESULT_FILE} records "
            f"{str(result.get('config_hash'))[:12]}: the committed files disagree"
        )
    search = result.get("search")
    if search:
        cfg = apply_values(cfg, search["selected_config"])
    recorded = OmegaConf.create(result.get("config") or {})
    if config_hash(cfg) != config_hash(recorded):
        raise DataError(
            f"{run_dir / RESULT_FILE}: its 'config' is not the planned config with the selected "
            "trial's values: the committed files disagree"
        )
    return cfg


def committed_cells(experiment: Path, chosen: Slice) -> list[CommittedCell]:
    """The slice's committed cells, each checked and with the config it trained.

    Args:
        experiment: The committed experiment directory (``results/<name>``).
        chosen: The slice.

    Returns:
        One cell per slice cell, in the slice's order.

    Raises:
        DataError: For a cell the experiment did not commit (naming what it did commit at
            the first missing level), one that did not finish ``ok``, one the results table
            lacks, or committed files that disagree.
    """
    check_experiment(experiment)
    runs = experiment / RUNS_DIR
    table = run_values(read_table(experiment), split=chosen.split)
    tabled = set(table[RUN_KEYS].itertuples(index=False, name=None))
    cells = []
    for path in chosen.cell_paths(runs):
        run_dir = runs / path
        if not (run_dir / RESULT_FILE).is_file():
            raise _missing_cell(runs, path)
        result, _ = load_result(run_dir / RESULT_FILE)
        if result.get("status") != "ok":
            raise DataError(
                f"{run_dir / RESULT_FILE}: status {result.get('status')!r}: only a cell that "
                "finished ok can be reproduced"
            )
        cell = result["cell"]
        if run_key(cell) not in tabled:
            raise DataError(
                f"{run_dir}: committed, but not in the results table of {experiment}; "
                f"collect it: python -m bench.results.collect {runs} -o {experiment}"
            )
        config = trained_config(run_dir, result)
        if cell_path(config) != path:
            raise DataError(f"{run_dir}: its config is of the cell {cell_path(config)}")
        cells.append(CommittedCell(path=path, run_dir=run_dir, result=result, config=config))
    return cells


def retrain(
    cells: list[CommittedCell], runs_root: Path, cache: Path | None
) -> list[dict[str, Any]]:
    """Train each cell's committed config again into ``runs_root/<cell path>``.

    Args:
        cells: The committed cells.
        runs_root: Where the re-run cells are written (not the committed experiment).
        cache: The hidden-state cache directory to build and read (``cache.dir``), or None
            for the configured one.

    Returns:
        The re-run cells' results, as written.
    """
    from bench.run.logs import route_lightning_logs
    from bench.run.train import run  # torch and Lightning (~8 s), only when training

    route_lightning_logs()
    results = []
    for number, cell in enumerate(cells, start=1):
        cfg = copy.deepcopy(cell.config)
        if cache is not None:
            OmegaConf.update(cfg, "cache.dir", str(cache), merge=False)
        search = cell.result.get("search")
        started = time.perf_counter()
        result = run(
            cfg,
            runs_root / cell.path,
            extra={"search": search} if search else None,
            cell_hash=cell.result["config_hash"],
        )
        took = time.perf_counter() - started
        print(f"[{number}/{len(cells)}] {cell.path}: {result['status']} ({took:.1f} s)", flush=True)
        results.append(result)
    return results


def read_rerun(
    roots: list[Path], expected: list[dict[str, Any]]
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The re-run cells as collect reads them: tidy table, predictions, problems.

    Each result is read and checked (:func:`bench.results.collect.read_results`) and
    re-scored from its predictions (:func:`bench.results.rescore.verified`). A cell whose
    predictions do not re-score is kept as ``failed`` with collect's message as its reason,
    and so is an expected cell without a readable result: no cell of the slice goes missing.

    Args:
        roots: The re-run cells' folder (or their result files).
        expected: The ``cell`` of each result the slice must have (``result["cell"]``).

    Returns:
        ``(table, predictions, problems)``.
    """
    results, problems = read_results(roots)
    kept, frames, refused = verified(results)
    taken = {id(r) for r in kept}
    for result in results:
        if id(result) not in taken:
            reasons = [m for m in refused if m.startswith(f"{result['run_dir']}:")]
            kept.append({**result, "status": "failed", "reason": "; ".join(reasons)})
    found = {cell_key(r) for r in kept}
    for cell in expected:
        if cell_key({"cell": cell}) not in found:
            reason = "no readable result was written (see the warnings)"
            kept.append({"cell": cell, "status": "failed", "reason": reason})
    return tidy(kept), predictions_table(frames), problems + refused


def _versions(cells: list[CommittedCell]) -> dict[str, list[str]]:
    """Each library's versions over the committed cells."""
    seen: dict[str, set[str]] = {}
    for cell in cells:
        for name, version in (cell.result.get("versions") or {}).items():
            seen.setdefault(name, set()).add(str(version))
    return {name: sorted(v) for name, v in seen.items()}


def print_record(record: dict[str, Any]) -> None:
    """Print a check's timing, environment, cells and heads (frames) and a one-line verdict."""
    cells, heads = cell_frame(record), head_frame(record)
    for _, cell in cells[cells["status"] != "ok"].iterrows():
        print(f"{cell['cell']} {cell['status']}: {cell['reason']}")
    shown = ["setting", "metric", "n", "committed_mean", "t_low", "t_high", "today_mean", "inside"]
    frames = [pd.DataFrame([record["timing"]]).round(1), environment(record)]
    frames += [cells[["cell", "metric", "committed", "today", "diff", "changed", "identical"]]]
    print("\n\n".join(f.to_string(index=False) for f in [*frames, heads[shown]]))
    print(
        f"{'REPRODUCED' if record['ok'] else 'NOT REPRODUCED'}: {cells['identical'].sum()} of "
        f"{len(cells)} cells identical; {heads['inside'].sum()} of {len(heads)} heads' means "
        f"inside their committed {record['confidence']:.0%} intervals"
    )


def _record(
    experiment: Path,
    name: str,
    cells: list[CommittedCell],
    reproduction: Reproduction,
    timing: dict[str, float],
    reuse_cache: bool,
    runs_root: Path | None,
    problems: list[str],
) -> dict[str, Any]:
    """The JSON record of one check."""
    from bench.run import provenance  # torch

    return {
        "experiment": str(experiment),
        "slice": {"name": name, **asdict(SLICES[name])},
        "finished_at": utc_now(),
        **reproduction.records(),
        "timing": timing,
        "cache": "reused" if reuse_cache else "fresh",
        "runs_dir": str(runs_root) if runs_root is not None else None,
        "problems": problems,
        "committed": {
            "git": sorted({str((c.result.get("git") or {}).get("commit")) for c in cells}),
            "versions": _versions(cells),
            "devices": sorted({device_name(c.result.get("hardware")) for c in cells}),
        },
        "today": {
            "git": provenance.git_commit(),
            "versions": provenance.versions(),
            # the vector kernels torch's CPU code ran (results do not record theirs)
            "hardware": {**provenance.hardware(), "cpu_capability": _cpu_capability()},
        },
    }


def _cpu_capability() -> str:
    """The vector instruction set torch's CPU kernels dispatch to (``AVX512``, ``AVX2``...)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


def _check_out(out: Path, experiment: Path) -> None:
    """``--out`` must be writable, outside the experiment, without an earlier check's runs."""
    if out.resolve().is_relative_to(experiment.resolve()):
        raise DataError(f"--out {out}: inside {experiment}; the check never writes there")
    reason = unwritable_reason(out)
    if reason:
        raise DataError(f"--out {out}: cannot write there: {reason}")
    runs = out / RUNS_DIR
    if runs.exists() and any(runs.iterdir()):
        raise DataError(
            f"--out {out}: {runs} holds the cells of an earlier check; give another --out "
            "or remove it (each check trains into a fresh directory)"
        )


def prepare(experiment: Path, name: str, out: Path | None = None) -> list[CommittedCell]:
    """Check the command's input before anything trains: the slice's committed cells.

    Args:
        experiment: The committed experiment directory (``results/<name>``).
        name: The slice (a key of :data:`SLICES`).
        out: The ``--out`` directory, if any.

    Returns:
        The slice's committed cells (:func:`committed_cells`).

    Raises:
        ConfigError: For an unknown slice name, listing the valid ones.
        DataError: For an experiment, a slice cell or an ``out`` that cannot be used.
    """
    if name not in SLICES:
        raise ConfigError(f"--slice {name!r}: unknown; valid: {', '.join(sorted(SLICES))}")
    if out is not None:
        _check_out(out, experiment)
    return committed_cells(experiment, SLICES[name])


def selfcheck(
    experiment: Path,
    name: str,
    cells: list[CommittedCell],
    out: Path | None = None,
    reuse_cache: bool = False,
) -> tuple[Reproduction, dict[str, Any]]:
    """Re-run a slice's committed cells and compare them with the committed results.

    Args:
        experiment: The committed experiment directory (``results/<name>``).
        name: The slice (a key of :data:`SLICES`).
        cells: Its committed cells (:func:`prepare`).
        out: Where to keep the re-run cells (``<out>/runs``); None: a temporary directory,
            removed afterwards.
        reuse_cache: Read and fill the configured hidden-state cache instead of building
            one in the temporary directory.

    Returns:
        The comparison and the check's record (written by :func:`main` with ``--out``).
    """
    chosen = SLICES[name]
    print(
        f"selfcheck of {experiment}, slice {name!r}: {chosen.description}\n"
        f"re-running {len(cells)} committed cells with today's code "
        f"({'reusing the configured' if reuse_cache else 'building a fresh'} hidden-state cache)",
        flush=True,
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="headbench-selfcheck-") as tmp:
        runs_root = out / RUNS_DIR if out is not None else Path(tmp) / RUNS_DIR
        reruns = retrain(cells, runs_root, None if reuse_cache else Path(tmp) / "cache")
        trained = time.perf_counter() - started
        today, predictions, problems = read_rerun([runs_root], [c.result["cell"] for c in cells])
    for problem in problems:
        print(f"warning: {problem}")
    reproduction = compare(
        read_table(experiment),
        today,
        read_predictions(experiment),
        predictions,
        split=chosen.split,
    )
    timing = {
        "retrain_s": trained,
        "cells_s": sum(float(r.get("wall_time_s") or 0.0) for r in reruns),
        "cache_build_s": sum(float((r.get("cache") or {}).get("build_s") or 0.0) for r in reruns),
    }
    record = _record(
        experiment,
        name,
        cells,
        reproduction,
        timing,
        reuse_cache,
        out / RUNS_DIR if out is not None else None,
        problems,
    )
    return reproduction, record


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.run.selfcheck EXPERIMENT [--slice S] [--out DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.run.selfcheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("experiment", help="a committed experiment, e.g. results/fair_heads")
    parser.add_argument(
        "--slice",
        default="default",
        choices=sorted(SLICES),
        help="which fixed slice of cells to re-run (default: default)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"keep the re-run cells in OUT/{RUNS_DIR} and write OUT/{RECORD_FILE}",
    )
    parser.add_argument(
        "--reuse-cache",
        action="store_true",
        help="read and fill the configured hidden-state cache instead of a fresh one",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    experiment = Path(args.experiment)
    try:
        cells = prepare(experiment, args.slice, args.out)
    except HeadbenchError as err:  # bad input: nothing was trained
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    reproduction, record = selfcheck(experiment, args.slice, cells, args.out, args.reuse_cache)
    record["timing"]["total_s"] = time.perf_counter() - started
    print_record(record)
    if args.out is not None:
        path = atomic_write_json(args.out / RECORD_FILE, record)
        print(f"wrote {path}")
    sys.exit(0 if reproduction.ok else 1)


if __name__ == "__main__":
    main()
