"""Small random-init encoders built locally, for fast tests and plumbing runs.

One per family headbench covers, each 4 layers wide 32, with the family's own kind of
tokenizer:

- ``tiny:bert`` (WordPiece, ``[CLS] … [SEP]``) and ``tiny:electra`` (the same tokenizer);
- ``tiny:roberta`` (byte-level BPE, ``<s> … </s>``);
- ``tiny:gpt2`` (byte-level BPE, no special tokens added and no pad token: GPT-2's
  tokenizer, which headbench pads with EOS);
- ``tiny:xlnet`` (a Unigram tokenizer, ``… <sep> <cls>``: the summary token is last);
- ``tiny:qwen2`` (a Qwen2/Llama-style decoder: rotary positions, grouped-query attention,
  byte-level BPE with EOS as its pad token).

The tokenizers are trained with ``tokenizers`` on local text (the docstrings of a fixed
list of standard-library modules), so nothing is downloaded. The weights are random
(fixed seed): results from these models say nothing about real heads and are labelled
untrained.

Models are built once into ``$HEADBENCH_CACHE/tiny/`` (default ``~/.cache/headbench``)
under a name that hashes the corpus and the recipe, and published atomically.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer, UnigramTrainer, WordPieceTrainer
from transformers import PreTrainedTokenizerFast

from bench.errors import EncoderError
from bench.paths import cache_root

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

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
FAMILIES = ("bert", "roberta", "gpt2", "xlnet", "qwen2", "electra")


@functools.cache
def corpus_lines() -> tuple[str, ...]:
    """Local English text to train the tiny tokenizers on.

    Read once per process: parsing the modules takes about half a second, and every
    :func:`build_tiny_model` call hashes the corpus to name its model. Read statically from
    the modules' source files (``ast``), not from the live objects: another library may
    have replaced a module attribute at runtime (Ray swaps ``logging``'s record factory in
    its workers), which would change the corpus, and with it the tiny models, in that
    process only.

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
    return tuple(lines)


def _train_wordpiece(lines: Sequence[str]) -> PreTrainedTokenizerFast:

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


def _bytelevel_bpe(lines: Sequence[str], specials: list[str]) -> Tokenizer:
    """A byte-level BPE model trained on ``lines``, the ``specials`` first in its vocabulary."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(lines, trainer)
    return tok


def _train_bytelevel_bpe(lines: Sequence[str]) -> PreTrainedTokenizerFast:

    tok = _bytelevel_bpe(lines, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])  # RoBERTa's 0..4
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


def _train_decoder_bpe(lines: Sequence[str], eos: str, pad: bool) -> PreTrainedTokenizerFast:
    """GPT-2-style byte-level BPE: no special tokens added around the text."""
    tok = _bytelevel_bpe(lines, [eos])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=eos,
        eos_token=eos,
        unk_token=eos,
        pad_token=eos if pad else None,  # GPT-2 has none; Qwen2 pads with its EOS
        model_input_names=["input_ids", "attention_mask"],
        model_max_length=512,
    )


def _train_unigram(lines: Sequence[str]) -> PreTrainedTokenizerFast:
    """XLNet-style SentencePiece Unigram: ``A <sep> <cls>`` and ``A <sep> B <sep> <cls>``."""
    specials = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>"]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        lines, UnigramTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, unk_token="<unk>")
    )
    sep, cls = tok.token_to_id("<sep>"), tok.token_to_id("<cls>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A:0 <sep>:0 <cls>:2",
        pair="$A:0 <sep>:0 $B:1 <sep>:1 <cls>:2",
        special_tokens=[("<sep>", sep), ("<cls>", cls)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        sep_token="<sep>",
        pad_token="<pad>",
        cls_token="<cls>",
        mask_token="<mask>",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        model_max_length=512,
    )


def _family(family: str, lines: Sequence[str]) -> tuple[PreTrainedTokenizerFast, PreTrainedModel]:
    """The tokenizer and the random-init model (seeded) of one tiny family."""
    # Imported here: the model classes cost seconds, and a model already built (the usual
    # case: every check and every training after the first) is only read from its directory.
    import torch
    from transformers import (
        BertConfig,
        BertModel,
        ElectraConfig,
        ElectraModel,
        GPT2Config,
        GPT2Model,
        Qwen2Config,
        Qwen2Model,
        RobertaConfig,
        RobertaModel,
        XLNetConfig,
        XLNetModel,
    )

    config: PretrainedConfig
    model_cls: type[PreTrainedModel]
    width = {"hidden_size": ARCH["hidden_size"], "num_hidden_layers": ARCH["num_hidden_layers"]}
    heads, inner = ARCH["num_attention_heads"], ARCH["intermediate_size"]
    if family in ("bert", "electra"):
        tokenizer = _train_wordpiece(lines)
        config_cls, model_cls = (
            (BertConfig, BertModel) if family == "bert" else (ElectraConfig, ElectraModel)
        )
        extra = {} if family == "bert" else {"embedding_size": ARCH["hidden_size"]}
        config = config_cls(vocab_size=len(tokenizer), max_position_embeddings=512, **ARCH, **extra)
    elif family == "roberta":
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
    elif family == "gpt2":
        tokenizer = _train_decoder_bpe(lines, "<|endoftext|>", pad=False)
        eos = tokenizer.eos_token_id
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=512,
            n_embd=width["hidden_size"],
            n_layer=width["num_hidden_layers"],
            n_head=heads,
            n_inner=inner,
            bos_token_id=eos,
            eos_token_id=eos,
        )
        model_cls = GPT2Model
    elif family == "qwen2":
        tokenizer = _train_decoder_bpe(lines, "<|endoftext|>", pad=True)
        config = Qwen2Config(
            vocab_size=len(tokenizer),
            max_position_embeddings=512,
            num_attention_heads=heads,
            num_key_value_heads=heads // 2,
            intermediate_size=inner,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            **width,
        )
        model_cls = Qwen2Model
    else:  # xlnet
        tokenizer = _train_unigram(lines)
        config = XLNetConfig(
            vocab_size=len(tokenizer),
            d_model=width["hidden_size"],
            n_layer=width["num_hidden_layers"],
            n_head=heads,
            d_inner=inner,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        model_cls = XLNetModel
    torch.manual_seed(0)
    return tokenizer, model_cls(config)  # type: ignore[arg-type]  # the config matches model_cls


def _build(family: str, lines: Sequence[str], out: Path) -> None:
    tokenizer, model = _family(family, lines)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "headbench_tiny.json").write_text(
        json.dumps({"family": family, "recipe": RECIPE_VERSION, "trained": False}) + "\n"
    )


def build_tiny_model(family: str) -> Path:
    """Build (once) and return the directory of a tiny random-init encoder.

    Args:
        family: One of :data:`FAMILIES` (see the module docstring).

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
