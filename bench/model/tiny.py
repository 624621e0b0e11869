"""Small random-init encoders built locally, for fast tests and plumbing runs.

``tiny:bert`` is a 4-layer BERT with a WordPiece tokenizer and ``tiny:roberta`` a
4-layer RoBERTa with a byte-level BPE tokenizer. Both tokenizers are trained with
``tokenizers`` on local text (the docstrings of a fixed list of standard-library
modules), so nothing is downloaded. The weights are random (fixed seed): results from
these models say nothing about real heads and are labelled untrained.

Models are built once into ``$HEADBENCH_CACHE/tiny/`` (default ``~/.cache/headbench``)
under a name that hashes the corpus and the recipe, and published atomically.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer, WordPieceTrainer
from transformers import (
    BertConfig,
    BertModel,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaModel,
)

from bench.errors import EncoderError
from bench.paths import cache_root

RECIPE_VERSION = 2  # 2: corpus read from source files (was live objects)
VOCAB_SIZE = 2000
ARCH: dict[str, Any] = {
    "hidden_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 64,
}
_CORPUS_MODULES = (
    "argparse",
    "collections",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "email",
    "fractions",
    "functools",
    "heapq",
    "http.client",
    "json",
    "logging",
    "pathlib",
    "random",
    "statistics",
    "string",
    "textwrap",
    "threading",
    "typing",
    "unittest",
    "urllib.parse",
    "zipfile",
)
FAMILIES = ("bert", "roberta")


def corpus_lines() -> list[str]:
    """Local English text to train the tiny tokenizers on.

    Read statically from the modules' source files (``ast``), not from the live objects:
    another library may have replaced a module attribute at runtime (Ray swaps
    ``logging``'s record factory in its workers), which would change the corpus, and with
    it the tiny models, in that process only.

    Returns:
        Non-empty lines from the docstrings of a fixed list of stdlib modules and of their
        top-level classes and functions, in source order.
    """
    lines: list[str] = []
    for name in _CORPUS_MODULES:
        tree = ast.parse(inspect.getsource(importlib.import_module(name)))
        docs = [ast.get_docstring(tree) or ""]
        for node in tree.body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                docs.append(ast.get_docstring(node) or "")
        for doc in docs:
            lines.extend(line.strip() for line in doc.splitlines() if line.strip())
    return lines


def _train_wordpiece(lines: list[str]) -> PreTrainedTokenizerFast:

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(lines, WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        model_max_length=512,
    )


def _train_bytelevel_bpe(lines: list[str]) -> PreTrainedTokenizerFast:

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's ids 0..4
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(lines, trainer)
    sep, cls = tok.token_to_id("</s>"), tok.token_to_id("<s>")
    assert sep is not None and cls is not None, "the trainer adds the special tokens"
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", sep), ("<s>", cls), trim_offsets=True
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_input_names=["input_ids", "attention_mask"],
        model_max_length=512,
    )


def _build(family: str, lines: list[str], out: Path) -> None:

    config: PretrainedConfig
    model_cls: type[PreTrainedModel]
    if family == "bert":
        tokenizer = _train_wordpiece(lines)
        config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=512, **ARCH)
        model_cls = BertModel
    else:
        tokenizer = _train_bytelevel_bpe(lines)
        config = RobertaConfig(
            vocab_size=len(tokenizer),
            max_position_embeddings=514,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            **ARCH,
        )
        model_cls = RobertaModel
    torch.manual_seed(0)
    model = model_cls(config)  # type: ignore[arg-type]  # the config matches model_cls
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "headbench_tiny.json").write_text(
        json.dumps({"family": family, "recipe": RECIPE_VERSION, "trained": False}) + "\n"
    )


def build_tiny_model(family: str) -> Path:
    """Build (once) and return the directory of a tiny random-init encoder.

    Args:
        family: ``bert`` (WordPiece) or ``roberta`` (byte-level BPE).

    Returns:
        A directory loadable with ``AutoModel`` / ``AutoTokenizer``.

    Raises:
        EncoderError: If the family is unknown.
    """
    if family not in FAMILIES:
        raise EncoderError(f"unknown tiny encoder family {family!r}; valid: {', '.join(FAMILIES)}")
    lines = corpus_lines()
    digest = hashlib.sha256(
        json.dumps([RECIPE_VERSION, VOCAB_SIZE, ARCH, family, lines]).encode()
    ).hexdigest()[:12]
    target = cache_root() / "tiny" / f"{family}-{digest}"
    if (target / "headbench_tiny.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _build(family, lines, tmp)
        try:
            tmp.rename(target)  # atomic publish; fails if another process won the race
        except OSError:
            if not (target / "headbench_tiny.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
