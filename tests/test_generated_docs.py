"""The README's Findings, the results READMEs, the committed report and the tables CLI: current,
short, and showing each comparison with one p-value and one verdict everywhere."""

from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest
from bs4 import BeautifulSoup

from bench.report import readme
from bench.results import display
from bench.results.tables import main as tables_main
from conftest import ROOT

RESULTS = ROOT / "results"
COMMITTED = [name for name in readme.EXPERIMENTS if (RESULTS / name / "results.csv").is_file()]


def _words(text: str) -> int:
    """Words as a reader counts them: tokens with a letter or digit (table rules are not)."""
    return sum(1 for token in text.split() if re.search(r"[A-Za-z0-9]", token))


def test_the_findings_block_is_current_short_and_one_table_per_experiment():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.replace_block(text, readme.findings()) == text
    block = text.split(readme.START, 1)[1].split(readme.END, 1)[0]
    assert _words(block) <= 600
    tables = re.findall(r"\n\| Setting .*\n\|[:|-]+\|\n", block)
    assert len(tables) == len(readme.EXPERIMENTS)
    for name in readme.EXPERIMENTS:
        assert f"(results/{name}/README.md)" in block and f"(reports/{name}.html)" in block


@pytest.mark.parametrize("name", COMMITTED)
def test_each_results_readme_is_current(name):
    folder = RESULTS / name
    assert (folder / "README.md").read_text(encoding="utf-8") == readme.experiment_readme(folder)


def _rows(table) -> list[dict[str, str]]:
    header = [th.get_text() for th in table.find("thead").find_all("th")]
    return [
        dict(zip(header, [td.get_text() for td in tr.find_all("td")], strict=True))
        for tr in table.find("tbody").find_all("tr")
    ]


def _markdown_tables(text: str) -> list[pd.DataFrame]:
    """Every Markdown table of a text, as frames of its cell texts."""
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif block:
            tables.append(pd.DataFrame(block[2:], columns=block[0]))
            block = []
    return tables


def _with_p(tables: list[pd.DataFrame]) -> list[pd.DataFrame]:
    return [t for t in tables if "Holm p" in t.columns]


def test_one_p_and_one_verdict_per_comparison_in_report_readme_and_tables(tmp_path):
    folder = RESULTS / "fair_heads"
    comparisons = pd.read_csv(folder / "comparisons.csv")
    expected = display.verdict_frame(comparisons, pd.read_csv(folder / "scores.csv"))
    key = ["Setting", "A", "B"]
    want = expected.set_index(key)[["Holm p", "Verdict"]].sort_index()

    page = BeautifulSoup(
        (ROOT / "reports" / "fair_heads.html").read_text(encoding="utf-8"), "html.parser"
    )
    in_report = [pd.DataFrame(_rows(t)) for t in page.find_all("table")]
    in_readme = _markdown_tables((folder / "README.md").read_text(encoding="utf-8"))
    for name in ("results.csv", "results.parquet", "scores.parquet", "comparisons.parquet",
                 "cells.json", "launches.jsonl"):  # fmt: skip
        shutil.copy(folder / name, tmp_path / name)
    tables_main([str(tmp_path), "--style", "heads"])
    in_tables = _markdown_tables((tmp_path / "heads.md").read_text(encoding="utf-8"))
    for where, tables in (("report", in_report), ("README", in_readme), ("tables", in_tables)):
        found = _with_p([t for t in tables if not t.empty])
        assert len(found) == 1, where  # p-values in one table only
        got = found[0].set_index(key)[["Holm p", "Verdict"]].sort_index()
        assert len(got) == len(comparisons), where
        pd.testing.assert_frame_equal(got, want, obj=where)
