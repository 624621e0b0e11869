"""Data: the strict GLUE reader on the real files, its errors, subsets, tokenization, padding."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.data.conll import read_conll
from bench.data.glue_files import glue_file, read_glue_tsv
from bench.data.location import count_examples
from bench.data.sequence_datamodule import GlueDataModule, subset, tokenize
from bench.data.tasks import TOKEN_TASKS, get_task
from bench.errors import ConfigError, DataError
from bench.model.encoders import load_tokenizer
from bench.run.train import run
from conftest import ENCODERS

# Row and label counts from ../shared/data/README.md (independent of this code).
EXPECTED = {
    ("cola", "train.tsv"): (8551, {1: 6023, 0: 2528}),
    ("cola", "dev.tsv"): (1043, {1: 721, 0: 322}),
    ("sst2", "train.tsv"): (67349, {1: 37569, 0: 29780}),
    ("sst2", "dev.tsv"): (872, {1: 444, 0: 428}),
    ("mrpc", "train.tsv"): (3668, {1: 2474, 0: 1194}),
    ("mrpc", "dev.tsv"): (408, {1: 279, 0: 129}),
    ("rte", "train.tsv"): (2490, {0: 1249, 1: 1241}),  # 0 = entailment, by name
    ("rte", "dev.tsv"): (277, {0: 146, 1: 131}),
    ("qnli", "dev.tsv"): (5463, {0: 2702, 1: 2761}),
    ("stsb", "train.tsv"): (5749, None),
    ("stsb", "dev.tsv"): (1500, None),
    ("wnli", "dev.tsv"): (71, None),
}


@pytest.mark.parametrize(("task", "filename"), sorted(EXPECTED))
def test_reader_matches_the_published_counts(data_dir, task, filename):
    spec = get_task(task)
    cols = read_glue_tsv(glue_file(data_dir, spec, filename), spec)
    rows, labels = EXPECTED[(task, filename)]
    assert len(cols["idx"]) == rows
    assert cols["idx"] == list(range(rows))
    if labels is not None:
        assert dict(Counter(cols["label"])) == labels
    for field in spec.text_fields:
        assert all(text.strip() for text in cols[field])


def test_reader_maps_text_columns_by_header_name(data_dir):
    spec = get_task("mrpc")  # BOM-prefixed header, label in the first column
    cols = read_glue_tsv(glue_file(data_dir, spec, "dev.tsv"), spec)
    assert cols["sentence1"][0].startswith("He said the foodservice pie business")
    assert cols["sentence2"][0].startswith('" The foodservice pie business')
    assert cols["label"][0] == 1
    stsb = read_glue_tsv(glue_file(data_dir, get_task("stsb"), "dev.tsv"), get_task("stsb"))
    assert stsb["label"][:2] == [5.0, 4.75]


@pytest.mark.parametrize("task", ["sst2", "cola", "rte", "stsb"])
def test_a_byte_order_mark_leaves_every_row_as_it_was(data_dir, tmp_path, task):
    """A BOM before a header (SST-2, RTE, STS-B) or before a header-less first row (CoLA)."""
    spec = get_task(task)
    source = glue_file(data_dir, spec, "dev.tsv")
    raw = source.read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf")
    _write(tmp_path, task, "dev.tsv", b"\xef\xbb\xbf" + raw)
    assert read_glue_tsv(glue_file(tmp_path, spec, "dev.tsv"), spec) == read_glue_tsv(source, spec)


def _write(tmp_path, task, filename, content: bytes):
    spec = get_task(task)
    path = tmp_path / "glue" / spec.glue_dir / filename
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return spec, path


@pytest.mark.parametrize(
    ("task", "content", "needle"),
    [
        (
            "sst2",
            b"sentence\tlabel\ngood\t1\nbad\t0\textra\n",
            r"train.tsv:3: expected 2 .* found 3",
        ),
        ("sst2", b"sentence\tlabel\ngood\t1\n  \t0\n", r"train.tsv:3: empty text"),
        ("sst2", b"sentence\tlabel\ngood\t7\n", r"train.tsv:2: unknown label '7'; valid labels"),
        ("sst2", b"sentence\tlabel\ngo\xffod\t1\n", r"train.tsv:2: not valid UTF-8"),
        (
            "rte",
            b"index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentails\n",
            r"train.tsv:2: unknown label",
        ),
        (
            "stsb",
            b"a\tb\tsentence1\tsentence2\tscore\nx\ty\ts\tt\thigh\n",
            r"train.tsv:2: score 'high'",
        ),
        ("sst2", b"text\tlabel\ngood\t1\n", r"train.tsv:1: header has no column 'sentence'"),
        ("cola", b"src\t1\t\tok sentence\nsrc\t0\tmissing columns\n", r"train.tsv:2: expected 4"),
        ("sst2", b"sentence\tlabel\n", r"train.tsv: no data rows"),
        ("sst2", b"sentence\tlabel\ngood\t1\n\nbad\t0\n", r"train.tsv:3: blank line"),
    ],
)
def test_malformed_files_raise_errors_naming_file_and_line(tmp_path, task, content, needle):
    spec, path = _write(tmp_path, task, "train.tsv", content)
    with pytest.raises(DataError, match=needle):
        read_glue_tsv(path, spec)


@pytest.mark.parametrize("task", ["sst2", "cola", "stsb"])
def test_blank_lines_at_the_end_of_a_file_are_skipped(data_dir, tmp_path, task):
    """As pandas and the csv module skip them (an editor's extra newline is no row)."""
    spec = get_task(task)
    source = glue_file(data_dir, spec, "dev.tsv")
    _write(tmp_path, task, "dev.tsv", source.read_bytes() + b"\n \n\t\n\r\n")
    assert read_glue_tsv(glue_file(tmp_path, spec, "dev.tsv"), spec) == read_glue_tsv(source, spec)


def test_the_dry_run_counts_the_rows_the_reader_keeps(data_dir, tmp_path):
    """``count_examples`` (the dry run's count) skips trailing blank lines as the reader does."""
    spec = get_task("rte")
    source = glue_file(data_dir, spec, "train.tsv")
    _write(tmp_path, "rte", "train.tsv", source.read_bytes() + b"\n \n\r\n")
    rows = read_glue_tsv(glue_file(tmp_path, spec, "train.tsv"), spec)
    assert count_examples(tmp_path, spec) == len(rows["label"]) == count_examples(data_dir, spec)


def _conll(data_dir, tmp_path, name):
    path = tmp_path / name
    path.write_bytes((data_dir / "conll2003" / "dev.txt").read_bytes())
    return path, lambda: read_conll(path, TOKEN_TASKS["conll2003"])


@pytest.mark.parametrize("reader", ["sst2", "conll2003"])
def test_a_file_with_cr_only_line_ends_is_named_in_one_short_line(data_dir, tmp_path, reader):
    """Old Mac line ends make the whole file one line: the message says so, quoting little."""
    if reader == "sst2":
        spec, path = _write(tmp_path, "sst2", "train.tsv", b"")
        path.write_bytes(glue_file(data_dir, spec, "train.tsv").read_bytes().replace(b"\n", b"\r"))
        read = lambda: read_glue_tsv(path, spec)  # noqa: E731
    else:
        path, read = _conll(data_dir, tmp_path, "dev.txt")
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r"))
    assert path.stat().st_size > 100_000
    with pytest.raises(DataError, match=rf"{path.name}:1: .*CR-only") as raised:
        read()
    assert len(str(raised.value)) < 400 and "\n" not in str(raised.value)


def test_a_long_line_is_quoted_in_part(data_dir, tmp_path):
    """A header or a CoNLL line of 10,000 characters is quoted by its first 80."""
    spec, path = _write(tmp_path, "sst2", "train.tsv", b"x" * 10_000 + b"\tlabel\ngood\t1\n")
    with pytest.raises(DataError, match=r"train.tsv:1: header has no column 'sentence'.*…$") as e:
        read_glue_tsv(path, spec)
    assert len(str(e.value)) < 400
    conll, read = _conll(data_dir, tmp_path, "long.txt")
    conll.write_bytes(b"EU " * 5000 + b"B-ORG\n")
    with pytest.raises(DataError, match=r"long.txt:1: expected 4 .*…$") as e:
        read()
    assert len(str(e.value)) < 400


def test_a_cell_reading_a_cr_only_file_records_a_short_reason(compose_cfg, data_dir, tmp_path):
    spec, path = _write(tmp_path, "sst2", "train.tsv", b"")
    source = glue_file(data_dir, spec, "train.tsv")
    path.write_bytes(source.read_bytes().replace(b"\n", b"\r"))
    (path.parent / "dev.tsv").write_bytes(glue_file(data_dir, spec, "dev.tsv").read_bytes())
    cfg = compose_cfg("encoder=tiny_bert", "task=sst2", "seed=1", f"data.dir={tmp_path}")
    result = run(cfg, tmp_path / "run")
    assert result["status"] == "failed"
    assert "train.tsv:1" in result["reason"] and "CR-only" in result["reason"]
    assert len(result["reason"]) < 500


def test_missing_data_dir_and_file_are_named(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        glue_file(tmp_path / "nowhere", get_task("sst2"), "train.tsv")
    with pytest.raises(DataError, match=r"glue/SST-2/train.tsv not found"):
        glue_file(tmp_path, get_task("sst2"), "train.tsv")


def test_subset_is_fixed_by_the_data_seed_and_keeps_order():
    cols = {"idx": list(range(100)), "label": [i % 2 for i in range(100)]}
    a, b, c = subset(cols, 10, 0, "t"), subset(cols, 10, 0, "t"), subset(cols, 10, 1, "t")
    assert a == b and a != c
    assert a["idx"] == sorted(a["idx"]) and len(set(a["idx"])) == 10
    assert subset(cols, None, 0, "t") is cols
    with pytest.raises(ConfigError, match=r"data.train_size=101 but t has 100 examples"):
        subset(cols, 101, 0, "t")


@pytest.mark.parametrize("encoder", ["tiny_bert", "tiny_roberta"])
def test_truncation_is_counted_and_padding_is_dynamic_and_right(data_dir, encoder):
    spec = get_task("rte")
    tok = load_tokenizer(ENCODERS[encoder])
    dm = GlueDataModule(spec, tok, data_dir, 64, 0, 48, 8, 8)
    dm.setup()
    assert dm.train.n_truncated > 0  # RTE premises are long
    assert all(len(ex["input_ids"]) <= 48 for ex in dm.train.examples)
    full = tokenize(
        tok, spec, {"idx": [0], "sentence1": ["a b"], "sentence2": ["c"], "label": [1]}, 48, "x"
    )
    assert full.n_truncated == 0
    batch = next(iter(dm.val_dataloader()[0]))
    lengths = batch["attention_mask"].sum(1)
    assert batch["input_ids"].shape[1] == int(lengths.max())  # padded to the batch's longest
    for row, n in zip(batch["attention_mask"], lengths, strict=True):
        assert row[:n].all() and not row[n:].any()  # right padding
    assert batch["idx"].tolist() == list(range(8))


@pytest.mark.network
def test_hub_split_maps_labels_by_name():
    from bench.data.sequence_datamodule import load_split

    spec = get_task("rte")
    cols = load_split(spec, spec.dev["dev"], None)
    assert len(cols["idx"]) == 277
    assert dict(Counter(cols["label"])) == {0: 146, 1: 131}
