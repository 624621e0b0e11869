"""Fuzz the TSV and CoNLL readers: any input parses or raises DataError, never anything else.

Inputs are hypothesis-generated files built from the real formats' pieces (tabs, spaces,
newlines, CR, BOM, labels valid and not, IOB2 tags valid and not, non-UTF-8 bytes) so
that most examples get past the first line and exercise the row checks.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.data.conll import read_conll
from bench.data.glue_files import read_glue_tsv
from bench.data.tasks import TASKS, TOKEN_TASKS
from bench.errors import DataError
from conftest import DATA_DIR

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORDS = st.sampled_from(
    [
        "the",
        "a film",
        "",
        " ",
        "0",
        "1",
        "2.5",
        "nan",
        "inf",
        "-1",
        "entailment",
        "not_entailment",
        "neutral",
        "contradiction",
        "sentence",
        "héllo",
        "\ufeff",
        "\u2028",
        "x\ty",
        "\r",
        "label",
        "quality",
        "#1 String",
        "#2 String",
        "sentence1",
        "sentence2",
        "question",
        "question1",
        "question2",
        "score",
        "gold_label",
        "is_duplicate",
    ]
)
RAW = st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xe2\x80", b"\r\n", b"\t\t"])


def _dev_file(task: str) -> Path:
    return DATA_DIR / "glue" / TASKS[task].glue_dir / "dev.tsv"


# MNLI and QQP are not in ../shared/data (GLUE's largest downloads); they are read from the
# Hub, so their TSV layout cannot be fuzzed from a real file here.
LOCAL_TASKS = sorted(t for t in TASKS if _dev_file(t).is_file())


def _real_lines(task: str, n: int = 6) -> list[list[str]]:
    """The first lines of the task's real dev file (header included), as cells."""
    path = _dev_file(task)
    lines = path.read_text(encoding="utf-8").splitlines()[:n]
    return [line.split("\t") for line in lines]


@st.composite
def tsv_bytes(draw: st.DrawFn, task: str) -> bytes:
    """The real file's first lines, mutated: cells replaced, dropped or added, lines
    dropped or duplicated, raw junk bytes inserted; or, now and then, lines from scratch."""
    if draw(st.integers(0, 5)) == 0:
        lines = draw(st.lists(st.lists(WORDS, min_size=0, max_size=12), min_size=0, max_size=8))
    else:
        lines = [list(cells) for cells in _real_lines(task)]
        for _ in range(draw(st.integers(0, 3))):
            if not lines:
                break
            row = draw(st.integers(0, len(lines) - 1))
            op = draw(st.integers(0, 4))
            cells = lines[row]
            if op == 0 and cells:
                cells[draw(st.integers(0, len(cells) - 1))] = draw(WORDS)
            elif op == 1 and cells:
                del cells[draw(st.integers(0, len(cells) - 1))]
            elif op == 2:
                cells.insert(draw(st.integers(0, len(cells))), draw(WORDS))
            elif op == 3:
                del lines[row]
            else:
                lines.insert(row, list(cells))
    text = "\n".join("\t".join(cells) for cells in lines)
    if draw(st.booleans()):
        text += "\n"
    data = text.encode("utf-8")
    if draw(st.integers(0, 4)) == 0:  # now and then, a byte that is not UTF-8 or a CR
        junk = draw(RAW)
        at = draw(st.integers(0, len(data)))
        data = data[:at] + junk + data[at:]
    return data


TAGS = st.sampled_from(
    [
        "O",
        "B-PER",
        "I-PER",
        "B-ORG",
        "I-ORG",
        "B-LOC",
        "I-LOC",
        "B-MISC",
        "I-MISC",
        "I-FOO",
        "B-",
        "o",
        "",
        "E-PER",
        "S-LOC",
    ]
)
TOKENS = st.sampled_from(["EU", "rejects", "German", "-DOCSTART-", "", "é", "x y", "\t", "."])


@st.composite
def conll_bytes(draw: st.DrawFn) -> bytes:
    """A CoNLL-like file: token POS chunk tag lines with blank lines, sometimes broken."""
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            lines.append("")
        else:
            cells = [draw(TOKENS), "NNP", "B-NP", draw(TAGS)]
            if kind == 1:  # a wrong number of columns
                cells = cells[: draw(st.integers(0, 5))] + ["extra"] * draw(st.integers(0, 2))
            lines.append(" ".join(cells))
    data = "\n".join(lines).encode("utf-8")
    if draw(st.integers(0, 4)) == 0:
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(RAW) + data[at:]
    return data


def _write(data: bytes, suffix: str) -> Path:
    with tempfile.NamedTemporaryFile(delete=False, suffix=suffix) as handle:
        handle.write(data)
    return Path(handle.name)


@pytest.mark.parametrize("task", LOCAL_TASKS)
@FUZZ
@given(data=st.data())
def test_tsv_reader_parses_or_raises_data_error(task, data):
    path = _write(data.draw(tsv_bytes(task)), ".tsv")
    try:
        columns = read_glue_tsv(path, TASKS[task])
    except DataError as err:
        assert str(path) in str(err)  # the message names the file
    else:  # a parse is complete and consistent: no silent shift
        n = len(columns["idx"])
        assert n > 0 and all(len(v) == n for v in columns.values())
        for field in TASKS[task].text_fields:
            assert all(text.strip() for text in columns[field])
        for label in columns["label"]:
            if TASKS[task].is_regression:
                assert math.isfinite(label)
            else:
                assert 0 <= label < TASKS[task].num_labels
    finally:
        path.unlink()


@FUZZ
@given(data=conll_bytes())
def test_conll_reader_parses_or_raises_data_error(data):
    spec = TOKEN_TASKS["conll2003"]
    path = _write(data, ".txt")
    try:
        columns = read_conll(path, spec)
    except DataError as err:
        assert str(path) in str(err)
    else:
        assert columns["idx"] == list(range(len(columns["tokens"])))
        for tokens, tags in zip(columns["tokens"], columns["label"], strict=True):
            assert len(tokens) == len(tags) > 0
            names = [spec.label_names[t] for t in tags]
            assert not names[0].startswith("I-")  # valid IOB2 from the first tag on
    finally:
        path.unlink()


def test_a_non_finite_sts_b_score_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "dev.tsv"
    header = (
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    )
    row = "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA man.\tA person.\t{}"
    path.write_text("\n".join([header, row.format("4.5"), row.format("nan")]) + "\n")
    with pytest.raises(DataError, match=r"dev.tsv:3: score 'nan' is not a finite number"):
        read_glue_tsv(path, TASKS["stsb"])
