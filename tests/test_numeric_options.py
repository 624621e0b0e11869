"""A numeric option that is not finite or outside its range is refused before anything runs.

Each case of issue 50 runs the real command line (``bench.run.cli.main``, in this process)
over the real config tree in the single-run, sweep (``-m``) and dry-run forms: exit status
2, one message naming the key and its valid range, nothing written. Before, each of them
passed the preflight: a NaN or infinite rate was recorded as the head's divergence, a NaN
warm-up ratio failed with "cannot convert float NaN to integer", a negative clipping value
turned clipping off.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_cli_preflight import _where

from conftest import ROOT, bench_in_this_process

TINY = (
    "encoder=tiny_bert",
    "head=linear",
    "data.train_size=32",
    "selection.size=20",
    "data.max_length=32",
    "trainer.max_epochs=1",
)
# Hydra's argument parser takes flags before the overrides.
FORMS = {
    "single run": ("seed=1",),
    "sweep": ("-m", "seed=1,2"),
    "dry run": ("--dry-run", "-m", "seed=1,2"),
}
# case: (overrides, the key and value as the message names them, the bounds it names)
CASES = {
    "NaN encoder rate": (("optim.encoder_lr=nan",), "optim.encoder_lr=nan", ("at least 0",)),
    "infinite frozen head rate": (
        ("freeze=frozen", "optim.frozen_head_lr=inf"),
        "optim.frozen_head_lr=inf",
        ("at least 0",),
    ),
    "NaN warm-up ratio": (("optim.warmup_ratio=nan",), "optim.warmup_ratio=nan", ("0", "1")),
    "NaN dropout": (("head.dropout=nan",), "head.dropout=nan", ("at least 0", "below 1")),
    "NaN Adam epsilon": (("optim.adam_eps=nan",), "optim.adam_eps=nan", ("above 0",)),
    "beta of 2": (("optim.betas=[2.0,0.999]",), "optim.betas[0]=2.0", ("at least 0", "below 1")),
    "negative clipping": (
        ("trainer.gradient_clip_val=-1",),
        "trainer.gradient_clip_val=-1",
        ("at least 0",),
    ),
    # found by tests/test_config_property.py: each failed its cell at training
    "gradual group above the depth": (
        ("freeze=gradual", "freeze.group_size=9"),
        "freeze.group_size=9",
        ("at most 4",),  # tiny_bert's 4 layers
    ),
    "LP-FT leaving no epoch to fine-tune": (
        ("freeze=lpft",),  # TINY trains one epoch: the probe takes it
        "freeze.probe_epochs=1",
        ("below trainer.max_epochs (1)",),
    ),
    "a third beta": (("optim.betas=[0.9,0.99,0.999]",), "optim.betas=[0.9, 0.99, 0.999]", ("two",)),
}


# Checked against the encoder (its depth), so a sweep records the cell failed and goes on.
PER_CELL = {"gradual group above the depth"}


@pytest.mark.parametrize(
    ("case", "form"),
    [(c, f) for c in sorted(CASES) for f in sorted(FORMS) if c not in PER_CELL or f != "sweep"],
)
def test_a_non_finite_or_out_of_range_option_is_refused_in_every_form(tmp_path, case, form):
    overrides, named, bounds = CASES[case]
    proc = bench_in_this_process(*FORMS[form], *TINY, *overrides, *_where(tmp_path))
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    said = proc.stdout + proc.stderr
    lines = [line for line in said.splitlines() if named in line]
    assert lines, said[-3000:]
    assert all(bound in lines[0] for bound in bounds), lines[0]
    assert "Traceback" not in said
    if form != "dry run":  # the dry run lists each cell with its reason
        assert proc.stderr.count("error") == 1, proc.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # no run, sweep or results directory


def test_the_command_line_exits_2_with_one_line_naming_the_key(tmp_path):
    """In a fresh interpreter too: the exit status and stderr as a shell sees them."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "seed=1",
            *TINY,
            "optim.warmup_ratio=nan",
            *_where(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().count("\n") == 0, proc.stderr  # one line
    assert "optim.warmup_ratio=nan" in proc.stderr
    assert list(tmp_path.iterdir()) == []
