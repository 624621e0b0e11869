"""OmegaConf resolvers that derive labels and task-dependent defaults in ``conf/``.

- ``${hb.head_label:name,layers,combine[,variant[,pair_encoding]]}``:
  :func:`bench.axes.heads.head_label` (``linear``, ``pooler-random``, ``linear-L3``,
  ``bilstm-concat_last4``, ``mean_linear-siamese``);
- ``${hb.freeze_label:name[,k]}``: :func:`bench.axes.freezing.freeze_label` (``top2``);
- ``${hb.by_task_kind:task,sequence_value,token_value}``: one value for sequence tasks
  (GLUE) and another for token tasks (CoNLL-2003), e.g. a head's ``pool`` (a token head
  classifies every token, so nothing is pooled);
- ``${hb.leaf_dir:seed,order_seed,train_size,axes}``: :func:`bench.axes.optional.leaf_dir`, the run
  directory below the freezing label (``seed=1``, ``train_size=400/seed=1-order=2``);
- ``${hb.data_dir:}``: the data directory when ``data.dir`` is not set
  (:func:`bench.data.location.default_data_dir`: ``$HEADBENCH_DATA``, else
  ``../shared/data`` beside the checkout, else null for the Hub).

:func:`register` runs when :mod:`bench.axes` is imported; it is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from bench.axes.freezing import freeze_label
from bench.axes.heads import head_label
from bench.axes.optional import leaf_dir
from bench.data.location import default_data_dir
from bench.data.tasks import validate as validate_task


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _head_label(
    name: str, layers: Any, combine: str, variant: str | None = None, pair: str | None = None
) -> str:
    return head_label(name, _plain(layers), combine, variant, pair)


def _freeze_label(name: str, k: int | None = None) -> str:
    return freeze_label(name, k)


def by_task_kind(task: str, sequence_value: Any, token_value: Any) -> Any:
    """``sequence_value`` for a sequence task, ``token_value`` for a token task.

    Raises:
        ConfigError: For an unknown task, listing the valid ones.
    """
    kind = validate_task(task).kind
    return _plain(token_value if kind == "token" else sequence_value)


def _data_dir(*_: Any) -> str | None:
    return default_data_dir()


def _leaf_dir(seed: Any, order_seed: Any, train_size: Any, axes: Any) -> str:
    return leaf_dir(seed, order_seed, train_size, _plain(axes))


RESOLVERS: dict[str, Callable[..., Any]] = {
    "hb.head_label": _head_label,
    "hb.freeze_label": _freeze_label,
    "hb.by_task_kind": by_task_kind,
    "hb.leaf_dir": _leaf_dir,
    "hb.data_dir": _data_dir,
}


def register() -> None:
    """Register the resolvers with OmegaConf (once per process)."""
    for name, function in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
