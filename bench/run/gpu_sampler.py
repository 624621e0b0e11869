"""GPU utilisation while a block of code runs, sampled from ``nvidia-smi``.

``benchmarks/perf.py`` wraps each measured run in :class:`GpuSampler` so that a GPU result
says how busy the device was, not only how fast the run went (issue #22: fine-tuning at
10-30% SM utilisation is overhead-bound, whatever its examples/s). A background thread asks
``nvidia-smi`` for ``utilization.gpu`` (the share of the last sample period in which a
kernel was running) and ``memory.used`` every ``interval_s``; one process per sample, so
nothing stays buffered when the block ends. Without a CUDA device or without ``nvidia-smi``
the sampler records nothing and :meth:`GpuSampler.summary` says why.

Example:
    with GpuSampler() as sampler:
        train()
    record["gpu_utilisation"] = sampler.summary()
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import threading
import time
from types import TracebackType
from typing import Any

#: What each sample asks ``nvidia-smi`` for (one CSV line per GPU, no header, no units).
QUERY = ("utilization.gpu", "memory.used")


def parse_sample(text: str, index: int = 0) -> tuple[float, float] | None:
    """One ``nvidia-smi --query-gpu=utilization.gpu,memory.used`` answer, for one GPU.

    Args:
        text: The command's stdout (``--format=csv,noheader,nounits``): one line per GPU.
        index: Which GPU's line (the visible device's index).

    Returns:
        ``(utilisation percent, memory used MiB)``, or None when the line is missing or a
        field is not a number (``[N/A]``, ``[Not Supported]``).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if index >= len(lines):
        return None
    fields = [f.strip() for f in lines[index].split(",")]
    if len(fields) != len(QUERY):
        return None
    try:
        return float(fields[0]), float(fields[1])
    except ValueError:
        return None


def summarise(samples: list[tuple[float, float]], interval_s: float) -> dict[str, Any]:
    """Mean, median and maximum utilisation and the peak memory of a list of samples.

    Args:
        samples: ``(utilisation percent, memory used MiB)`` pairs in time order.
        interval_s: The sampling period asked for.

    Returns:
        ``samples``, ``interval_s`` and, when there is at least one sample,
        ``util_mean``, ``util_median``, ``util_max`` (percent) and ``memory_used_mib_max``.
    """
    out: dict[str, Any] = {"samples": len(samples), "interval_s": interval_s}
    if samples:
        util = [u for u, _ in samples]
        out.update(
            util_mean=statistics.fmean(util),
            util_median=statistics.median(util),
            util_max=max(util),
            memory_used_mib_max=max(m for _, m in samples),
        )
    return out


def _visible_index() -> int | None:
    """The ``nvidia-smi`` index of the current CUDA device, None without CUDA."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if not torch.cuda.is_available():
        return None
    # nvidia-smi counts every GPU; with CUDA_VISIBLE_DEVICES the first visible one is the
    # index it names (a plain integer list), else GPU 0 (asking torch for its current
    # device would create a CUDA context in this process).
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(visible) if visible.isdigit() else 0


class GpuSampler:
    """Context manager sampling GPU utilisation in a background thread.

    Args:
        interval_s: Seconds between samples (each sample starts one ``nvidia-smi``).
        command: The ``nvidia-smi`` executable (found on ``PATH`` by default).
        index: The GPU's ``nvidia-smi`` index (default: the visible CUDA device; None
            without CUDA, and then nothing is sampled).
    """

    def __init__(
        self, interval_s: float = 0.5, command: str | None = None, index: int | None = -1
    ) -> None:
        self.interval_s = interval_s
        self.command = command or shutil.which("nvidia-smi")
        self.index = _visible_index() if index == -1 else index
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def unavailable(self) -> str | None:
        """Why nothing is sampled, or None when sampling."""
        if self.index is None:
            return "no CUDA device"
        if self.command is None:
            return "nvidia-smi not found on PATH"
        return None

    def _sample_once(self) -> None:
        assert self.command is not None and self.index is not None
        try:
            out = subprocess.run(
                [
                    self.command,
                    f"--query-gpu={','.join(QUERY)}",
                    "--format=csv,noheader,nounits",
                ],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            self.errors += 1
            return
        sample = parse_sample(out.stdout, self.index)
        if sample is None:
            self.errors += 1
        else:
            self.samples.append(sample)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self._sample_once()
            self._stop.wait(max(0.0, self.interval_s - (time.perf_counter() - started)))

    def __enter__(self) -> GpuSampler:
        if self.unavailable is None:
            self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict[str, Any]:
        """The samples summarised (:func:`summarise`), or why there are none.

        Returns:
            ``{"unavailable": reason}`` without a GPU or ``nvidia-smi``; else the
            summary plus ``source`` (``nvidia-smi``) and ``failed_samples``.
        """
        reason = self.unavailable
        if reason is not None:
            return {"unavailable": reason}
        return {
            "source": "nvidia-smi",
            **summarise(self.samples, self.interval_s),
            "failed_samples": self.errors,
        }
