"""A tiny decoder, a permutation LM and an encoder in one sweep: run, collect, tables, report.

The sweep of issue #23's "done means": GPT-2, XLNet and BERT (tiny random-init) × three
heads × {frozen, full} on SST-2, launched from the command line as a user would (18 cells,
~10 minutes on two busy cores: ``-m slow``); the fast suite runs a 4-cell slice of it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from bs4 import BeautifulSoup

from bench.results.tables import main as tables_main
from conftest import ROOT

SUMMARY = {"tiny_gpt2": "last", "tiny_xlnet": "last", "tiny_bert": "first"}
FULL = (tuple(SUMMARY), ("linear", "bilstm", "mean_linear"), ("frozen", "full"))
SLICE = (("tiny_gpt2", "tiny_bert"), ("linear", "mean_linear"), ("frozen",))


@pytest.mark.parametrize(
    "grid", [SLICE, pytest.param(FULL, marks=pytest.mark.slow)], ids=["slice", "full"]
)
def test_a_sweep_over_decoder_permutation_and_encoder_families(data_dir, tmp_path, grid):
    encoders, heads, freezes = grid
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "-m",
            f"encoder={','.join(encoders)}",
            f"head={','.join(heads)}",
            f"freeze={','.join(freezes)}",
            "task=sst2",
            "seed=1",
            "data.train_size=48",
            "selection.size=32",
            "trainer.max_epochs=1",
            "data.max_length=32",
            "data.batch_size=16",
            f"data.dir={data_dir}",
            f"runs_dir={tmp_path}/runs",
            f"results_dir={tmp_path}/results",
            "sweep_name=families",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("result.json")]
    assert len(results) == len(encoders) * len(heads) * len(freezes)
    for res in results:
        assert res["status"] == "ok", res.get("reason")
        info = res["encoder_info"]
        assert info["summary"] == SUMMARY[res["cell"]["encoder"]]
        assert info["causal"] is (res["cell"]["encoder"] == "tiny_gpt2")
    table = pd.read_csv(tmp_path / "results" / "results.csv")
    tokens = table.groupby("encoder")["summary_token"].unique().map(list).to_dict()
    assert tokens == {e: [SUMMARY[e]] for e in encoders}
    # The tables give each encoder its own setting.
    tables_main([str(tmp_path / "results"), "--style", "heads"])
    markdown = (tmp_path / "results" / "heads.md").read_text(encoding="utf-8")
    assert all(f"SST-2 {encoder} frozen" in markdown for encoder in encoders)
    report = tmp_path / "results" / "report.html"
    page = BeautifulSoup(report.read_text(encoding="utf-8"), "html.parser").get_text()
    assert all(encoder in page for encoder in encoders)
