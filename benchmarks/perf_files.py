"""Which file holds ``benchmarks/perf.py``'s figures of a device: one file per device model.

Figures measured on two devices never meet in one ratio (``perf.check_same_device``), and a
lease may bring an H100 or an H200, so each GPU model has its own file:
``results/perf_gpu_h100.json``, ``results/perf_gpu_h200.json``, and ``results/perf_cpu.json``
for this project's CPUs. ``python benchmarks/perf_files.py`` prints the name for the GPU of the
machine it runs on (``benchmarks/device_run.sh`` resumes from the carried file of that name).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: A GPU model in a device name: a letter or two and digits (H100, H200, A100, L40S, V100).
_MODEL = re.compile(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b")


def perf_file_name(device: Mapping[str, Any]) -> str:
    """The file name of a device's figures.

    Args:
        device: ``perf.device_record()``: ``kind`` and, on a GPU, its ``name``.

    Returns:
        ``perf_cpu.json`` off a GPU; else ``perf_gpu_<model>.json`` with the model of the
        name in lower case (``NVIDIA H100 80GB HBM3`` -> ``perf_gpu_h100.json``), or the
        whole name made file-safe when it names no such model.
    """
    if device.get("kind") != "cuda":
        return "perf_cpu.json"
    name = str(device.get("name") or "gpu")
    found = _MODEL.search(name)
    slug = found.group(1) if found else re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
    return f"perf_gpu_{slug.lower()}.json"


if __name__ == "__main__":
    import torch

    print(
        perf_file_name(
            {"kind": "cuda", "name": torch.cuda.get_device_name(0)}
            if torch.cuda.is_available()
            else {"kind": "cpu"}
        )
    )
