"""benchmarks/compile_cache.py: a second process compiles on the cache the first one filled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import compile_cache


@pytest.mark.slow
def test_the_second_process_finds_the_firsts_cache(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    compile_cache.main(["--encoder", "tiny_bert", "--length", "16", "--out", str(out)])
    figures = json.loads(out.read_text())
    cold, warm = figures["cold"], figures["warm"]
    for f in (cold, warm):
        assert f["train_s"] > f["second_train_s"] > 0  # the first step paid the compiling
    assert warm["train_s"] < cold["train_s"]
    assert figures["settings"]["encoder"] == "tiny_bert"
