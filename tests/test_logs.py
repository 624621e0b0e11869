"""A sweep's output: every Lightning line once (console and job log), no vendor tips."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

#: A sweep from the command line, and a preset that sets `hydra.mode: MULTIRUN` itself
#: (there Lightning's packages had been imported before Hydra's job logging, once).
SWEEPS = {
    "command line": ["-m", "head=linear", "freeze=frozen", "task=sst2", "seed=1,2"],
    "preset": [
        "experiment=quick",
        "hydra.sweeper.params.head=linear",
        'hydra.sweeper.params.freeze="frozen,full"',
    ],
}


@pytest.mark.parametrize("sweep", list(SWEEPS))
def test_each_lightning_line_appears_once_and_no_tips(data_dir, tmp_path, sweep):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            *SWEEPS[sweep],
            "encoder=tiny_bert",
            "data.train_size=32",
            "selection.size=32",  # the held-out slice: 500 by default, slow on two cores
            "data.max_length=16",
            "trainer.max_epochs=1",
            f"data.dir={data_dir}",
            f"runs_dir={tmp_path}/runs",
            f"results_dir={tmp_path}/results",
            f"cache.dir={tmp_path}/cache",
            "report_file=null",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert output.count("`Trainer.fit` stopped") == 2, output[-3000:]  # one per cell
    assert "GPU available" in output
    assert "Tip:" not in output and "litlogger" not in output
    job_logs = sorted((tmp_path / "runs").rglob("*.log"))
    assert len(job_logs) == 2
    for log in job_logs:  # Lightning's records reach Hydra's job log too, once
        assert log.read_text().count("`Trainer.fit` stopped") == 1
