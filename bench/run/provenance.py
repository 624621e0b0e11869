"""Provenance of a run: git commit, library versions, hardware, peak memory."""

from __future__ import annotations

import functools
import os
import platform
import resource
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

_VERSIONED = (
    "headbench",
    "torch",
    "transformers",
    "tokenizers",
    "lightning",
    "torchmetrics",
    "hydra-core",
    "datasets",
    "numpy",
)


#: Folders of committed outputs, left out of the "dirty" check.
OUTPUT_FOLDERS = ("results", "reports")
#: The commit (and ``true``/``false``: whether it was dirty) of a copy of the checkout that
#: has no git metadata, e.g. the tree a device machine receives; benchmarks/device_run.sh sets
#: them from what benchmarks/device_prepare.py recorded. A real checkout's git always wins.
COMMIT_ENV = "HEADBENCH_GIT_COMMIT"
DIRTY_ENV = "HEADBENCH_GIT_DIRTY"


def _recorded_commit() -> dict[str, Any]:
    """The commit named by :data:`COMMIT_ENV`, marked as recorded, not read from git."""
    commit = os.environ.get(COMMIT_ENV, "").strip()
    if not commit:
        return {"commit": None, "dirty": None}
    dirty = {"true": True, "false": False}.get(os.environ.get(DIRTY_ENV, "").strip().lower())
    return {"commit": commit, "dirty": dirty, "recorded_in": COMMIT_ENV}


def git_commit() -> dict[str, Any]:
    """The commit of the headbench checkout and whether tracked files differ from it.

    Committed outputs (``results/``, ``reports/``) are not code: a sweep that rewrites
    them (collect at its end) does not make the next cell's tree "dirty". A copy without git
    metadata reports the commit named by ``$HEADBENCH_GIT_COMMIT`` (:func:`_recorded_commit`),
    and so does any copy where that variable is set: it names the commit the copy was made
    from, while a ``.git`` that travelled with a copy can be stale (the device tool's copy
    carried one whose HEAD named an older commit).
    """
    if os.environ.get(COMMIT_ENV, "").strip():
        return _recorded_commit()
    repo = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        status = subprocess.run(
            [
                "git",
                "-C",
                str(repo),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                *(f":(exclude){folder}" for folder in OUTPUT_FOLDERS),
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return _recorded_commit()
    if commit.returncode != 0:
        return _recorded_commit()
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def versions() -> dict[str, str | None]:
    """Versions of Python and of the libraries that change the numbers.

    Read once per process (each lookup parses a distribution's metadata, about 25 ms for
    all of them, and every cell records them): a library upgraded while the process runs
    is not what it runs, so its first version is the one to record.
    """
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> tuple[tuple[str, str | None], ...]:
    out: list[tuple[str, str | None]] = [("python", platform.python_version())]
    for name in _VERSIONED:
        try:
            out.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            out.append((name, None))
    return tuple(out)


def _cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (None where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def hardware() -> dict[str, Any]:
    """The machine: platform, CPU count and model, the CPU kernels torch uses, threads, GPU.

    ``cpu_capability`` (``AVX512``, ``AVX2``...) is the instruction set of torch's CPU
    kernels: two machines with different ones round differently, which a sensitive cell
    (a large learning rate) can amplify into different numbers (bench.run.selfcheck found
    committed cells that reproduce bit for bit on one and not on the other).
    """
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": gpu,
    }


def peak_memory() -> dict[str, float | None]:
    """Peak memory so far: process RSS (process-wide) and CUDA allocations."""
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cuda = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    # ru_maxrss is process-wide: in a multirun it includes earlier cells of the same process.
    return {"process_rss_mb": rss_kb / 1024, "cuda_allocated_mb": cuda}
