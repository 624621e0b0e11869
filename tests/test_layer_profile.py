"""The per-layer probe's profile and its README paragraph, against NumPy and scipy."""

from __future__ import annotations

import json

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
from bench.results.layer_profile import last_layer_drop, profile_rows
from bench.results.references import load_references
from bench.results.table7_agreement import paper_last_gap
from conftest import ROOT, holm_reference

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
    assert paper_last_gap(refs) == pytest.approx(float(expected))
    assert np.isnan(paper_last_gap(refs[refs.task != "conll2003"]))


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


#: Layer 1 close behind layer 2 (not significant after Holm), the others far below.
CLOSE = {**F1, 1: [0.655, 0.652, 0.668, 0.662]}


def test_a_best_layer_not_significantly_ahead_of_another_is_named_as_a_tie():
    refs = load_references()
    text = profile_sentence(_table(CLOSE), refs, None)
    assert text is not None
    # independently: layer 2 against each other layer, paired t-test, Holm over the three
    peak = np.array(CLOSE[2])
    tests = {k: sps.ttest_rel(peak, v) for k, v in CLOSE.items() if k != 2}
    holm = dict(
        zip(tests, holm_reference(np.array([t.pvalue for t in tests.values()])), strict=True)
    )
    assert holm[1] >= 0.05 and holm[0] < 0.05 and holm[3] < 0.05
    assert "reads best at layers 2 and 1, a tie" in text
    gap = 100 * (peak - np.array(CLOSE[1])).mean()
    assert f"layer 1 reading {gap:.1f} points below layer 2" in text
    assert f"p = {holm[1]:.2g}" in text
    sim = tests[1].confidence_interval(1 - 0.05 / 3)
    assert f"Bonferroni: {100 * sim.low:.1f} to {100 * sim.high:.1f}" in text
    assert "every other layer reads significantly below layer 2" in text
    # where every other layer is significantly below, one layer is named
    clear = profile_sentence(_table(F1), refs, None)
    assert clear is not None and "reads best at layer 2 (66.0 dev F1; every other" in clear
    assert "a tie" not in clear


def test_with_one_seed_the_best_layer_is_not_told_apart_from_the_others():
    one = {layer: values[:1] for layer, values in F1.items()}
    text = profile_sentence(_table(one), load_references(), None)
    assert text is not None and "a tie" not in text
    assert "reads best at layer 2 (66.0 dev F1); with too few paired seeds for a test" in text
    assert "within what one run can tell apart" in text
    assert "layer 1 (60.0)" in text


PROBE = ROOT / "results" / "fair_table7_probe"


@pytest.mark.skipif(not (PROBE / "results.csv").is_file(), reason="probe not run")
def test_the_committed_probe_reads_best_at_a_tie_of_layers_3_and_4():
    table = pd.read_csv(PROBE / "results.csv")
    dev = table[(table.split == "dev") & (table.metric == "f1") & (table.status == "ok")]
    wide = dev.pivot_table(index="seed", columns="layers", values="value")
    means = wide.mean().sort_values(ascending=False)
    peak, second = int(means.index[0]), int(means.index[1])
    assert (peak, second) == (3, 4)
    others = [k for k in wide.columns if int(k) != peak]
    p = np.array([sps.ttest_rel(wide[peak], wide[k]).pvalue for k in others])
    holm = dict(zip((int(k) for k in others), holm_reference(p), strict=True))
    tied = sorted(k for k, v in holm.items() if v >= 0.05)
    assert tied == [4]  # 0.1 points apart, p = 0.7: a tie, not a best layer
    geometry = json.loads((PROBE / "geometry.json").read_text())
    text = profile_sentence(stats.normalize_table(table), load_references(), geometry)
    assert text is not None
    gap = 100 * (wide[3] - wide[4]).mean()
    assert (
        f"reads best at layers 3 and 4, a tie: {100 * means[3]:.1f} and {100 * means[4]:.1f} "
        f"dev F1, layer 4 reading {gap:.1f} points below layer 3"
    ) in text
    assert f"p = {holm[4]:.2g}" in text and "reads best at layer 3 (" not in text
