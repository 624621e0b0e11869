"""Encoders: what an encoder option file declares, checked without loading anything.

The encoder axis is open (any Hugging Face checkpoint can get an option file), so its
names are the option files ``conf/encoder/<name>.yaml`` themselves; this module is the one
definition of the keys such a file holds and the values they take. Torch-free:
:mod:`bench.model.encoders` loads the model and checks the pooler declaration against
the weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.errors import ConfigError

#: What an encoder declares about its pooler (DESIGN.md, convention 4): ``trained`` (BERT's
#: NSP-trained pooler), ``untrained`` (weights present but never trained: MiniLM, RoBERTa),
#: ``absent`` (no pooler weights: DeBERTa).
POOLER_STATES = ("trained", "untrained", "absent")

#: Where a family sums a sequence up (``encoder.summary``): the ``first`` token ([CLS],
#: ``<s>``: BERT, RoBERTa, DeBERTa, ELECTRA) or the ``last`` real token (GPT-2, XLNet,
#: decoder LMs). What every head's ``pool: cls`` reads.
SUMMARY_POSITIONS = ("first", "last")

#: The keys of an encoder option file, with the value each may be left at (None = required).
KEYS: dict[str, Any] = {
    "name": None,
    "source": None,  # package:<module> | tiny:<family> | a local directory | a Hub id
    "family": None,  # bert | roberta | deberta ...: for readers; the loader reads config.json
    "pooler": "absent",
    "summary": "first",
    "revision": None,  # a Hub revision; null = the default branch
    "trust_remote_code": False,
    # Recompute activations in the backward pass (less memory, ~30% slower; no number
    # changes): for the larger decoders under fine-tuning.
    "gradient_checkpointing": False,
}
_REQUIRED = ("name", "source")


def validate(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """Check an ``encoder`` config group (as a plain mapping).

    Args:
        cfg: The group: ``name``, ``source``, ``pooler`` and the optional keys of
            :data:`KEYS`.

    Returns:
        ``cfg``, checked.

    Raises:
        ConfigError: For a missing or unknown key or an invalid pooler or summary
            declaration, naming the key and the valid choices.
    """
    name = cfg.get("name")
    unknown = sorted(set(cfg) - set(KEYS))
    if unknown:
        raise ConfigError(
            f"encoder {name!r}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(KEYS)}"
        )
    for key in _REQUIRED:
        if not isinstance(cfg.get(key), str) or not cfg[key]:
            raise ConfigError(f"encoder.{key} must be a non-empty string (encoder {name!r})")
    pooler = cfg.get("pooler", KEYS["pooler"])
    if pooler not in POOLER_STATES:
        raise ConfigError(
            f"encoder.pooler={pooler!r} for encoder {name!r}; "
            f"valid choices: {', '.join(POOLER_STATES)}"
        )
    summary = cfg.get("summary", KEYS["summary"])
    if summary not in SUMMARY_POSITIONS:
        raise ConfigError(
            f"encoder.summary={summary!r} for encoder {name!r}; "
            f"valid choices: {', '.join(SUMMARY_POSITIONS)}"
        )
    if not isinstance(cfg.get("gradient_checkpointing", False), bool):
        raise ConfigError(
            f"encoder.gradient_checkpointing={cfg.get('gradient_checkpointing')!r} for "
            f"encoder {name!r}; valid choices: true, false"
        )
    return cfg
