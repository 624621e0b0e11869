"""Any value of any numeric option is refused up front with one line, or trains to an end.

Hypothesis (``derandomize=True``: the same cases every run) draws values for the numeric
options of the real config tree: NaN, ±inf, 0, negatives, huge numbers, nulls, ordinary
numbers. Which options there are is read from the composed configs themselves (every
number, and every number in a list, of each head, freezing strategy, search and
selection option), not from the preflight's table. Each command goes through the real
preflight of a single run (:func:`bench.run.preflight.check_command`, real Hydra):

* refused: one line that names a drawn key; a non-finite value is always refused;
* accepted: the first few accepted commands (the explicit examples, then drawn ones) train
  a tiny cell through the real entry point, work-size options capped, and must end ``ok``
  or ``diverged`` (a finite but huge rate diverges, legitimately), never ``failed``.

``tests/test_numeric_options.py`` checks the exit status and stderr of a fresh process.
"""

from __future__ import annotations

import functools
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from bench.run.preflight import check_command
from conftest import CONF, bench_in_this_process

# The options of each group choice whose numbers join the drawn keys.
GROUPS = {
    "head": ("linear", "bilstm"),
    "freeze": (
        "full",
        "frozen",
        "top_k",
        "reinit_top",
        "llrd",
        "lora",
        "lpft",
        "gradual",
        "bitfit",
    ),
    "search": ("none", "random"),
    "selection": ("heldout", "dev"),
}
BASE = {"task": "sst2", "encoder": "tiny_bert", "seed": "1"}
# Options whose default is null and which take a number (conf/ documents each).
NULLABLE_NUMBERS = (
    "order_seed",
    "data.train_size",
    "data.pad_to_multiple_of",
    "runtime.cells_per_gpu",
    "runtime.gpu_memory_gb",
    "search.order_seed",
    "freeze.ft_head_lr",
)
EDGES = [math.nan, math.inf, -math.inf, 0, 0.0, -1, -1e-9, 1, 0.5, 0.999, 2, 7, 1e300, 10**12, None]
VALUES = st.one_of(
    st.sampled_from(EDGES),
    st.integers(-5, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1),
)
# Accepted commands that train, and the caps on what sets their work (a few seconds each).
MAX_TRAINED = 10
CAPS = {
    "data.train_size": 32,
    "selection.size": 20,
    "data.max_length": 32,
    "data.batch_size": 16,
    "data.eval_batch_size": 128,
    "data.num_workers": 0,
    "trainer.devices": 1,
    "head.lstm_hidden": 64,
    "head.lstm_layers": 2,
    "freeze.rank": 8,
    "search.trials": 1,
}
TRAINED: list[dict[str, Any]] = []


def _numbers(node: Any, prefix: str = "") -> dict[str, Any]:
    """Every number of a plain config by dotted key (list items as ``key.<i>``)."""
    if isinstance(node, dict | list):
        items = node.items() if isinstance(node, dict) else enumerate(node)
        return {k: v for key, child in items for k, v in _numbers(child, f"{prefix}{key}.").items()}
    number = isinstance(node, int | float) and not isinstance(node, bool)
    return {prefix[:-1]: node} if number else {}


def _command(given: dict[str, str]) -> list[str]:
    """The overrides of a command: :data:`BASE`, then ``given``."""
    return [f"{k}={v}" for k, v in {**BASE, **given}.items()]


@functools.cache
def _keys_of(groups: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """The numeric keys of the config with these group choices, and their defaults."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", _command(dict(groups)))
    nulls = [k for k in NULLABLE_NUMBERS if OmegaConf.select(cfg, k, default=0) is None]
    return {**dict.fromkeys(nulls), **_numbers(OmegaConf.to_container(cfg, resolve=True))}


@functools.cache
def _keys() -> dict[str, tuple[str, str] | None]:
    """Every numeric key, with a group choice that has it (None: the defaults have it)."""
    keys: dict[str, tuple[str, str] | None] = dict.fromkeys(_keys_of())
    for group, choices in GROUPS.items():
        for choice in choices:
            for key in _keys_of(((group, choice),)):
                keys.setdefault(key, (group, choice))
    return keys


def _text(value: Any) -> str:
    """A value as a Hydra override writes it."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return f"[{','.join(map(_text, value))}]"
    return repr(value) if isinstance(value, float) else str(value)


def _overrides(drawn: dict[str, Any]) -> dict[str, str]:
    """The command's overrides: the group choices, then the drawn values their config has.

    A key of another group choice (``head.lstm_hidden``: ``head=bilstm``) chooses it, unless
    drawn or chosen otherwise; a key that the config then lacks is dropped.
    """
    groups = {k: str(v) for k, v in drawn.items() if k in GROUPS}
    for key in drawn:
        where = _keys().get(key)
        if where:
            groups.setdefault(*where)
    present = _keys_of(tuple(sorted(groups.items())))
    values = {k: _text(v) for k, v in drawn.items() if k in present}
    return {**groups, **values}


def _capped(given: dict[str, str]) -> dict[str, str]:
    """The overrides of a trained cell: each work-size option its config has at most its cap."""
    defaults = _keys_of(tuple(sorted((k, v) for k, v in given.items() if k in GROUPS)))
    epochs = 2 if given.get("freeze") == "lpft" else 1  # LP-FT probes, then fine-tunes
    capped = dict(given)
    for key, cap in {**CAPS, "trainer.max_epochs": epochs}.items():
        value = given.get(key, str(defaults.get(key, 0)))  # null (all): above any cap
        if key in defaults and not (re.fullmatch(r"-?\d+", value) and int(value) <= cap):
            capped[key] = str(cap)
    return capped


def _train(given: dict[str, str]) -> dict[str, Any] | None:
    """Train the command as ``python -m bench`` would; its result, or None if refused."""
    with tempfile.TemporaryDirectory() as tmp:
        where = (f"hydra.run.dir={tmp}/run", f"runs_dir={tmp}/runs", f"results_dir={tmp}/res")
        proc = bench_in_this_process(*_command(_capped(given)), *where, "report_file=null")
        if proc.returncode == 2:  # the caps made it one the preflight refuses (LP-FT's epochs)
            return None
        result = Path(tmp, "run", "result.json")
        assert result.is_file(), (proc.returncode, proc.stderr[-3000:])
        return dict(json.loads(result.read_text()))


# A few drawn values (and group choices), so that a command is not refused for most of them.
DRAWN = st.builds(
    lambda groups, values: {**groups, **values},
    st.fixed_dictionaries({}, optional={g: st.sampled_from(c) for g, c in GROUPS.items()}),
    st.deferred(
        lambda: st.dictionaries(st.sampled_from(sorted(_keys())), VALUES, min_size=1, max_size=3)
    ),
)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same cases every run: a deterministic default-suite test
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a trained cell is not re-run
)
@given(drawn=DRAWN)
# Accepted values at the edges of their ranges, trained first: huge finite rates diverge.
@example(drawn={"optim.encoder_lr": 1e300})
@example(drawn={"freeze": "frozen", "optim.frozen_head_lr": 1e300, "optim.warmup_ratio": 1})
@example(drawn={"optim.adam_eps": 1e300, "trainer.gradient_clip_val": 0, "optim.betas.0": 0})
@example(drawn={"head": "bilstm", "head.dropout": 0, "head.lstm_dropout": 0.999})
@example(drawn={"freeze": "llrd", "freeze.factor": 1e-300, "optim.weight_decay": 1e300})
@example(drawn={"freeze": "lora", "freeze.alpha": -1e300, "freeze.dropout": 0})
def test_a_numeric_option_is_refused_in_one_line_or_trains_to_an_end(drawn):
    given = _overrides(drawn)
    with tempfile.TemporaryDirectory() as tmp:
        where = [f"runs_dir={tmp}/runs", f"results_dir={tmp}/res", "report_file=null"]
        message = check_command(CONF, [*_command(given), *where])
    values = {re.sub(r"\.\d+$", "", k): v for k, v in given.items() if k not in GROUPS}
    if message is not None:
        assert "\n" not in message and message.startswith("error"), message
        assert [k for k in values if k in message], (given, message)  # optim.betas[0]: betas
        return
    assert not [v for v in values.values() if re.search(r"nan|inf", v)], (given, "accepted")
    if values and len(TRAINED) < MAX_TRAINED:
        result = _train(given)
        if result is not None:
            TRAINED.append(result)
            assert result["status"] in ("ok", "diverged"), (given, result.get("reason"))
