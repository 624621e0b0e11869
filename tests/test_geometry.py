"""The geometry of word states per layer: arithmetic against independent computations,
and the command on a real (tiny) encoder over the real CoNLL-2003 files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.distance import cosine

from bench.results.geometry import GEOMETRY_FILE, geometry_rows, layer_geometry, read_geometry
from bench.run import geometry

RNG = np.random.default_rng(7)


def _words(n_sentences: int = 12, hidden: int = 5) -> tuple[np.ndarray, np.ndarray]:
    lengths = RNG.integers(2, 9, size=n_sentences)
    sentence = np.repeat(np.arange(n_sentences) * 3 + 100, lengths)  # ids need not be 0..n-1
    centres = RNG.normal(size=(n_sentences, hidden)) * 2
    states = np.repeat(centres, lengths, axis=0) + RNG.normal(size=(len(sentence), hidden))
    return states, sentence


def test_sentence_share_is_the_between_sentence_share_of_variance():
    states, sentence = _words()
    frame = pd.DataFrame(states).assign(s=sentence)
    within = frame.groupby("s").transform(lambda c: c - c.mean()).to_numpy()
    total = ((states - states.mean(axis=0)) ** 2).sum()
    expected = 1 - (within**2).sum() / total  # between = total - within (ANOVA identity)
    assert layer_geometry(states, sentence)["sentence_share"] == pytest.approx(expected)


def test_word_to_sentence_cosine_against_scipy():
    states, sentence = _words()
    means = pd.DataFrame(states).groupby(sentence).transform("mean").to_numpy()
    expected = np.mean([1 - cosine(x, m) for x, m in zip(states, means, strict=True)])
    got = layer_geometry(states, sentence)["word_to_sentence_cos"]
    assert got == pytest.approx(expected)


def test_anisotropy_reads_pairs_from_different_sentences_only():
    # two sentences: every word of one is +v, of the other -v; a pair within a sentence
    # would have cosine 1, so any such pair would lift the mean above -1
    v = np.array([1.0, 2.0, -0.5])
    states = np.vstack([np.tile(v, (5, 1)), np.tile(-v, (4, 1))])
    sentence = np.array([0] * 5 + [1] * 4)
    figures = layer_geometry(states, sentence, n_pairs=2000)
    assert figures["anisotropy"] == pytest.approx(-1.0)
    assert figures["sentence_share"] == pytest.approx(1.0)  # every word is its sentence mean
    assert figures["word_to_sentence_cos"] == pytest.approx(1.0)


def test_no_sentence_component_gives_share_zero():
    states = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    sentence = np.array([0, 0, 1, 1])  # both sentence means are the grand mean
    assert layer_geometry(states, sentence)["sentence_share"] == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("states", "sentence", "message"),
    [
        (np.zeros((4, 3)), np.zeros(3), "do not match"),
        (np.zeros((4, 3)), np.zeros(4), "at least two sentences"),
    ],
)
def test_bad_input_is_named(states, sentence, message):
    with pytest.raises(ValueError, match=message):
        layer_geometry(states, sentence)


def test_the_command_measures_every_layer_of_a_real_encoder(tmp_path, data_dir, capsys):
    out = tmp_path / GEOMETRY_FILE
    overrides = [
        "encoder=tiny_bert",
        f"data.dir={data_dir}",
        "data.train_size=60",
        "selection.size=40",
    ]
    code = geometry.main(["results/fair_table7_probe", "--out", str(out), *overrides])
    assert code == 0
    payload = json.loads(out.read_text())
    assert payload["overrides"] == overrides
    assert payload["split"] == "select" and payload["sentences"] == 40
    # every word of the 40 held-out sentences, read once per layer
    frame = geometry_rows(payload)
    assert list(frame["layer"]) == list(range(payload["encoder"]["num_layers"] + 1))
    assert frame["sentence_share"].between(0, 1).all()
    assert payload["words"] > payload["sentences"]
    assert "wrote" in capsys.readouterr().out
    # the file is never replaced silently
    assert geometry.main(["results/fair_table7_probe", "--out", str(out), *overrides]) == 2
    assert "--force" in capsys.readouterr().err
    assert read_geometry(tmp_path) == payload


def test_a_sequence_task_or_an_unknown_experiment_is_refused(tmp_path, capsys):
    out = str(tmp_path / "g.json")
    assert geometry.main(["results/nothing_like_it", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "conf/experiment/nothing_like_it.yaml" in err and "fair_table7_probe" in err
    assert geometry.main(["results/fair_heads", "--out", out, "encoder=tiny_bert"]) == 2
    assert "has no words to read" in capsys.readouterr().err
