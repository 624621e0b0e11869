"""Cross-check with Hugging Face's own heads: same weights, same input, same logits."""

from __future__ import annotations

import torch
from transformers import BertForSequenceClassification, BertModel, RobertaForSequenceClassification

from bench.model.encoders import load_tokenizer
from bench.model.module import HeadbenchModule
from bench.model.tiny import build_tiny_model

OPTIM = {"encoder_lr": 1e-5, "head_lr": 1e-3, "weight_decay": 0.0, "warmup_ratio": 0.0}
PAIRS = (
    [
        "The cat sat on the mat.",
        "A very long sentence that needs more tokens than the first one does",
    ],
    ["A cat is sitting.", "Short."],
)


def _pooler_module(enc_cfg, init, task):
    head = {"name": "pooler", "init": init}
    return HeadbenchModule(
        encoder=enc_cfg, head=head, freeze={"name": "full"}, task=task, optim=OPTIM
    )


def _batch(source_cfg):
    tok = load_tokenizer(source_cfg)
    return dict(tok(*PAIRS, padding=True, return_tensors="pt"))


def _bert_with_trained_pooler(tmp_path):
    """The tiny BERT with a pooler whose bias is non-zero, as a trained one would be."""
    model = BertModel.from_pretrained(build_tiny_model("bert"))
    with torch.no_grad():
        model.pooler.dense.bias.normal_(0, 0.1)
    model.save_pretrained(tmp_path)
    load_tokenizer({"name": "tiny", "source": "tiny:bert"}).save_pretrained(tmp_path)
    return {"name": "bert_trained_pooler", "source": str(tmp_path), "pooler": "trained"}


def test_pooler_pretrained_equals_bert_for_sequence_classification(tmp_path):
    enc_cfg = _bert_with_trained_pooler(tmp_path)
    peer = BertForSequenceClassification.from_pretrained(enc_cfg["source"], num_labels=3).eval()
    ours = _pooler_module(enc_cfg, "pretrained", "mnli").eval()
    # The pooler came from the checkpoint by the init=pretrained path; copy only the classifier.
    torch.testing.assert_close(ours.head.classifier.dense.weight, peer.bert.pooler.dense.weight)
    with torch.no_grad():
        ours.head.classifier.out.weight.copy_(peer.classifier.weight)
        ours.head.classifier.out.bias.copy_(peer.classifier.bias)
    batch = _batch(enc_cfg)
    with torch.no_grad():
        expected = peer(**batch).logits
        got = ours(batch)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_pooler_random_equals_roberta_classification_head():
    enc_cfg = {"name": "tiny_roberta", "source": "tiny:roberta", "pooler": "untrained"}
    peer = RobertaForSequenceClassification.from_pretrained(
        build_tiny_model("roberta"), num_labels=2
    ).eval()
    ours = _pooler_module(enc_cfg, "random", "rte").eval()
    with torch.no_grad():
        ours.head.classifier.dense.weight.copy_(peer.classifier.dense.weight)
        ours.head.classifier.dense.bias.copy_(peer.classifier.dense.bias)
        ours.head.classifier.out.weight.copy_(peer.classifier.out_proj.weight)
        ours.head.classifier.out.bias.copy_(peer.classifier.out_proj.bias)
    batch = _batch(enc_cfg)
    assert batch["attention_mask"].sum(1).min() < batch["attention_mask"].shape[1]  # padding
    with torch.no_grad():
        expected = peer(**batch).logits
        got = ours(batch)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_pretrained_pooler_refused_where_the_checkpoint_has_no_trained_pooler():
    import pytest

    from bench.errors import EncoderError

    with pytest.raises(EncoderError, match=r"needs a trained pooler.*use head\.init=random"):
        _pooler_module(
            {"name": "tiny_bert", "source": "tiny:bert", "pooler": "untrained"},
            "pretrained",
            "sst2",
        )
