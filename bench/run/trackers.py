"""Experiment trackers: the loggers a cell writes to, chosen by the ``logger`` config group.

Every cell writes its curves to ``logs/metrics.csv`` (Lightning's CSV logger) and, with the
``tensorboard`` extra, to ``tb/`` (``logger.tensorboard: auto | true | false``). Two optional
trackers come beside them:

- ``logger=mlflow`` (extra ``headbench[mlflow]``): an MLflow experiment per sweep
  (``logger.experiment``, default the sweep name), one run per cell. The store is
  ``logger.tracking_uri``; null means ``$MLFLOW_TRACKING_URI`` when set, else the SQLite file
  ``<runs_dir>/mlflow.db`` (MLflow's default backend since 3.7; local, offline). A ``file:``
  URI is MLflow's legacy file store, which MLflow 3 opens only with
  ``MLFLOW_ALLOW_FILE_STORE=true``: headbench sets it for its own process when you choose one.
- ``logger=wandb`` (extra ``headbench[wandb]``): a W&B project per sweep
  (``logger.project``), one run per cell, grouped by setting (the cell path without the
  seed). ``logger.mode`` null means ``$WANDB_MODE`` when set, else ``online`` when
  ``WANDB_API_KEY`` is set, else ``offline``: the run is written under
  ``<logger.dir>/wandb/offline-run-*`` and can be uploaded later with ``wandb sync``.

A cell's tracker run is named by its path (``task/encoder/head/freeze/seed=N``) and tagged
with the cell's axes, its config hash, the sweep, the selection mode and the headbench git
commit. The training curves arrive through Lightning; when the cell's ``result.json`` is
complete, its final numbers are logged once, as ``final/<split>/<metric>`` (the reported
metrics, as in ``result["best"]["metrics"]``), ``final/selection/<metric>``,
``final/best_epoch``, ``final/train_time_s``, ``final/wall_time_s`` and
``final/trainable_params``, and the run ends ``FINISHED`` (status ``ok``) or ``FAILED``
(``failed``, ``diverged``; the ``status`` tag says which). A search trial gets no tracker run:
trials are shared by the seeds of a setting and recorded in ``trial.json``; the cell's run
names the selected trial.

``python -m bench.run.trackers <runs_dir>`` lists the tracker runs of a sweep: the MLflow
runs of its ``mlflow.db`` and the W&B runs under its ``wandb/`` folder (read from their
``.wandb`` files, offline).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock
from omegaconf import DictConfig, OmegaConf

from bench.errors import ConfigError, HeadbenchError

if TYPE_CHECKING:
    from lightning.pytorch.loggers import Logger

#: The ``logger`` group's options: the tracker each adds beside the CSV (and TensorBoard) logs.
LOGGERS: dict[str, str | None] = {
    "default": None,  # CSV, and TensorBoard when installed: the behaviour before trackers
    "csv": None,  # CSV only
    "mlflow": "mlflow",
    "wandb": "wandb",
}
#: The import name of each optional package and the headbench extra that installs it.
EXTRAS: dict[str, tuple[str, str]] = {
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboard", "tensorboard"),
}
#: ``logger.tensorboard``: auto = when the ``tensorboard`` extra is installed.
TENSORBOARD_CHOICES = ("auto", True, False)
#: ``logger.mode`` of W&B (null = offline unless an API key is configured).
WANDB_MODES = ("online", "offline", "disabled")
#: The SQLite store a sweep's MLflow runs go to by default, in its runs directory.
MLFLOW_DB = "mlflow.db"
#: Where MLflow keeps artifacts of the local stores (headbench logs none itself).
MLFLOW_ARTIFACTS = "mlflow-artifacts"
#: W&B's folder below ``logger.dir``.
WANDB_DIR = "wandb"
#: The prefix of the final numbers logged once per cell.
FINAL = "final"


class TrackerError(HeadbenchError):
    """A tracker could not start or record a cell's run; the message names ``logger=<name>``."""


def logger_settings(cfg: DictConfig) -> dict[str, Any]:
    """The ``logger`` group as plain values; a config without one is ``logger=default``."""
    node = OmegaConf.select(cfg, "logger", default=None)
    if node is None:
        return {"name": "default", "tensorboard": "auto"}
    plain = OmegaConf.to_container(node, resolve=True)
    if not isinstance(plain, dict):
        raise ConfigError(f"logger={plain!r}: choose an option: {', '.join(LOGGERS)}")
    return {str(k): v for k, v in plain.items()}


def installed(package: str) -> bool:
    """Whether ``package`` can be imported (without importing it)."""
    try:
        return find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-removed installation
        return False


def _needs_extra(what: str, package: str) -> ConfigError:
    module, extra = EXTRAS[package]
    return ConfigError(
        f"{what} needs the optional extra {extra!r} ({module} is not installed): "
        f"pip install 'headbench[{extra}]'"
    )


def check_logger(cfg: DictConfig) -> None:
    """Check the ``logger`` group: a known option whose packages are installed.

    Raises:
        ConfigError: Naming ``logger=<name>`` (or the key) and the extra to install.
    """
    settings = logger_settings(cfg)
    name = settings.get("name")
    if name not in LOGGERS:
        raise ConfigError(f"logger={name!r}; valid choices: {', '.join(LOGGERS)}")
    tensorboard = settings.get("tensorboard", "auto")
    if not (isinstance(tensorboard, bool) or tensorboard == "auto"):  # not 1, not 0
        raise ConfigError(
            f"logger.tensorboard={tensorboard!r}; valid choices: auto (when installed), true, false"
        )
    if tensorboard is True and not installed("tensorboard"):
        raise _needs_extra("logger.tensorboard=true", "tensorboard")
    tracker = LOGGERS[name]
    mode = settings.get("mode")
    if tracker == "wandb" and mode is not None and mode not in WANDB_MODES:
        raise ConfigError(
            f"logger.mode={mode!r}; valid choices: null (offline unless WANDB_API_KEY is "
            f"set), {', '.join(WANDB_MODES)}"
        )
    if tracker is not None and not installed(EXTRAS[tracker][0]):
        raise _needs_extra(f"logger={name}", tracker)


def local_loggers(run_dir: Path, tensorboard: object = "auto") -> list[Logger]:
    """The cell's own files: CSV curves in ``logs/``, TensorBoard events in ``tb/``.

    Args:
        run_dir: The cell's (or trial's) directory.
        tensorboard: ``auto`` (when installed), true or false.

    Returns:
        Lightning loggers.
    """
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    loggers: list[Logger] = [CSVLogger(run_dir, name="logs", version="")]
    if tensorboard is True or (tensorboard == "auto" and installed("tensorboard")):
        loggers.append(TensorBoardLogger(run_dir, name="tb", version="", default_hp_metric=False))
    return loggers


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def final_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numbers of a finished cell logged once to its tracker run.

    Args:
        result: The cell's result (as written to ``result.json``).

    Returns:
        ``final/<split>/<metric>`` for the reported metrics (``result["best"]["metrics"]``),
        ``final/selection/<metric>``, ``final/best_epoch``, ``final/train_time_s``,
        ``final/wall_time_s`` and ``final/trainable_params``; only finite numbers.
    """
    found: dict[str, object] = {}
    best = result.get("best") or {}
    for split, metrics in (best.get("metrics") or {}).items():
        for metric, value in (metrics or {}).items():
            found[f"{FINAL}/{split}/{metric}"] = value
    for metric, value in ((result.get("selection") or {}).get("metrics") or {}).items():
        found[f"{FINAL}/selection/{metric}"] = value
    found[f"{FINAL}/best_epoch"] = best.get("epoch")
    found[f"{FINAL}/train_time_s"] = result.get("train_time_s")
    found[f"{FINAL}/wall_time_s"] = result.get("wall_time_s")
    found[f"{FINAL}/trainable_params"] = (result.get("params") or {}).get("trainable")
    numbers = {key: _number(value) for key, value in found.items()}
    return {key: value for key, value in numbers.items() if value is not None}


def run_tags(cfg: DictConfig, result: dict[str, Any]) -> dict[str, str]:
    """What a cell's tracker run is tagged with: its axes, config hash, sweep and provenance.

    Args:
        cfg: The cell's config.
        result: The cell's result so far (``cell``, ``cell_path``, ``config_hash``).

    Returns:
        Tag names and their values as text.
    """
    from bench.run import provenance

    tags = {str(key): str(value) for key, value in result["cell"].items()}
    tags["cell_path"] = str(result["cell_path"])
    tags["config_hash"] = str(result["config_hash"])
    tags["sweep"] = str(OmegaConf.select(cfg, "sweep_name", default="default"))
    tags["selection"] = str(OmegaConf.select(cfg, "selection.name", default="dev"))
    trials = int(OmegaConf.select(cfg, "search.trials", default=0) or 0)
    tags["search"] = f"{OmegaConf.select(cfg, 'search.name', default='none')}" + (
        f" ({trials} trials)" if trials else ""
    )
    selected = (result.get("search") or {}).get("selected")
    if selected is not None:
        tags["search_selected_trial"] = str(selected)
    commit = provenance.git_commit()
    if commit.get("commit"):
        tags["git_commit"] = str(commit["commit"]) + ("-dirty" if commit.get("dirty") else "")
    return tags


def _status_ok(result: dict[str, Any]) -> bool:
    return result.get("status") == "ok"


def _end_tags(result: dict[str, Any]) -> dict[str, str]:
    tags = {"status": str(result.get("status"))}
    if result.get("reason"):
        tags["reason"] = str(result["reason"])[:5000]
    if "degenerate" in result:
        tags["degenerate"] = str(bool(result["degenerate"])).lower()
    return tags


class CellTracker(ABC):
    """A cell's run in an experiment tracker: its Lightning logger, then its final numbers.

    Attributes:
        name: The ``logger`` option (``mlflow``, ``wandb``).
        logger: The Lightning logger the Trainer writes the curves to.
        record: Where the run lives, recorded in the cell's ``result.json`` (``tracker``).
    """

    name: str
    logger: Logger
    record: dict[str, Any]

    @abstractmethod
    def finish(self, result: dict[str, Any]) -> None:
        """Log the cell's final numbers and status once, and end the run."""

    @abstractmethod
    def abort(self) -> None:
        """End the run as killed (the process is interrupted); never raises."""


def _mlflow_uri(settings: dict[str, Any], runs_dir: Path) -> str:
    uri = settings.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
    return str(uri) if uri else f"sqlite:///{(runs_dir / MLFLOW_DB).resolve()}"


def _local_store(uri: str) -> Path | None:
    """The file or folder of a local MLflow store (SQLite file, file store); None otherwise."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    if uri.startswith("file:"):
        return Path(uri[len("file:") :].removeprefix("//"))
    if "://" not in uri:  # a plain path is a file store
        return Path(uri)
    return None


def _store_lock(uri: str) -> AbstractContextManager[Any]:
    """Serialise creating a local store and its experiment across the sweep's processes."""
    store = _local_store(uri)
    if store is None:
        return nullcontext()
    store.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(f"{store}.lock")


class MlflowTracker(CellTracker):
    """One MLflow run per cell, in the sweep's experiment."""

    def __init__(self, cfg: DictConfig, settings: dict[str, Any], result: dict[str, Any]) -> None:
        runs_dir = Path(str(cfg.runs_dir))
        uri = _mlflow_uri(settings, runs_dir)
        store = _local_store(uri)
        if store is not None and not uri.startswith("sqlite:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # the user chose file:
        from lightning.pytorch.loggers import MLFlowLogger
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        experiment = str(settings.get("experiment") or cfg.sweep_name)
        artifacts = (runs_dir / MLFLOW_ARTIFACTS).resolve().as_uri() if store else None
        self.name = str(settings["name"])
        self._client = MlflowClient(uri)
        with _store_lock(uri):  # a fresh SQLite file is migrated once, by one process
            found = self._client.get_experiment_by_name(experiment)
            if found is not None and found.lifecycle_stage == "deleted":
                raise TrackerError(
                    f"logger={self.name}: the MLflow experiment {experiment!r} in {uri} is "
                    "deleted; restore it (mlflow experiments restore) or set logger.experiment"
                )
            if found is None:
                try:
                    experiment_id = self._client.create_experiment(
                        experiment, artifact_location=artifacts
                    )
                except MlflowException:  # another process (another machine) created it
                    again = self._client.get_experiment_by_name(experiment)
                    if again is None:
                        raise
                    experiment_id = again.experiment_id
            else:
                experiment_id = found.experiment_id
        tags = run_tags(cfg, result)
        if "git_commit" in tags:
            tags["mlflow.source.git.commit"] = tags["git_commit"].removesuffix("-dirty")
        run = self._client.create_run(experiment_id, run_name=str(result["cell_path"]), tags=tags)
        self._run_id = run.info.run_id
        self.logger = MLFlowLogger(
            experiment_name=experiment, tracking_uri=uri, run_id=self._run_id
        )
        self.record = {
            "name": self.name,
            "tracking_uri": uri,
            "experiment": experiment,
            "experiment_id": experiment_id,
            "run_id": self._run_id,
        }

    def finish(self, result: dict[str, Any]) -> None:
        """Log the final numbers and tags once; end the run FINISHED or FAILED."""
        from mlflow.entities import Metric, RunTag

        stamp = int(time.time() * 1000)
        metrics = [Metric(k, v, stamp, 0) for k, v in final_metrics(result).items()]
        tags = [RunTag(k, v) for k, v in _end_tags(result).items()]
        self._client.log_batch(self._run_id, metrics=metrics, tags=tags)
        self._client.set_terminated(self._run_id, "FINISHED" if _status_ok(result) else "FAILED")

    def abort(self) -> None:
        """End the run KILLED."""
        try:
            self._client.set_terminated(self._run_id, "KILLED")
        except Exception:  # interrupted already; the run stays RUNNING in the store
            return


def wandb_mode(settings: dict[str, Any]) -> str:
    """``logger.mode``; null: ``$WANDB_MODE``, else online with ``WANDB_API_KEY``, else offline."""
    mode = settings.get("mode") or os.environ.get("WANDB_MODE")
    if mode:
        return str(mode)
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


class WandbTracker(CellTracker):
    """One W&B run per cell, in the sweep's project, grouped by setting."""

    def __init__(self, cfg: DictConfig, settings: dict[str, Any], result: dict[str, Any]) -> None:
        import wandb
        from lightning.pytorch.loggers import WandbLogger

        self.name = str(settings["name"])
        mode = wandb_mode(settings)
        project = str(settings.get("project") or cfg.sweep_name)
        folder = Path(str(settings.get("dir") or cfg.runs_dir))
        folder.mkdir(parents=True, exist_ok=True)
        tags = run_tags(cfg, result)
        cell_path = str(result["cell_path"])
        # W&B tags are short labels (64 characters at most): the axes and a short hash;
        # every tag in full is in the run's config under `headbench`.
        labels = [f"{k}={v}"[:64] for k, v in tags.items() if k in result["cell"]]
        labels.append(f"config_hash={tags['config_hash'][:12]}")
        labels.append(f"selection={tags['selection']}")
        self._run = wandb.init(
            project=project,
            entity=settings.get("entity") or None,
            name=cell_path,
            group=cell_path.rsplit("/", 1)[0],
            job_type="cell",
            tags=labels,
            config={"headbench": tags},
            dir=str(folder),
            mode=mode,  # type: ignore[arg-type]
        )
        self.logger = WandbLogger(experiment=self._run, project=project, save_dir=str(folder))
        self.record = {
            "name": self.name,
            "mode": mode,
            "project": project,
            "run_id": self._run.id,
            "dir": str(Path(self._run.dir).parent) if self._run.dir else None,
        }

    def finish(self, result: dict[str, Any]) -> None:
        """Put the final numbers in the run's summary; end it (exit code 1 unless ``ok``)."""
        self._run.summary.update(final_metrics(result))
        end = _end_tags(result)
        self._run.tags = (*tuple(self._run.tags or ()), f"status={end['status']}")
        self._run.summary.update({f"{FINAL}/status": end["status"]})
        self._run.finish(exit_code=0 if _status_ok(result) else 1)

    def abort(self) -> None:
        """End the run with exit code 255."""
        try:
            self._run.finish(exit_code=255)
        except Exception:  # interrupted already
            return


def open_tracker(cfg: DictConfig, result: dict[str, Any]) -> CellTracker | None:
    """Start the cell's tracker run, when ``logger`` names a tracker.

    Args:
        cfg: The cell's config.
        result: The cell's result so far (``cell``, ``cell_path``, ``config_hash``).

    Returns:
        The run, or None for ``logger=default`` and ``logger=csv``.

    Raises:
        ConfigError: For a bad ``logger`` option or a missing extra.
        TrackerError: When the tracker cannot start the run, naming ``logger=<name>``.
    """
    check_logger(cfg)
    settings = logger_settings(cfg)
    tracker = LOGGERS[settings["name"]]
    if tracker is None:
        return None
    kinds: dict[str, type[MlflowTracker] | type[WandbTracker]] = {
        "mlflow": MlflowTracker,
        "wandb": WandbTracker,
    }
    try:
        return kinds[tracker](cfg, settings, result)
    except HeadbenchError:
        raise
    except Exception as err:
        raise TrackerError(
            f"logger={settings['name']}: could not start the cell's run: "
            f"{type(err).__name__}: {err}"
        ) from err


def cell_loggers(cfg: DictConfig, run_dir: Path, tracker: CellTracker | None) -> list[Logger]:
    """The Trainer's loggers: the local files, and the tracker's logger when there is one."""
    loggers = local_loggers(run_dir, logger_settings(cfg).get("tensorboard", "auto"))
    if tracker is not None:
        loggers.append(tracker.logger)
    return loggers


# Reading W&B's offline runs. A ``.wandb`` file is W&B's transaction log: a 7-byte header,
# then LevelDB-log framed records (32 KiB blocks; each chunk: CRC-32, length, type) holding
# protobuf ``Record`` messages. W&B 0.31 has no reader of its own that needs no server.
_WANDB_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_BLOCK = 32 * 1024
_CHUNK = struct.Struct("<IHB")
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _wandb_records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    if not data.startswith(_WANDB_HEADER):
        raise TrackerError(f"{path}: not a W&B run file (no W&B header)")
    pos, pending = len(_WANDB_HEADER), b""
    while pos + _CHUNK.size <= len(data):
        room = _BLOCK - pos % _BLOCK
        if room < _CHUNK.size:  # the block's tail is padding
            pos += room
            continue
        crc, length, kind = _CHUNK.unpack_from(data, pos)
        chunk = data[pos + _CHUNK.size : pos + _CHUNK.size + length]
        if kind == 0 or zlib.crc32(bytes([kind]) + chunk) != crc:
            break  # the end of what was written (a killed run leaves a torn tail)
        pos += _CHUNK.size + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk


def _json_items(items: Any, into: dict[str, Any]) -> None:
    for item in items:
        keys = list(item.nested_key) or [item.key]
        target = into
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = json.loads(item.value_json)


def read_wandb_run(path: str | Path) -> dict[str, Any]:
    """Read a W&B run written offline: its name, project, group, tags, config and summary.

    Args:
        path: The run's folder (``.../wandb/offline-run-<time>-<id>``) or its ``.wandb`` file.

    Returns:
        ``id``, ``name``, ``project``, ``group``, ``job_type``, ``tags`` (list), ``config``
        and ``summary`` (dicts, the last value of each key), ``exit_code`` (None if the run
        did not finish).

    Raises:
        TrackerError: When the folder holds no ``.wandb`` file or it is not one.
    """
    from wandb.proto import wandb_internal_pb2

    path = Path(path)
    files = sorted(path.glob("*.wandb")) if path.is_dir() else [path]
    if not files:
        raise TrackerError(f"{path}: no .wandb file (a W&B run folder holds run-<id>.wandb)")
    run: dict[str, Any] = dict.fromkeys(("id", "name", "project", "group", "job_type"))
    run.update(tags=[], config={}, summary={}, exit_code=None)
    for raw in _wandb_records(files[0]):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            info = record.run
            fields = {
                "id": info.run_id,
                "name": info.display_name,
                "project": info.project,
                "group": info.run_group,
                "job_type": info.job_type,
                "tags": list(info.tags),
            }
            run.update({key: value for key, value in fields.items() if value})  # updates
            _json_items(info.config.update, run["config"])
        elif kind == "config":
            _json_items(record.config.update, run["config"])
        elif kind == "summary":
            _json_items(record.summary.update, run["summary"])
        elif kind == "exit":
            run["exit_code"] = record.exit.exit_code
    return run


def wandb_runs(folder: str | Path) -> list[Path]:
    """The W&B run folders below ``folder`` (e.g. a sweep's runs directory), oldest first."""
    found = Path(folder).glob("*run-*")  # offline-run-<time>-<id>, run-<time>-<id>
    return sorted(p for p in found if p.is_dir() and not p.is_symlink() and any(p.glob("*.wandb")))


def _show(runs_dir: Path) -> int:
    """Print the tracker runs of a sweep's runs directory; return how many were found."""
    shown = 0
    database = runs_dir / MLFLOW_DB
    if database.is_file() and installed("mlflow"):
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{database.resolve()}")
        for experiment in client.search_experiments():
            for found in client.search_runs(
                [experiment.experiment_id], order_by=["attributes.start_time ASC"]
            ):
                finals = {k: v for k, v in found.data.metrics.items() if k.startswith(FINAL)}
                print(
                    f"mlflow {experiment.name} {found.info.run_name} {found.info.status} "
                    f"{found.data.tags.get('config_hash', '')[:12]} {json.dumps(finals)}"
                )
                shown += 1
    for folder in wandb_runs(runs_dir / WANDB_DIR):
        offline = read_wandb_run(folder)
        finals = {k: v for k, v in offline["summary"].items() if k.startswith(FINAL)}
        print(
            f"wandb {offline.get('project')} {offline.get('name')} {folder.name} "
            f"{json.dumps(finals)}"
        )
        shown += 1
    return shown


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.run.trackers <runs_dir>``: the tracker runs a sweep wrote."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("runs_dir", type=Path, help="a sweep's runs directory (runs/<sweep>)")
    args = parser.parse_args(argv)
    if not _show(args.runs_dir):
        sys.exit(f"no tracker runs under {args.runs_dir} (mlflow.db, wandb/)")


if __name__ == "__main__":
    main()
