"""The per-layer profile: means from the scores frame, steps and verdicts from the comparisons
frame (read in the right direction), the geometry beside them, the figure and the section."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.report.context import ReportContext
from bench.report.inputs import ReportInputs
from bench.report.layer_profile import layer_section, profile_figure, profile_view
from bench.report.style import Palette
from bench.results import frames, stats
from bench.results.layer_profile import profile_rows
from bench.results.predictions import predictions_table
from conftest import ROOT

#: Made-up per-seed dev F1 of a linear probe on layers 0..3: layer 2 peaks, 3 falls.
F1 = {
    0: [0.50, 0.52, 0.51, 0.49],
    1: [0.60, 0.61, 0.63, 0.60],
    2: [0.66, 0.65, 0.67, 0.66],
    3: [0.58, 0.60, 0.57, 0.59],
}


def _table(f1: dict, head: str = "linear", constant: float = 0.4) -> pd.DataFrame:
    rows = [
        {
            "task": "conll2003",
            "encoder": "minilm",
            "head": head,
            "head_label": f"{head}-L{layer}",
            "layers": str(layer),
            "freeze": "frozen",
            "freeze_label": "frozen",
            "seed": seed,
            "status": "ok",
            "main_metric": "f1",
            "split": "dev",
            "metric": "f1",
            "value": value,
            "best_constant": constant,
        }
        for layer, values in f1.items()
        for seed, value in enumerate(values, start=1)
    ]
    return stats.normalize_table(pd.DataFrame(rows))


def _context(table: pd.DataFrame, geometry: dict | None = None) -> ReportContext:
    scores, comparisons = frames.build(stats.run_values(table), predictions_table([]))
    inputs = ReportInputs("t", table, pd.DataFrame(), [], {}, geometry=geometry)
    return ReportContext(inputs, Palette([], []), pd.DataFrame(), scores, comparisons, False)


def _geometry(encoder: str = "minilm") -> dict:
    return {
        "task": "conll2003",
        "encoder": {"name": encoder},
        "words": 1234,
        "layers": {
            str(j): {"sentence_share": 0.1 * j, "word_to_sentence_cos": 0.5, "anisotropy": 0.01 * j}
            for j in F1
        },
    }


def _stored(comparisons: pd.DataFrame, a: str, b: str) -> tuple[float, float, float, str]:
    """The comparison of a and b as a − b, read off whichever way the frame stored it."""
    (r,) = [r for _, r in comparisons.iterrows() if {r["head_a"], r["head_b"]} == {a, b}]
    if r["head_a"] == a:
        return r["estimate"], r["low"], r["high"], r["verdict"]
    flip = {"better": "worse", "worse": "better"}
    return -r["estimate"], -r["high"], -r["low"], flip.get(r["verdict"], r["verdict"])


def test_the_profile_is_the_scores_means_with_steps_from_the_comparisons():
    ctx = _context(_table(F1))
    profile = profile_rows(ctx.inputs.table, ctx.scores, ctx.comparisons).set_index("layer")
    means = {k: np.mean(v) for k, v in F1.items()}
    best = max(means, key=means.__getitem__)
    assert best == 2 and list(profile.index) == [0, 1, 2, 3]
    for layer, values in F1.items():
        r = profile.loc[layer]
        assert (r["mean"], r["n"]) == (pytest.approx(means[layer]), len(values))
        label = f"linear-L{layer}"
        if layer:
            step = np.mean(np.subtract(values, F1[layer - 1]))
            estimate, low, high, verdict = _stored(ctx.comparisons, label, f"linear-L{layer - 1}")
            assert r["step"] == pytest.approx(step) == pytest.approx(estimate)
            assert (r["step_low"], r["step_high"], r["step_verdict"]) == (low, high, verdict)
        else:
            assert np.isnan(r["step"])
        vs = "best" if layer == best else _stored(ctx.comparisons, label, "linear-L2")[3]
        assert r["vs_best"] == vs
    assert profile.loc[3, "step"] < 0 and profile.loc[3, "step_verdict"] == "worse"


def test_no_profile_without_two_single_layers():
    one = _context(_table({3: F1[3]}))
    assert profile_rows(one.inputs.table, one.scores, one.comparisons).empty
    ctx = _context(_table(F1))
    named = ctx.inputs.table.assign(layers="last")  # a named selection, not a layer index
    assert profile_rows(named, ctx.scores, ctx.comparisons).empty


def test_the_geometry_sits_beside_the_layers_of_its_own_encoder():
    ctx = _context(_table(F1))
    profile = profile_rows(ctx.inputs.table, ctx.scores, ctx.comparisons)
    view = profile_view(profile, _geometry()).set_index("layer")
    for layer in F1:
        assert view.loc[layer, "sentence_share"] == pytest.approx(0.1 * layer)
        assert view.loc[layer, "anisotropy"] == pytest.approx(0.01 * layer)
    assert "sentence_share" not in profile_view(profile, _geometry("mpnet"))
    assert "sentence_share" not in profile_view(profile, None)


def test_the_figure_shows_every_interval_the_best_constant_and_a_clipped_end():
    ctx = _context(_table(F1, constant=0.4))
    profile = profile_rows(ctx.inputs.table, ctx.scores, ctx.comparisons)
    profile.loc[profile["layer"] == 2, ["high", "clipped"]] = [1.0, True]
    ax = profile_figure(profile).axes[0]
    line = ax.lines[0]  # the errorbar's line: the means ×100
    assert list(line.get_ydata()) == pytest.approx([100 * np.mean(v) for v in F1.values()])
    flat = [ln for ln in ax.lines if len(set(ln.get_ydata())) == 1 and ln.get_linestyle() == "--"]
    assert flat and flat[0].get_ydata()[0] == pytest.approx(40.0)  # the best constant
    assert any(ln.get_marker() == "^" and ln.get_ydata()[0] == 100.0 for ln in ax.lines)
    assert ax.get_ylim()[0] > 0  # 0 is not in range: the axis does not start there


def test_the_section_shows_the_profile_and_is_absent_without_a_layer_sweep():
    section = layer_section(_context(_table(F1), _geometry()))
    assert section is not None and section.body.count("<figure>") == 1
    for values in F1.values():
        assert f">{100 * np.mean(values):.1f}<" in section.body
    flat = _table({-1: F1[2]}).assign(head_label="linear")  # one layer, no sweep
    assert layer_section(_context(flat)) is None


PROBE = ROOT / "results" / "fair_table7_probe"


@pytest.mark.skipif(not (PROBE / "results.csv").is_file(), reason="probe not run")
def test_the_committed_probe_peaks_where_a_pandas_count_says():
    raw = pd.read_csv(PROBE / "results.csv")
    dev = raw[(raw.split == "dev") & (raw.metric == "f1") & (raw.status == "ok")]
    means = dev.groupby("layers")["value"].mean()
    table = stats.normalize_table(raw)
    keys = [*stats.SETTING_KEYS, "head_label"]
    scores = stats.run_values(table).groupby(keys)["value"].agg(mean="mean", n="size")
    scores = scores.reset_index().assign(low=np.nan, high=np.nan, metric="f1")
    scores = scores.assign(clipped=False, best_constant=np.nan)
    profile = profile_rows(table, scores, pd.DataFrame(columns=frames.COMPARISON_COLUMNS))
    assert list(profile["layer"]) == sorted(int(k) for k in means.index)
    assert profile["mean"].to_numpy() == pytest.approx(means.sort_index().to_numpy())
    best = profile.loc[profile["vs_best"] == "best", "layer"]
    assert list(best) == [int(means.idxmax())] == [3]


def test_the_section_puts_table7_beside_the_papers_numbers():
    names = ["embeddings", "second_to_last", "last", "sum_last4"]
    f1 = {name: [0.80 + 0.01 * i, 0.81 + 0.01 * i, 0.79 + 0.01 * i] for i, name in enumerate(names)}
    section = layer_section(_context(_table(f1, head="bilstm")))
    assert section is not None and "<figure>" not in section.body  # no single-layer profile
    refs = pd.read_csv(ROOT / "bench" / "results" / "references.csv").set_index("setting")
    for name in names:
        assert f">{refs.loc[name, 'value']:.1f}<" in section.body
        assert f">{100 * np.mean(f1[name]):.1f}<" in section.body
