"""bench.results.compress: committed prediction files stored gzip-compressed, read the same.

Real committed cells (a GLUE cell with class probabilities and a selection slice, and a
CoNLL cell) are copied, compressed, and collected again: the prediction rows are identical
and every cell still re-scores from its (compressed) predictions.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pandas as pd
import pytest

from bench.errors import DataError
from bench.results.collect import read_results
from bench.results.compress import compress_file, compress_tree, main, plain_files
from bench.results.predictions import cell_predictions, stored_file
from bench.results.rescore import verified

ROOT = Path(__file__).resolve().parents[1]


def _committed_cell(experiment: str, task: str) -> Path:
    """One committed run directory of ``experiment`` on ``task`` with plain or gz files."""
    for result in sorted((ROOT / "results" / experiment / "runs" / task).rglob("result.json")):
        if "trials" not in result.parts:
            return result.parent
    pytest.skip(f"no committed {experiment} cell on {task}")


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    """A plain copy of a committed cell (compressed files decompressed back)."""
    dest = tmp_path / run_dir.name
    shutil.copytree(run_dir, dest)
    for packed in dest.glob("predictions_*.gz"):
        packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
        packed.unlink()
    return dest


@pytest.mark.parametrize(
    ("experiment", "task"), [("fair_heads", "sst2"), ("fair_table7", "conll2003")]
)
def test_compressed_cells_read_and_rescore_as_before(tmp_path, experiment, task):
    cell = _copy(_committed_cell(experiment, task), tmp_path / "cells")
    (plain,), problems = read_results([cell])
    assert problems == []
    before = cell_predictions(plain)
    originals = {p.name: p.read_bytes() for p in plain_files([cell])}
    assert originals, "the committed cell has prediction files"

    files, size_before, size_after = compress_tree([cell])

    assert files == len(originals)
    assert size_before == sum(len(b) for b in originals.values())
    assert size_after < size_before / 3
    assert plain_files([cell]) == []
    for name, data in originals.items():
        assert gzip.decompress((cell / f"{name}.gz").read_bytes()) == data
    (packed,), _ = read_results([cell])
    pd.testing.assert_frame_equal(cell_predictions(packed), before)
    kept, _frames, refused = verified([packed])
    assert refused == [] and len(kept) == 1


def test_compression_is_deterministic_and_a_newer_plain_file_wins(tmp_path):
    text = "idx,label,pred\n" + "".join(f"{i},{i % 2},{i % 3 % 2}\n" for i in range(500))
    first, second = tmp_path / "a" / "predictions_dev.csv", tmp_path / "b" / "predictions_dev.csv"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(text)
    assert compress_file(first).read_bytes() == compress_file(second).read_bytes()
    # A later snapshot copies the plain file again beside the compressed one.
    first.write_text(text.replace("499,1", "499,0"))
    assert stored_file(first) == first
    compress_file(first)
    assert stored_file(first) == first.with_name("predictions_dev.csv.gz")
    assert "499,0" in gzip.decompress(stored_file(first).read_bytes()).decode()
    assert stored_file(tmp_path / "predictions_test.csv") is None


def test_a_damaged_compressed_file_is_an_error_naming_it(tmp_path):
    cell = _copy(_committed_cell("fair_heads", "sst2"), tmp_path / "cells")
    compress_tree([cell])
    damaged = cell / "predictions_dev.csv.gz"
    damaged.write_bytes(b"not gzip at all")
    (result,), _ = read_results([cell])
    with pytest.raises(DataError, match=r"predictions_dev\.csv\.gz: not a readable gzip file"):
        cell_predictions(result)


def test_the_command_line_refuses_a_missing_directory(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "nowhere: not a directory" in capsys.readouterr().err
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "predictions_dev.csv").write_text("idx,label,pred\n0,1,1\n")
    assert main([str(tmp_path)]) == 0
    assert "compressed 1 prediction files" in capsys.readouterr().out
    assert (cell / "predictions_dev.csv.gz").is_file()
