"""Interval ends that round to ±0.0 are printed with enough decimals to show their sign,
by one helper, wherever an interval is printed: verdict sentences, verdict tables and the
notes under the heads tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from bench.report.context import build_context
from bench.report.headline import headline_frame, headline_sentence, verdict_table
from bench.report.inputs import load_inputs
from bench.results import tables
from bench.results.tables import interval_end, interval_text
from conftest import ROOT

GPU = ROOT / "results" / "fair_heads_gpu"


@pytest.mark.parametrize(
    ("value", "plain", "signed"),
    [
        (0.0437, "0.044", "+0.044"),  # would read 0.0: is 0 excluded?
        (-0.027, "-0.027", "−0.027"),  # would read -0.0
        (-0.04, "-0.040", "−0.040"),  # two significant digits, trailing zero kept
        (0.00123, "0.0012", "+0.0012"),
        (0.05, "0.1", "+0.1"),  # rounds away from 0 at one decimal: unchanged
        (1.04, "1.0", "+1.0"),
        (-12.345, "-12.3", "−12.3"),
        (0.0, "0.0", "+0.0"),  # exactly 0 stays 0.0
    ],
)
def test_an_end_that_rounds_to_zero_keeps_two_significant_digits(value, plain, signed):
    assert interval_end(value) == plain
    assert interval_end(value, plus=True) == signed
    if value != 0:  # the printed end never hides which side of 0 it is on
        assert math.copysign(1, float(interval_end(value))) == math.copysign(1, value)


def test_an_interval_scales_its_ends_and_is_undefined_with_a_missing_end():
    assert interval_text(0.000437, 0.006261) == "0.044 to 0.6"
    assert interval_text(-0.00027, 0.0104, plus=True) == "−0.027 to +1.0"
    assert interval_text(-0.027, 1.04, scale=1.0, plus=True) == "−0.027 to +1.0"
    assert interval_text(np.nan, 0.5) == "–" and interval_text(0.1, None) == "–"  # type: ignore[arg-type]
    assert interval_end(float("nan")) == "—"


@pytest.fixture(scope="module")
def gpu_mrpc() -> tuple[pd.Series, float, float, int, str]:
    """The committed case: MRPC frozen, last4_concat − linear over 10 paired seeds."""
    ctx = build_context(load_inputs(GPU))
    frame = headline_frame(ctx)
    html = verdict_table(ctx, frame)
    r = frame[(frame["task"] == "mrpc") & (frame["freeze_label"] == "frozen")].iloc[0]
    table = pd.read_csv(GPU / "results.csv")
    dev = table[(table.split == "dev") & (table.metric == table.main_metric)]
    dev = dev[(dev.status == "ok") & (dev.task == "mrpc") & (dev.freeze_label == "frozen")]
    wide = dev.pivot_table(index="seed", columns="head_label", values="value")
    pair = wide[[r["winner"], r["runner_up"]]].dropna()
    m = int(r["n_comparisons"])
    sim = sps.ttest_rel(pair[r["winner"]], pair[r["runner_up"]]).confidence_interval(1 - 0.05 / m)
    return r, float(sim.low), float(sim.high), m, html


@pytest.mark.skipif(not (GPU / "results.csv").is_file(), reason="fair_heads_gpu not run")
def test_the_committed_lower_end_above_zero_is_shown_above_zero(gpu_mrpc):
    r, low, high, m, _ = gpu_mrpc
    assert (r["winner"], r["runner_up"], m) == ("last4_concat", "linear", 21)
    assert (r["sim_low"], r["sim_high"]) == pytest.approx((low, high))
    # the simultaneous interval excludes 0 (** after Holm), but one decimal hides it
    assert low > 0 and f"{100 * low:.1f}" == "0.0" and r["significant"]
    shown = f"{100 * low:.2g} to {100 * high:.1f}"  # two significant digits: 0.044
    assert shown == "0.044 to 0.6"
    sentence = headline_sentence(r, multi_encoder=False)
    assert f"(Bonferroni): {shown};" in sentence
    assert "0.0 to 0.6" not in sentence
    # the heads table's note shows the same interval, signed
    doc = tables.build(pd.read_csv(GPU / "results.csv"), "heads")
    mrpc = next(t for t in doc.tables if t.title == "mrpc — minilm")
    note = next(n for n in mrpc.notes if n.startswith("frozen: last4_concat − linear"))
    assert f"Bonferroni: +{100 * low:.2g} to +{100 * high:.1f};" in note


@pytest.mark.skipif(not (GPU / "results.csv").is_file(), reason="fair_heads_gpu not run")
def test_the_report_verdict_table_shows_the_same_end(gpu_mrpc):
    _, low, high, _, html = gpu_mrpc
    assert f">{100 * low:.2g} to {100 * high:.1f}</td>" in html
    assert ">0.0 to 0.6</td>" not in html
