"""Every Markdown file headbench writes shows a hostile label as text, never as markup.

A committed results directory is copied and its labels rewritten (in every table and frame),
then the results README and every ``tables`` style are generated from it for real.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from bench.report import readme
from bench.results.display import markdown_text
from bench.results.tables import main as tables_main
from conftest import ROOT

TAG = "<img src=x onerror=alert(1)>"
#: Markdown's own marks: emphasis, code, a link, a table's separator.
MARKS = "*b* _i_ `c` [l](x) a|b"
LABELS = {"linear": TAG, "pooler-random": MARKS}


def _hostile_copy(tmp_path: Path) -> Path:
    """``results/quick`` in a folder named by the tag, with two head labels replaced."""
    folder = tmp_path / TAG
    shutil.copytree(ROOT / "results" / "quick", folder)
    for path in [*folder.glob("*.csv"), *folder.glob("*.parquet")]:
        csv = path.suffix == ".csv"
        frame = pd.read_csv(path) if csv else pd.read_parquet(path)
        for column in {"head_label", "head_a", "head_b"} & set(frame.columns):
            frame[column] = frame[column].replace(LABELS)
        frame.to_csv(path, index=False) if csv else frame.to_parquet(path)
    (folder / "README.md").unlink()
    return folder


def test_a_hostile_label_is_text_in_every_generated_markdown_file(tmp_path, capsys):
    folder = _hostile_copy(tmp_path)
    assert readme.main([str(folder)]) == 0
    tables_main([str(folder), "--style", "all"])
    written = sorted(folder.glob("*.md"))
    assert [p.name for p in written] == ["README.md", "glue.md", "heads.md"]
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert "<img" not in text, path.name
        assert "&lt;img src=x onerror=alert(1)&gt;" in text, path.name  # still readable
        assert "*b*" not in text and "`c`" not in text and "[l](x)" not in text, path.name
        # every row of a table keeps its header's number of cells: the label's '|' is escaped
        for block in re.findall(r"(?:^\|.*\|\n)+", text, flags=re.M):
            widths = {len(re.split(r"(?<!\\)\|", line)) for line in block.splitlines()}
            assert len(widths) == 1, (path.name, block)
    assert "# &lt;img src=x onerror=alert(1)&gt;\n" in (folder / "README.md").read_text("utf-8")
    capsys.readouterr()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("bilstm-second_to_last", "bilstm-second_to_last"),  # inside a word: no emphasis
        ("_x_ a*b", r"\_x\_ a\*b"),
        ("a|b\\", r"a\|b\\"),
        ("<b>&", "&lt;b&gt;&amp;"),
        ("two\nlines", "two lines"),
    ],
)
def test_markdown_text_escapes_what_markdown_would_read_as_markup(text, shown):
    assert markdown_text(text) == shown
