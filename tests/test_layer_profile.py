"""The per-layer probe's profile and its README paragraph, against NumPy and scipy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from test_tables import _cell

from bench.report.context import build_context
from bench.report.inputs import ReportInputs
from bench.report.layer_profile import profile_section, profile_sentence
from bench.report.sections import layer_section
from bench.results import stats
from bench.results.layer_profile import last_layer_drop, paper_last_drop, profile_rows
from bench.results.references import load_references

#: Made-up per-seed dev F1 of a linear probe on layers 0..3: layer 2 peaks, 3 falls.
F1 = {
    0: [0.50, 0.52, 0.51, 0.49],
    1: [0.60, 0.61, 0.63, 0.60],
    2: [0.66, 0.65, 0.67, 0.66],
    3: [0.58, 0.60, 0.57, 0.59],
}


def _table(f1: dict[int, list[float]]) -> pd.DataFrame:
    rows = []
    for layer, values in f1.items():
        for seed, value in enumerate(values, start=1):
            rows += _cell(
                "conll2003",
                "minilm",
                f"linear-L{layer}",
                "frozen",
                seed,
                {"f1": value},
                head="linear",
                layers=str(layer),
                main="f1",
            )
    return pd.DataFrame(rows)


def _geometry(shares: list[float]) -> dict[str, object]:
    return {
        "words": 1234,
        "sentences": 50,
        "layers": {
            str(j): {"sentence_share": s, "word_to_sentence_cos": 0.5, "anisotropy": 0.1 * j}
            for j, s in enumerate(shares)
        },
    }


def test_profile_rows_are_the_seed_means_with_student_t_intervals():
    rows = profile_rows(_table(F1)).set_index("layer")
    for layer, values in F1.items():
        x = 100 * np.array(values)
        low, high = sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x))
        assert rows.loc[layer, "mean"] == pytest.approx(x.mean())
        assert rows.loc[layer, ["t_low", "t_high"]].tolist() == pytest.approx([low, high])
        assert rows.loc[layer, "n"] == len(x)


def test_last_layer_drop_is_a_paired_t_test_against_the_layer_before():
    drop = last_layer_drop(_table(F1)).iloc[0]
    last, before = np.array(F1[3]), np.array(F1[2])
    res = sps.ttest_rel(last, before)
    assert drop["peak"] == 2 and drop["last"] == 3 and drop["n"] == 4
    assert drop["drop"] == pytest.approx(100 * (last - before).mean())
    assert drop["p"] == pytest.approx(res.pvalue)
    ci = res.confidence_interval(0.95)
    assert [drop["low"], drop["high"]] == pytest.approx([100 * ci.low, 100 * ci.high])


def test_the_paper_drop_comes_from_references_csv():
    refs = load_references()
    paper = refs[(refs.task == "conll2003") & (refs.split == "dev")].set_index("setting")
    expected = paper.loc["last", "value"] - paper.loc["second_to_last", "value"]
    assert paper_last_drop(refs) == pytest.approx(float(expected))
    assert np.isnan(paper_last_drop(refs[refs.task != "conll2003"]))


def test_the_paragraph_says_both_point_the_same_way_only_when_they_do():
    refs = load_references()
    table = _table(F1)
    pulled = profile_sentence(table, refs, _geometry([0.1, 0.12, 0.15, 0.3]))
    assert pulled is not None
    assert "reads best at layer 2" in pulled and "Both point the same way" in pulled
    assert f"{100 * (np.mean(F1[2]) - np.mean(F1[3])):.1f} points below layer 2" in pulled
    assert "0.30 at the last layer against at most 0.15" in pulled
    not_pulled = profile_sentence(table, refs, _geometry([0.1, 0.4, 0.15, 0.3]))
    assert not_pulled is not None and "do not point the same way" in not_pulled
    flat = {**F1, 3: F1[2]}  # no drop at the last layer
    no_drop = profile_sentence(_table(flat), refs, _geometry([0.1, 0.12, 0.15, 0.3]))
    assert no_drop is not None and "do not point the same way" in no_drop


def test_the_section_has_one_row_per_layer_and_nothing_without_a_probe():
    refs = load_references()
    section = profile_section(_table(F1), refs, _geometry([0.1, 0.12, 0.15, 0.3]))
    rows = [line for line in section.splitlines() if line.startswith("| minilm")]
    assert len(rows) == len(F1) and "0 (embeddings)" in rows[0] and "0.300" in rows[-1]
    assert "No geometry.json" in profile_section(_table(F1), refs, None)
    bilstm = _table(F1).assign(head="bilstm")
    assert profile_section(bilstm, refs, None) == ""


def test_the_report_layer_section_shows_the_profile_and_the_geometry():
    table = stats.normalize_table(_table(F1))
    inputs = ReportInputs(source="probe", table=table, history=pd.DataFrame(), cells=[], launch={})
    plain = layer_section(build_context(inputs)).body
    assert "Layer profile" in plain and "Sentence share" not in plain
    inputs.geometry = _geometry([0.1, 0.12, 0.15, 0.3])
    body = layer_section(build_context(inputs)).body
    assert "Both point the same way" in body and "0.300" in body and "Sentence share" in body
