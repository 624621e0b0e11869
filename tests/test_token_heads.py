"""Token heads and named layer choices: shapes, padding invariance, CRF validity, clear errors."""

from __future__ import annotations

import pytest
import torch

from bench.axes.layers import LAYER_CHOICES, describe_layers, resolve_layers
from bench.data.conll import is_valid_iob2
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.heads import TOKEN_HEADS, build_head, build_token_head
from bench.model.heads.layers import LayerSelect
from bench.model.heads.token import gather_words

H, L = 16, 4
NAMES = get_task("conll2003").label_names
C = len(NAMES)


def hidden_states(batch: int = 3, length: int = 9, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, length, H, generator=gen) for _ in range(L + 1))


def mask_for(lengths: list[int], total: int) -> torch.Tensor:
    return torch.tensor([[1] * n + [0] * (total - n) for n in lengths])


def word_pos_for(lengths: list[int], width: int) -> torch.Tensor:
    """Words at tokens 1, 2, ... n-2 (special tokens at both ends), padded with -1."""
    rows = [list(range(1, n - 1)) for n in lengths]
    return torch.tensor([r + [-1] * (width - len(r)) for r in rows])


TOKEN_CONFIGS = [
    {"name": "linear"},
    {"name": "linear", "crf": True},
    {"name": "pooler", "init": "random"},
    {"name": "last4_concat"},
    {"name": "last4_concat", "mlp": True, "crf": True},
    {"name": "bilstm", "lstm_hidden": 10},
    {"name": "bilstm", "lstm_hidden": 10, "crf": True, "layers": "concat_last4"},
    {"name": "bilstm", "lstm_hidden": 10, "layers": "sum_all"},
    {"name": "linear", "layers": "sum_last4"},
]


def ids(cfg):
    return "-".join(f"{k}={v}" for k, v in cfg.items())


def test_token_registry_reuses_the_sequence_head_names():
    assert set(TOKEN_HEADS) == {"linear", "pooler", "last4_concat", "bilstm", "mean_linear"}


@pytest.mark.parametrize("cfg", TOKEN_CONFIGS, ids=ids)
def test_per_token_logits_loss_and_decode(cfg):
    head = build_token_head(cfg, H, L, NAMES)
    lengths = [9, 5, 3]
    logits = head(hidden_states(), mask_for(lengths, 9))
    assert logits.shape == (3, 9, C)
    word_pos = word_pos_for(lengths, 7)
    labels = torch.zeros(3, 7, dtype=torch.long).masked_fill(word_pos < 0, -100)
    loss = head.loss(logits, word_pos, labels)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    preds = head.eval().decode(logits, word_pos)
    assert preds.shape == (3, 7)
    assert ((preds >= 0) == (word_pos >= 0)).all()


def test_token_bilstm_defaults_to_the_papers_two_layer_768_wide_model():
    head = build_token_head({"name": "bilstm"}, H, L, NAMES)
    assert head.lstm is not None
    assert head.lstm.lstm.num_layers == 2 and head.lstm.out_dim == 768
    assert head.classifier.out.in_features == 768 and head.classifier.dense is None


def test_head_widths_follow_the_layer_choice():
    assert build_token_head({"name": "last4_concat"}, H, L, NAMES).in_dim == 4 * H
    pooler = build_token_head({"name": "pooler"}, H, L, NAMES)
    assert pooler.classifier.dense is not None and pooler.classifier.dense.out_features == H
    bilstm = build_token_head({"name": "bilstm", "layers": "concat_last4"}, H, L, NAMES)
    assert bilstm.lstm.lstm.input_size == 4 * H


@pytest.mark.parametrize("cfg", TOKEN_CONFIGS, ids=ids)
def test_outputs_unchanged_when_padding_is_added(cfg):
    """More padding (with garbage in it) changes no word's logits or loss."""
    head = build_token_head(cfg, H, L, NAMES).eval()
    lengths = [9, 5, 3]
    states = hidden_states()
    word_pos = word_pos_for(lengths, 7)
    labels = torch.randint(0, C, (3, 7), generator=torch.Generator().manual_seed(1))
    labels = labels.masked_fill(word_pos < 0, -100)
    base = head(states, mask_for(lengths, 9))
    garbage = torch.randn(3, 6, H) * 100
    padded = tuple(torch.cat([s, garbage], dim=1) for s in states)
    more = head(padded, mask_for(lengths, 15))
    wider_pos = torch.cat([word_pos, torch.full((3, 4), -1)], dim=1)
    wider_labels = torch.cat([labels, torch.full((3, 4), -100)], dim=1)
    torch.testing.assert_close(
        gather_words(more, wider_pos)[0][:, :7], gather_words(base, word_pos)[0]
    )
    torch.testing.assert_close(
        head.loss(more, wider_pos, wider_labels), head.loss(base, word_pos, labels)
    )
    assert torch.equal(head.decode(more, wider_pos)[:, :7], head.decode(base, word_pos))


def test_bilstm_padding_inside_the_batch_never_reaches_real_tokens():
    head = build_token_head({"name": "bilstm", "lstm_hidden": 10}, H, L, NAMES).eval()
    states = hidden_states()
    mask = mask_for([9, 4, 6], 9)
    noisy = tuple(s.clone() for s in states)
    for s in noisy:
        s[1, 4:] = 1e3
        s[2, 6:] = -1e3
    real = mask.bool()
    torch.testing.assert_close(head(noisy, mask)[real], head(states, mask)[real])


def test_crf_head_decodes_valid_iob2_even_from_adversarial_logits():
    head = build_token_head({"name": "linear", "crf": True}, H, L, NAMES).eval()
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(32, 12, C, generator=gen) * 3
    inside = [i for i, n in enumerate(NAMES) if n.startswith("I-")]
    logits[..., inside] += 10.0  # I- tags win every argmax
    lengths = torch.randint(3, 13, (32,), generator=gen)
    word_pos = torch.stack(
        [torch.where(torch.arange(11) < n - 2, torch.arange(11) + 1, -1) for n in lengths]
    )
    assert not is_valid_iob2([NAMES[i] for i in logits[0, 1:3].argmax(-1).tolist()])
    for row in head.decode(logits, word_pos).tolist():
        tags = [NAMES[i] for i in row if i >= 0]
        assert is_valid_iob2(tags)


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        ({"name": "linear", "pool": "cls"}, "head.pool='cls'"),
        ({"name": "bilstm", "pool": "final"}, "head.pool='final'"),
        ({"name": "pooler", "init": "pretrained"}, "head.init='pretrained'"),
        ({"name": "linear", "lstm_hidden": 8}, "lstm_hidden"),
        ({"name": "linear", "layers": "penultimate"}, "valid names: embeddings, last"),
        ({"name": "linear", "layers": "sum_last4", "combine": "mean"}, "head.combine='mean'"),
        ({"name": "transformer"}, "valid choices: linear, pooler"),
    ],
)
def test_options_that_make_no_sense_for_tokens_are_named(cfg, needle):
    with pytest.raises(ConfigError) as err:
        build_token_head(cfg, H, L, NAMES)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("name", "indices", "combine"),
    [
        ("embeddings", [0], "concat"),
        ("last", [4], "concat"),
        ("second_to_last", [3], "concat"),
        ("sum_last4", [1, 2, 3, 4], "scalar_mix"),
        ("concat_last4", [1, 2, 3, 4], "concat"),
        ("sum_all", [1, 2, 3, 4], "scalar_mix"),
    ],
)
def test_named_layer_choices(name, indices, combine):
    assert resolve_layers(name, "concat", L) == (indices, combine)
    select = LayerSelect(name, "concat", H, L)
    assert select.out_dim == (4 * H if name == "concat_last4" else H)
    assert (select.mix is not None) == (combine == "scalar_mix")
    assert describe_layers(name, "concat") == name


def test_sum_all_on_a_deeper_encoder_mixes_every_transformer_layer():
    assert resolve_layers("sum_all", "concat", 12)[0] == list(range(1, 13))
    assert set(LAYER_CHOICES) == {
        "embeddings",
        "last",
        "second_to_last",
        "sum_last4",
        "concat_last4",
        "sum_all",
    }


def test_layer_names_work_for_sequence_heads_too():
    states = hidden_states()
    for name in LAYER_CHOICES:
        head = build_head({"name": "bilstm", "lstm_hidden": 10, "layers": name}, H, L, 3).eval()
        assert head(states, mask_for([9, 4, 2], 9)).shape == (3, 3)
    emb = build_head({"name": "linear", "layers": "embeddings"}, H, L, 3).eval()
    direct = build_head({"name": "linear", "layers": [0]}, H, L, 3).eval()
    direct.load_state_dict(emb.state_dict())
    torch.testing.assert_close(
        emb(states, mask_for([9, 9, 9], 9)), direct(states, mask_for([9, 9, 9], 9))
    )
    with pytest.raises(ConfigError, match="valid names"):
        build_head({"name": "linear", "layers": "top"}, H, L, 3)


def test_describe_layers_for_indices():
    assert describe_layers([-1], "concat") == "-1"
    assert describe_layers(-2, "concat") == "-2"
    assert describe_layers([-4, -3, -2, -1], "concat") == "-4,-3,-2,-1:concat"
    assert describe_layers([0, 2], "scalar_mix") == "0,2:scalar_mix"
