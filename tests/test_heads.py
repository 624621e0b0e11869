"""Heads: shapes, padding invariance, widths, learned scalar mix, clear errors.

The ``mean_linear`` control is also checked end to end: composed by Hydra, on a tiny
random-init BERT, against a NumPy mean of the unpadded last-layer states.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from bench.axes.layers import describe_selection
from bench.data.tasks import get_task
from bench.errors import ConfigError
from bench.model.encoders import load_encoder, load_tokenizer
from bench.model.heads import HEADS, build_head, build_token_head
from bench.model.heads.mean_linear import MeanLinearHead
from bench.model.heads.token import TokenLinearHead, TokenMeanLinearHead

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
    {"name": "mean_linear"},
    {"name": "mean_linear", "layers": "concat_last4"},
]


def test_registry_has_the_four_heads_and_the_mean_pooled_control():
    assert list(HEADS) == ["linear", "pooler", "last4_concat", "bilstm", "mean_linear"]


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
        (
            {"name": "transformer"},
            "valid choices: linear, pooler, last4_concat, bilstm, mean_linear",
        ),
        ({"name": "linear", "lstm_hidden": 3}, "valid options"),
        ({"name": "linear", "layers": [5]}, "valid indices"),
        ({"name": "linear", "combine": "avg"}, "valid choices: concat, mean, max, sum, scalar_mix"),
        ({"name": "bilstm", "pool": "first"}, "valid choices: final, mean, max, cls"),
        ({"name": "pooler", "init": "copy"}, "valid choices: random, pretrained"),
        ({"name": "pooler", "init": "pretrained", "layers": [-1, -2]}, "needs input width"),
        ({"name": "bilstm", "lstm_hidden": 7}, "must be even"),
        ({"name": "mean_linear", "pool": "cls"}, r"pools by mean; valid choice: mean"),
        ({"name": "mean_linear", "mlp": True}, "valid options"),
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


# --- the mean_linear control ---------------------------------------------------------------


def plain_head(cfg) -> dict:
    return OmegaConf.to_container(cfg.head, resolve=True)


@pytest.mark.parametrize("task", ["sst2", "stsb"])
def test_mean_linear_composes_for_a_glue_task_as_a_mean_pool_into_one_linear_layer(
    compose_cfg, task
):
    cfg = compose_cfg(f"task={task}", "head=mean_linear")
    head_cfg = plain_head(cfg)
    assert head_cfg == {
        "name": "mean_linear",
        "label": "mean_linear",
        "layers": [-1],
        "combine": "concat",
        "pool": "mean",
        "dropout": 0.1,
    }
    spec = get_task(task)
    head = build_head(head_cfg, H, L, spec.num_labels)
    assert type(head) is MeanLinearHead and head.pool == "mean"
    assert head.select.layers == [L] and head.lstm is None and head.classifier.dense is None
    assert (head.classifier.out.in_features, head.classifier.out.out_features) == (
        H,
        spec.num_labels,
    )
    relabelled = plain_head(compose_cfg(f"task={task}", "head=mean_linear", "head.layers=[-2]"))
    assert relabelled["label"] == f"mean_linear-{describe_selection([-2], 'concat')}"


def test_mean_linear_on_conll_classifies_every_token_like_linear(compose_cfg):
    cfg = compose_cfg("task=conll2003", "head=mean_linear")
    head_cfg = plain_head(cfg)
    assert head_cfg["pool"] is None and head_cfg["label"] == "mean_linear"
    names = get_task("conll2003").label_names
    head = build_token_head(head_cfg, H, L, names).eval()
    assert type(head) is TokenMeanLinearHead
    linear = build_token_head(plain_head(compose_cfg("task=conll2003", "head=linear")), H, L, names)
    assert type(linear) is TokenLinearHead
    linear.load_state_dict(head.state_dict())  # the very same parameters, nothing pooled
    states = hidden_states(batch=2, length=6)
    mask = mask_for([6, 3], 6)
    logits = head(states, mask)
    assert logits.shape == (2, 6, len(names))
    torch.testing.assert_close(logits, linear.eval()(states, mask), rtol=0, atol=0)


@torch.no_grad()
def test_mean_linear_on_a_tiny_bert_ignores_padding_and_is_the_mean_of_the_real_tokens(
    compose_cfg,
):
    cfg = compose_cfg("encoder=tiny_bert", "task=sst2", "head=mean_linear")
    encoder_cfg = OmegaConf.to_container(cfg.encoder, resolve=True)
    encoder, info = load_encoder(encoder_cfg)
    tokenizer = load_tokenizer(encoder_cfg)
    torch.manual_seed(0)
    head = build_head(plain_head(cfg), info.hidden_size, info.num_layers, 2)
    encoder.eval()
    head.eval()
    short = "The parser reads the file."
    long = "A much longer sentence that spans many more tokens than the first one ever could."

    alone = tokenizer([short], return_tensors="pt")
    alone_states = encoder(**alone).hidden_states
    alone_logits = head(alone_states, alone["attention_mask"])

    batch = tokenizer([short, long], return_tensors="pt", padding=True)
    n = int(alone["attention_mask"].sum())
    assert batch["attention_mask"][0].tolist() == [1] * n + [0] * (
        batch["attention_mask"].shape[1] - n
    )
    assert batch["attention_mask"].shape[1] > n  # the short sentence really is padded
    batch_states = encoder(**batch).hidden_states
    batch_logits = head(batch_states, batch["attention_mask"])
    torch.testing.assert_close(batch_logits[:1], alone_logits, rtol=0, atol=1e-5)

    # Direct: NumPy mean of the unpadded last-layer states through the head's linear layer.
    weight = head.classifier.out.weight.numpy().astype(np.float64)
    bias = head.classifier.out.bias.numpy().astype(np.float64)
    last = alone_states[-1][0].numpy().astype(np.float64)  # (n, H), no padding at all
    assert last.shape == (n, info.hidden_size) and len(alone_states) == info.num_layers + 1
    expected = last.mean(axis=0) @ weight.T + bias
    np.testing.assert_allclose(alone_logits[0].numpy(), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(batch_logits[0].numpy(), expected, rtol=0, atol=1e-5)
    # The check has teeth: averaging the padded positions too gives other logits.
    naive = batch_states[-1][0].numpy().astype(np.float64).mean(axis=0) @ weight.T + bias
    assert np.abs(naive - expected).max() > 1e-3
