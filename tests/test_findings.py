"""The README's Findings block is generated from the committed results, and is current."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import wilcoxon

from bench.results.findings import END, START, main, replace_block, summary
from conftest import ROOT

README = ROOT / "README.md"
RESULTS = ROOT / "results"


def test_the_readme_block_is_what_the_committed_results_give():
    text = README.read_text()
    block = text.split(START + "\n", 1)[1].split(END, 1)[0]
    assert block == summary(RESULTS)


def test_the_significant_difference_matches_an_independent_computation():
    """Recompute the RTE fine-tuned BiLSTM - linear margin and p from results.csv alone."""
    table = pd.read_csv(RESULTS / "cpu_stability" / "results.csv")
    rows = table[
        (table.task == "rte")
        & (table.split == "dev")
        & (table.metric == "accuracy")
        & (table.freeze_label == "full")
        & (table.status == "ok")
    ]
    pivot = rows.pivot_table(index="seed", columns="head_label", values="value")
    diff = (pivot["bilstm"] - pivot["linear"]).to_numpy()
    p = wilcoxon(diff, alternative="two-sided", method="exact").pvalue
    text = summary(RESULTS)
    assert f"= {100 * np.mean(diff):+.1f} points" in text
    assert f"p = {p:.4f}" in text


def test_the_best_head_count_matches_a_direct_count():
    table = pd.read_csv(RESULTS / "cpu_heads" / "results.csv")
    main_rows = table[(table.split == "dev") & (table.metric == table.main_metric)]
    means = main_rows.groupby(["task", "freeze_label", "head_label"])["value"].mean()
    winners = means.groupby(level=["task", "freeze_label"]).idxmax().map(lambda k: k[2])
    head, count = winners.value_counts().index[0], winners.value_counts().iloc[0]
    assert f"`{head}` has the best mean in {count} of {len(winners)}" in summary(RESULTS)


def test_check_fails_on_a_stale_block_and_write_repairs_it(tmp_path):
    copy = tmp_path / "README.md"
    copy.write_text(replace_block(README.read_text(), "- an old number: 42.0\n"))
    assert main(["--check", str(copy), "--results", str(RESULTS)]) == 1
    assert main(["--write", str(copy), "--results", str(RESULTS)]) == 0
    assert main(["--check", str(copy), "--results", str(RESULTS)]) == 0
    assert copy.read_text() == README.read_text()
