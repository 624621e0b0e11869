"""Heads: shapes, padding invariance, widths, learned scalar mix, clear errors."""

from __future__ import annotations

import pytest
import torch

from bench.errors import ConfigError
from bench.model.heads import HEADS, build_head

H, L, C = 16, 4, 3


def hidden_states(batch: int = 3, length: int = 7, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, length, H, generator=gen) for _ in range(L + 1))


def mask_for(lengths: list[int], total: int) -> torch.Tensor:
    return torch.tensor([[1] * n + [0] * (total - n) for n in lengths])


HEAD_CONFIGS = [
    {"name": "linear"},
    {"name": "pooler", "init": "random"},
    {"name": "last4_concat"},
    {"name": "last4_concat", "mlp": True},
    {"name": "bilstm", "lstm_hidden": 10},
    {"name": "bilstm", "lstm_hidden": 10, "lstm_layers": 2, "pool": "mean"},
    {"name": "bilstm", "lstm_hidden": 10, "pool": "max"},
    {"name": "bilstm", "lstm_hidden": 10, "pool": "cls"},
    {"name": "linear", "layers": [0, -2], "combine": "mean", "pool": "mean"},
    {"name": "linear", "layers": [-1, -2, -3], "combine": "scalar_mix", "pool": "max"},
    {"name": "pooler", "layers": [-1, -2], "combine": "sum"},
    {"name": "linear", "layers": [-4, -3, -2, -1], "combine": "max"},
]


def test_registry_has_the_four_heads():
    assert set(HEADS) == {"linear", "pooler", "last4_concat", "bilstm"}


@pytest.mark.parametrize("cfg", HEAD_CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_output_shape(cfg):
    head = build_head(cfg, H, L, C).eval()
    states = hidden_states()
    logits = head(states, mask_for([7, 4, 1], 7))
    assert logits.shape == (3, C)
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("cfg", HEAD_CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_logits_unchanged_by_extra_padding(cfg):
    """Appending padding positions (with garbage in them) must not change any logit."""
    head = build_head(cfg, H, L, C).eval()
    lengths = [7, 4, 2]
    states = hidden_states()
    base = head(states, mask_for(lengths, 7))
    garbage = torch.randn(3, 5, H) * 100
    padded = tuple(torch.cat([s, garbage], dim=1) for s in states)
    more = head(padded, mask_for(lengths, 12))
    torch.testing.assert_close(more, base, rtol=1e-5, atol=1e-5)


def test_bilstm_padding_never_reaches_output_even_inside_the_sequence_mask():
    """Garbage *inside* the padded region of a short row must not matter either."""
    head = build_head({"name": "bilstm", "lstm_hidden": 10}, H, L, C).eval()
    states = hidden_states()
    mask = mask_for([7, 3, 5], 7)
    noisy = tuple(s.clone() for s in states)
    for s in noisy:
        s[1, 3:] = 1e3
        s[2, 5:] = -1e3
    torch.testing.assert_close(head(noisy, mask), head(states, mask))


def test_last4_concat_input_width_is_4h():
    head = build_head({"name": "last4_concat"}, H, L, C)
    assert head.in_dim == 4 * H
    assert head.classifier.out.in_features == 4 * H
    mlp = build_head({"name": "last4_concat", "mlp": True}, H, L, C)
    assert mlp.classifier.dense.in_features == 4 * H
    assert mlp.classifier.dense.out_features == H


def test_sizes_follow_the_encoder():
    for hidden in (8, 24):
        head = build_head({"name": "bilstm", "lstm_hidden": 6}, hidden, 2, 2)
        assert head.lstm.lstm.input_size == hidden
        assert build_head({"name": "pooler"}, hidden, 2, 2).classifier.dense.in_features == hidden


def test_scalar_mix_weights_are_learned():
    head = build_head(
        {"name": "linear", "layers": [0, 1, 2, 3, 4], "combine": "scalar_mix"}, H, L, C
    )
    before = head.select.mix.weights.detach().clone()
    gamma = head.select.mix.gamma.detach().clone()
    opt = torch.optim.SGD(head.parameters(), lr=0.5)
    states = hidden_states()
    loss = torch.nn.functional.cross_entropy(
        head(states, mask_for([7, 7, 7], 7)), torch.tensor([0, 1, 2])
    )
    loss.backward()
    assert head.select.mix.weights.grad.abs().sum() > 0
    opt.step()
    assert not torch.equal(head.select.mix.weights, before)
    assert not torch.equal(head.select.mix.gamma, gamma)


def test_layers_index_zero_is_embeddings_and_negative_counts_from_top():
    states = hidden_states(batch=2, length=3)
    mask = mask_for([3, 3], 3)
    emb = build_head({"name": "linear", "layers": [0], "dropout": 0.0}, H, L, C).eval()
    top = build_head({"name": "linear", "layers": [-1], "dropout": 0.0}, H, L, C).eval()
    top.load_state_dict(emb.state_dict())
    expected = emb.classifier.out(states[0][:, 0])
    torch.testing.assert_close(emb(states, mask), expected)
    torch.testing.assert_close(top(states, mask), emb.classifier.out(states[L][:, 0]))


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        ({"name": "transformer"}, "valid choices: linear, pooler, last4_concat, bilstm"),
        ({"name": "linear", "lstm_hidden": 3}, "valid options"),
        ({"name": "linear", "layers": [5]}, "valid indices"),
        ({"name": "linear", "combine": "avg"}, "valid choices: concat, mean, max, sum, scalar_mix"),
        ({"name": "bilstm", "pool": "first"}, "valid choices: final, mean, max, cls"),
        ({"name": "pooler", "init": "copy"}, "valid choices: random, pretrained"),
        ({"name": "pooler", "init": "pretrained", "layers": [-1, -2]}, "needs input width"),
        ({"name": "bilstm", "lstm_hidden": 7}, "must be even"),
    ],
)
def test_bad_head_options_raise_clear_errors(cfg, needle):
    with pytest.raises(ConfigError, match=needle):
        build_head(cfg, H, L, C)


def test_max_combine_takes_the_element_wise_maximum_over_layers():
    from bench.model.heads.layers import LayerSelect

    select = LayerSelect([-2, -1], "max", H, L)
    states = hidden_states()
    expected = torch.maximum(states[-2], states[-1])
    assert select.out_dim == H and torch.equal(select(states), expected)
