"""Which file holds ``benchmarks/perf.py``'s figures of a device: one file per device model.

Figures measured on two devices never meet in one ratio (``perf.check_same_device``), and a
lease may bring an H100 or an H200, so each GPU model has its own file:
``results/perf_gpu_h100.json``, ``results/perf_gpu_h200.json``, and ``results/perf_cpu.json``
for this project's CPUs. ``python benchmarks/perf_files.py`` prints the name for the GPU of the
machine it runs on (``benchmarks/device_run.sh`` resumes from the carried file of that name);
with ``--compile-cache``, the name of that GPU model's compile cache (:func:`compile_cache_name`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: A GPU model in a device name: a letter or two and digits (H100, H200, A100, L40S, V100).
_MODEL = re.compile(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b")


def device_tag(device: Mapping[str, Any]) -> str:
    """A device's short name in file names.

    Args:
        device: ``perf.device_record()``: ``kind`` and, on a GPU, its ``name``.

    Returns:
        ``cpu`` off a GPU; else the model of the name in lower case (``NVIDIA H100 80GB
        HBM3`` -> ``h100``), or the whole name made file-safe when it names no such model.
    """
    if device.get("kind") != "cuda":
        return "cpu"
    name = str(device.get("name") or "gpu")
    found = _MODEL.search(name)
    slug = found.group(1) if found else re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
    return slug.lower()


def perf_file_name(device: Mapping[str, Any]) -> str:
    """The file name of a device's figures: ``perf_cpu.json`` or ``perf_gpu_<model>.json``.

    Args:
        device: ``perf.device_record()``: ``kind`` and, on a GPU, its ``name``.
    """
    tag = device_tag(device)
    return "perf_cpu.json" if device.get("kind") != "cuda" else f"perf_gpu_{tag}.json"


def compile_cache_name(device: Mapping[str, Any]) -> str:
    """The archive of TorchInductor's on-disk caches a device's sweeps carry between calls.

    Compiled kernels are specific to a GPU model (and torch's version, which the cache keys
    hold): ``inductor_h100.tar.xz`` (``benchmarks/device_run.sh bench``).

    Args:
        device: ``perf.device_record()``: ``kind`` and, on a GPU, its ``name``.
    """
    return f"inductor_{device_tag(device)}.tar.xz"


def this_device() -> dict[str, Any]:
    """``kind`` and, on a GPU, ``name`` of the machine this runs on."""
    import torch

    if torch.cuda.is_available():
        return {"kind": "cuda", "name": torch.cuda.get_device_name(0)}
    return {"kind": "cpu"}


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--compile-cache"]:
        print(compile_cache_name(this_device()))
    elif sys.argv[1:]:
        sys.exit("usage: python benchmarks/perf_files.py [--compile-cache]")
    else:
        print(perf_file_name(this_device()))
