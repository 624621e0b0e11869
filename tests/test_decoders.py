"""The same heads on every family: summary token by family, padding side handled exactly.

Tiny random-init models of each family (GPT-2 with byte-level BPE and no pad token, XLNet
with a Unigram tokenizer, a Qwen2-style decoder, ELECTRA, BERT, RoBERTa) are loaded
through the real loader; their tokenizers are trained locally. A sentence encoded alone
must give the same logits as the same sentence padded beside a long one, with the padding
on the right and on the left, for every head (eval mode). Left padding is checked where
the model itself allows it: causal models (positions counted over real tokens) and
XLNet (relative positions). BERT-style models number positions absolutely from the left
edge, so headbench's tokenizers pad right (:func:`bench.model.encoders.load_tokenizer`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from bench.errors import ConfigError, EncoderError
from bench.model.encoders import load_encoder, load_tokenizer, position_ids, run_encoder
from bench.model.heads import HEADS, build_head
from bench.model.heads.pooling import BiLSTMEncoder, masked_pool, summary_index
from conftest import CONF

FAMILIES = {  # tiny encoder option → (summary token, causal)
    "tiny_gpt2": ("last", True),
    "tiny_qwen2": ("last", True),
    "tiny_xlnet": ("last", False),
    "tiny_electra": ("first", False),
    "tiny_bert": ("first", False),
    "tiny_roberta": ("first", False),
}
HEAD_CFGS = [
    {"name": "linear"},
    {"name": "pooler", "init": "random"},
    {"name": "last4_concat"},
    {"name": "bilstm", "lstm_hidden": 16},
    {"name": "bilstm", "lstm_hidden": 16, "pool": "cls"},
    {"name": "bilstm", "lstm_hidden": 16, "pool": "mean"},
    {"name": "mean_linear"},
]
SHORT = "the cat sat"
LONG = "a much longer sentence with many more words than the first one has in it at all"


def encoder_cfg(option: str) -> dict:
    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "encoder" / f"{option}.yaml"))
    assert isinstance(cfg, dict)
    return cfg


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    cfg = encoder_cfg(request.param)
    model, info = load_encoder(cfg)
    return request.param, model.eval(), info, load_tokenizer(cfg)


def test_registry_declares_the_summary_token_and_the_probe_finds_causality(family):
    option, _, info, tokenizer = family
    summary, causal = FAMILIES[option]
    assert (info.summary, info.causal) == (summary, causal)
    assert tokenizer.pad_token is not None
    if option == "tiny_gpt2":  # GPT-2 ships no pad token: EOS pads, the vocabulary is unchanged
        assert tokenizer.pad_token == tokenizer.eos_token
        assert len(tokenizer) == load_encoder(encoder_cfg(option))[0].config.vocab_size


def _batch(tokenizer, texts, side):
    tokenizer.padding_side = side
    try:
        return dict(tokenizer(texts, padding=True, return_tensors="pt"))
    finally:
        tokenizer.padding_side = "right"


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("head_cfg", HEAD_CFGS, ids=lambda c: "-".join(map(str, c.values())))
def test_a_sentence_padded_beside_a_long_one_gives_its_logits_alone(family, head_cfg, side):
    option, model, info, tokenizer = family
    if side == "left" and FAMILIES[option][0] == "first":
        pytest.skip("absolute positions from the left edge: BERT-style models are padded right")
    torch.manual_seed(0)
    head = build_head(head_cfg, info.hidden_size, info.num_layers, 3, info.summary).eval()
    with torch.no_grad():
        alone = _batch(tokenizer, [SHORT], side)
        padded = _batch(tokenizer, [SHORT, LONG], side)
        assert padded["attention_mask"][0].sum() < padded["attention_mask"].shape[1]
        logits_alone = head(
            run_encoder(model, alone, info.causal).hidden_states, alone["attention_mask"]
        )
        out = run_encoder(model, padded, info.causal)
        logits_padded = head(out.hidden_states, padded["attention_mask"])
    torch.testing.assert_close(logits_padded[0], logits_alone[0], rtol=0, atol=1e-5)


def test_the_summary_token_is_the_families_own(family):
    """``pool: cls`` reads [CLS] on BERT-style models and the last real token otherwise."""
    option, model, info, tokenizer = family
    with torch.no_grad():
        for side in ("right", "left"):
            batch = _batch(tokenizer, [SHORT, LONG], side)
            states = run_encoder(model, batch, info.causal).hidden_states[-1]
            pooled = masked_pool(states, batch["attention_mask"], "cls", info.summary)
            ids = batch["input_ids"][0][batch["attention_mask"][0].bool()]
            position = 0 if info.summary == "first" else len(ids) - 1
            real = states[0][batch["attention_mask"][0].bool()]
            torch.testing.assert_close(pooled[0], real[position])
            if option == "tiny_xlnet":  # XLNet's summary token is <cls>, at the end
                assert tokenizer.convert_ids_to_tokens(int(ids[-1])) == "<cls>"
            if option == "tiny_bert":
                assert tokenizer.convert_ids_to_tokens(int(ids[0])) == "[CLS]"


def test_a_causal_model_with_a_first_token_summary_is_refused():
    cfg = {**encoder_cfg("tiny_gpt2"), "summary": "first"}
    with pytest.raises(EncoderError, match=r"causal.*summary: last"):
        load_encoder(cfg)


def test_an_unknown_summary_names_the_valid_choices():
    with pytest.raises(ConfigError, match=r"encoder.summary='middle'.*first, last"):
        load_encoder({**encoder_cfg("tiny_bert"), "summary": "middle"})


@pytest.mark.parametrize("side", ["right", "left"])
def test_summary_index_and_positions_match_numpy(side):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, size=12)
    total = 9
    mask = np.zeros((12, total), dtype=np.int64)
    for row, n in enumerate(lengths):
        if side == "right":
            mask[row, :n] = 1
        else:
            mask[row, total - n :] = 1
    real = [np.flatnonzero(m) for m in mask]
    t = torch.from_numpy(mask)
    assert summary_index(t, "first").tolist() == [r[0] for r in real]
    assert summary_index(t, "last").tolist() == [r[-1] for r in real]
    expected = np.zeros_like(mask)
    for row, r in enumerate(real):
        expected[row, r] = np.arange(len(r))
    got = position_ids(t).numpy()
    assert (got[mask == 1] == expected[mask == 1]).all()


def test_bilstm_reads_left_padding_as_it_reads_right_padding():
    torch.manual_seed(0)
    lstm = BiLSTMEncoder(8, 10, 2, 0.0).eval()
    lengths, total = [5, 2, 7], 7
    states = torch.randn(3, total, 8)
    right = torch.tensor([[1] * n + [0] * (total - n) for n in lengths])
    left = right.flip(1)
    shifted = torch.stack(
        [torch.roll(states[i], total - n, dims=0) for i, n in enumerate(lengths)]
    )  # the same real tokens, moved to the end of each row
    shifted = shifted.masked_fill(left.unsqueeze(-1) == 0, float("nan"))  # garbage padding
    out_r, final_r = lstm(states, right)
    out_l, final_l = lstm(shifted, left)
    torch.testing.assert_close(final_l, final_r)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(out_l[i, total - n :], out_r[i, :n])
        assert (out_l[i, : total - n] == 0).all()


def test_every_head_is_covered():
    assert {c["name"] for c in HEAD_CFGS} == set(HEADS)
