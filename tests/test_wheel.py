"""The built wheel works on its own: conf ships inside it, and a cell runs from elsewhere."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> Path:
    """A fresh venv with headbench installed from its wheel (dependencies from this one)."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(work / "dist"), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (wheel,) = (work / "dist").glob("headbench-*.whl")
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # torch, transformers, Lightning... come from this environment's site-packages (a path
    # in a .pth file), but `bench` itself only from the wheel: this environment's editable
    # install is a .pth file of its own, which Python does not follow from another .pth.
    Path(purelib, "headbench_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return env_dir


def _run(env_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(env_dir / "bin" / "headbench"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
def test_the_installed_package_is_the_wheels_and_ships_its_config(wheel_env, tmp_path):
    probe = subprocess.run(
        [
            str(wheel_env / "bin" / "python"),
            "-c",
            "import bench, bench.paths as p; print(bench.__file__); print(p.config_dir())",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    )
    package, conf = probe.stdout.split()
    assert package.startswith(str(wheel_env)) and conf.startswith(str(wheel_env))
    assert (Path(conf) / "config.yaml").is_file()
    assert (Path(package).parent / "results" / "references.csv").is_file()
    job = _run(wheel_env, "--cfg", "job", "--resolve", "seed=1", cwd=tmp_path)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "head:" in job.stdout and "label: linear" in job.stdout


@pytest.mark.slow
def test_a_tiny_cell_runs_from_another_directory(wheel_env, data_dir, tmp_path):
    run_dir = tmp_path / "run"
    proc = _run(
        wheel_env,
        "encoder=tiny_bert",
        "task=sst2",
        "head=linear",
        "freeze=frozen",
        "seed=1",
        "data.train_size=16",
        "data.max_length=16",
        "trainer.max_epochs=1",
        f"data.dir={data_dir}",
        f"hydra.run.dir={run_dir}",
        f"cache.dir={tmp_path / 'cache'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "ok"
