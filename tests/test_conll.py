"""CoNLL-2003 reader: the published counts on the real files; malformed files name the line."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.data.conll import conll_file, is_valid_iob2, read_conll
from bench.data.tasks import get_task
from bench.errors import DataError

SPEC = get_task("conll2003")
# Sentence and token counts from ../shared/data/README.md (independent of this code).
EXPECTED = {"train.txt": (14041, 203621), "dev.txt": (3250, 51362), "test.txt": (3453, 46435)}


@pytest.fixture(scope="module")
def conll_dir(data_dir):
    if not (data_dir / "conll2003").is_dir():
        pytest.fail(f"CoNLL-2003 files not found under {data_dir}")
    return data_dir


@pytest.mark.parametrize("filename", sorted(EXPECTED))
def test_reader_matches_the_published_counts(conll_dir, filename):
    cols = read_conll(conll_file(conll_dir, SPEC, filename), SPEC)
    sentences, tokens = EXPECTED[filename]
    assert len(cols["idx"]) == sentences and cols["idx"] == list(range(sentences))
    assert sum(len(t) for t in cols["tokens"]) == tokens
    assert all(len(t) == len(tags) for t, tags in zip(cols["tokens"], cols["label"], strict=True))
    assert "-DOCSTART-" not in {w for sentence in cols["tokens"] for w in sentence}
    names = [[SPEC.label_names[i] for i in tags] for tags in cols["label"]]
    assert all(is_valid_iob2(tags) for tags in names)
    assert set(Counter(t for tags in names for t in tags)) == set(SPEC.label_names)


def test_first_training_sentence_is_read_by_name(conll_dir):
    cols = read_conll(conll_file(conll_dir, SPEC, "train.txt"), SPEC)
    assert cols["tokens"][0] == [
        "EU",
        "rejects",
        "German",
        "call",
        "to",
        "boycott",
        "British",
        "lamb",
        ".",
    ]
    tags = [SPEC.label_names[i] for i in cols["label"][0]]
    assert tags == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]


GOOD = "-DOCSTART- -X- -X- O\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n"


@pytest.mark.parametrize(
    ("content", "line", "needle"),
    [
        (GOOD + "BRUSSELS NNP B-LOC\n", 6, "expected 4 space-separated columns"),
        (GOOD + "BRUSSELS NNP B-NP  B-LOC\n", 6, "expected 4"),
        (GOOD + "BRUSSELS NNP B-NP B-CITY\n", 6, "unknown tag 'B-CITY'"),
        (GOOD + "the DT B-NP O\nBRUSSELS NNP I-NP I-LOC\n", 7, "not IOB2"),
        ("Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-ORG\n", 2, "after 'B-PER'"),
        (GOOD + "BRUSSELS NNP I-NP I-LOC\n", 6, "at the start of a sentence"),
    ],
)
def test_malformed_lines_are_named(tmp_path, content, line, needle):
    path = tmp_path / "conll2003" / "train.txt"
    path.parent.mkdir()
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_conll(conll_file(tmp_path, SPEC, "train.txt"), SPEC)
    assert f"{path}:{line}:" in str(err.value)
    assert needle in str(err.value)


def test_non_utf8_and_empty_files_and_missing_files(tmp_path):
    folder = tmp_path / "conll2003"
    folder.mkdir()
    (folder / "train.txt").write_bytes(GOOD.encode() + b"M\xfcnchen NNP B-NP B-LOC\n")
    with pytest.raises(DataError, match=r"train\.txt:6: not valid UTF-8"):
        read_conll(folder / "train.txt", SPEC)
    (folder / "dev.txt").write_text("-DOCSTART- -X- -X- O\n\n")
    with pytest.raises(DataError, match="no sentences"):
        read_conll(folder / "dev.txt", SPEC)
    with pytest.raises(DataError, match=r"conll2003/\{train,dev,test\}\.txt"):
        conll_file(tmp_path, SPEC, "test.txt")


def test_the_original_iob1_release_is_refused(conll_dir):
    original = conll_dir / "conll2003" / "original" / "eng.testa"
    if not original.is_file():
        pytest.skip("original IOB1 files not present")
    with pytest.raises(DataError, match=r"eng\.testa:\d+: tag 'I-"):
        read_conll(original, SPEC)


@pytest.mark.network
def test_hub_split_matches_the_local_file_with_tags_mapped_by_name(conll_dir):
    from bench.data.token_datamodule import load_token_split

    hub = load_token_split(SPEC, SPEC.dev["dev"], None)  # eriktks/conll2003, Parquet branch
    local = read_conll(conll_file(conll_dir, SPEC, "dev.txt"), SPEC)
    assert hub["tokens"] == local["tokens"]
    assert hub["label"] == local["label"]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_a_byte_order_mark_is_not_glued_to_the_first_token(conll_dir, tmp_path, newline):
    """A Windows editor's BOM: dev is still 3,250 sentences (3,251 with '\\ufeff-DOCSTART-')."""
    source = conll_file(conll_dir, SPEC, "dev.txt")
    copy = tmp_path / SPEC.local_dir / "dev.txt"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(b"\xef\xbb\xbf" + source.read_bytes().replace(b"\n", newline))
    assert read_conll(conll_file(tmp_path, SPEC, "dev.txt"), SPEC) == read_conll(source, SPEC)
