"""What one fine-tuning step asks of the host: ``python benchmarks/perf.py --parts steps``.

A small model fine-tuned at batch 32 leaves a GPU mostly idle (issue #22: MiniLM on SST-2 ran
at 15 ms a step on an H200, for a few hundred microseconds of arithmetic): the step's wall is
what the host spends issuing it. This part profiles a window of optimizer steps of the
fine-tuning cell of ``perf.py``'s part 2 (``torch.profiler``) for each side of
:data:`STEP_SIDES` (headbench and the HF ``Trainer``, in float32 and in ``bf16-mixed``), each
in a fresh process, and records per optimizer step:

- ``step_ms``: the median interval between two optimizer steps before the window (not
  profiled; the profiler slows the host), ``gaps_ms`` all of them, and ``first_step_s``: from
  the start of the cell (data, model) to its first step, which for a compiled encoder
  includes compiling its forward and backward;
- ``ops``: ``aten`` operators called from outside another operator (from Python or from an
  autograd node): each is one trip through the dispatcher, and on a GPU usually one or more
  kernel launches; ``view_ops`` counts those of them that only make a view or an empty
  tensor (no kernel);
- ``op_ms``: the host time inside those operators (their total CPU time);
- on a GPU also ``kernels`` and ``kernel_ms`` (what the GPU ran and for how long: busy time),
  the CUDA runtime's launch calls, and ``syncs`` (calls that make the host wait for the GPU:
  ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, blocking
  ``cudaMemcpy``), with ``memcpy`` counting every copy call;
- the operators with the most host time (``top``).

The window opens after ``--steps-wait`` optimizer steps and spans ``--steps-active`` steps; a
step is whatever happens between two calls of the optimizer's ``step`` (a global
post-step hook, so both frameworks are cut at the same place: data, forward, backward,
clipping, optimizer, scheduler, logging). The counts on a CPU are those a GPU's host would
dispatch, but for a few device-specific kernels (e.g. the fused AdamW is one operator on both).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

from bench.data.pinning import pins_batches
from bench.run.provenance import git_commit

#: What ``headbench_graphs`` adds to the cell (here and in part 2): the encoder compiled and
#: replayed as CUDA graphs, one recorded per batch shape, its batches padded to a multiple of
#: 8 tokens so that there are few shapes (on a CPU no graphs: it compiles as the default mode).
GRAPHS_OVERRIDES = ("trainer.compile=reduce-overhead", "data.pad_to_multiple_of=8")
#: What ``headbench_graphs_tf32`` adds to ``headbench_graphs``: float32 matrix products on
#: TensorFloat32 tensor cores (``trainer.matmul_precision=high``, bench/model/matmul.py).
TF32_OVERRIDES = (*GRAPHS_OVERRIDES, "trainer.matmul_precision=high")
#: The sides: ``(framework, precision, headbench overrides)``. The headbench sides run part
#: 2's headbench cell (fused AdamW, in float32 and in bf16-mixed), ``headbench_compile``
#: with its encoder compiled (``trainer.compile=default``: its first steps pay the
#: compilation, the window is after them), ``headbench_graphs`` with :data:`GRAPHS_OVERRIDES`,
#: ``headbench_graphs_tf32`` with :data:`TF32_OVERRIDES`;
#: the Trainer sides part 2's Trainer run.
STEP_SIDES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "headbench": ("headbench", "32-true", ()),
    "headbench_bf16": ("headbench", "bf16-mixed", ()),
    "headbench_compile": ("headbench", "32-true", ("trainer.compile=default",)),
    "headbench_graphs": ("headbench", "32-true", GRAPHS_OVERRIDES),
    "headbench_graphs_tf32": ("headbench", "32-true", TF32_OVERRIDES),
    "hf_trainer": ("hf_trainer", "32-true", ()),
    "hf_trainer_bf16": ("hf_trainer", "bf16-mixed", ()),
}
#: Operators that make a view or an empty tensor: no kernel runs.
VIEW_OPS = frozenset(
    f"aten::{name}"
    for name in (
        *("alias", "as_strided", "chunk", "detach", "empty", "empty_like", "empty_strided"),
        *("expand", "lift_fresh", "narrow", "permute", "reshape", "_reshape_alias"),
        *("resolve_conj", "resolve_neg", "select", "slice", "split", "squeeze", "t"),
        *("transpose", "unbind", "unflatten", "unsqueeze", "view", "_unsafe_view", "view_as"),
    )
)
#: CUDA runtime calls that launch work.
LAUNCHES = frozenset(
    ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
)
#: CUDA runtime calls after which the host has waited for the GPU.
SYNCS = frozenset(
    ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
)


def batches_pinned(framework: str) -> bool:
    """Whether ``framework``'s training batches reach the device from pinned host memory here.

    headbench pins batches bound for a CUDA device (:mod:`bench.data.pinning`); the HF
    ``Trainer``'s loader pins on CUDA by default (``dataloader_pin_memory``). On a CPU neither
    pins: there is no copy to make.

    Args:
        framework: ``headbench`` or ``hf_trainer`` (a side's ``framework``).
    """
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return pins_batches(device) if framework == "headbench" else device.type == "cuda"


def recorded_pinned(record: dict[str, Any], on_gpu: bool) -> bool:
    """Whether a saved side's (or run's) batches were pinned.

    A record from before the field existed was measured with headbench's batches not pinned
    and the Trainer's pinned on a GPU (its default).

    Args:
        record: A ``steps`` side or a ``finetune`` run.
        on_gpu: Whether it was measured on a GPU.
    """
    if "batches_pinned" in record:
        return bool(record["batches_pinned"])
    return on_gpu and not str(record.get("framework", "")).startswith("headbench")


@dataclass(frozen=True)
class Event:
    """One profiled event, reduced to what :func:`summarise` reads.

    Attributes:
        name: The operator, runtime call or kernel name.
        on_device: Whether it ran on the GPU (a kernel or a device copy).
        parent: The name of the host event it was called from, or None at the top.
        cpu_us: Its total host time (children included), microseconds.
        device_us: Its GPU time, microseconds (device events only).
    """

    name: str
    on_device: bool
    parent: str | None
    cpu_us: float
    device_us: float


def events_of(prof: torch.profiler.profile) -> list[Event]:
    """The events of a finished ``torch.profiler`` run as :class:`Event` records."""
    out, attached = [], []
    for e in prof.events():
        on_device = e.device_type != torch.autograd.DeviceType.CPU
        parent = e.cpu_parent.name if e.cpu_parent is not None else None
        device_us = float(e.device_time_total or 0.0) if on_device else 0.0
        out.append(Event(e.name, on_device, parent, float(e.cpu_time_total), device_us))
        attached += [Event(k.name, True, e.name, 0.0, float(k.duration)) for k in e.kernels]
    # Kernels are device events of their own; a build that only attaches them to the
    # operator that launched them still has them there.
    return out if any(e.on_device for e in out) else out + attached


def summarise(events: Iterable[Event], steps: int, top: int = 12) -> dict[str, Any]:
    """Per-step counts and times of a window of ``steps`` optimizer steps.

    Args:
        events: The window's events.
        steps: Optimizer steps in the window.
        top: How many operators to list by host time.

    Returns:
        ``ops``, ``view_ops``, ``op_ms``, ``kernels``, ``kernel_ms``, ``launches``, ``syncs``,
        ``memcpy`` (each per step), ``top``: ``[name, calls per step, ms per step]``,
        ``calls``: every operator's calls per step, ``runtime_calls``: every CUDA runtime
        call's, and ``sync_sources``: per ``"<runtime call> in <host event>"``, the syncs
        per step (which operator made the host wait, e.g. a non-pinned batch copy).
    """
    ops: Counter[str] = Counter()
    op_us: dict[str, float] = {}
    runtime: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    kernels, kernel_us = 0, 0.0
    for e in events:
        if e.on_device:
            kernels += 1
            kernel_us += e.device_us
        elif e.name.startswith("aten::") and not (e.parent or "").startswith("aten::"):
            ops[e.name] += 1
            op_us[e.name] = op_us.get(e.name, 0.0) + e.cpu_us
        elif e.name.startswith(("cuda", "cu")):
            runtime[e.name] += 1
            if e.name in SYNCS:
                sources[f"{e.name} in {e.parent or '(top level)'}"] += 1
    per = 1.0 / steps
    return {
        "ops": sum(ops.values()) * per,
        "view_ops": sum(n for name, n in ops.items() if name in VIEW_OPS) * per,
        "op_ms": sum(op_us.values()) / 1000 * per,
        "kernels": kernels * per,
        "kernel_ms": kernel_us / 1000 * per,
        "launches": sum(runtime[n] for n in LAUNCHES) * per,
        "syncs": sum(runtime[n] for n in SYNCS) * per,
        "memcpy": sum(n for name, n in runtime.items() if name.startswith("cudaMemcpy")) * per,
        "top": [
            [name, ops[name] * per, op_us[name] / 1000 * per]
            for name in sorted(op_us, key=op_us.__getitem__, reverse=True)[:top]
        ],
        "calls": {name: n * per for name, n in sorted(ops.items())},
        "runtime_calls": {name: n * per for name, n in sorted(runtime.items())},
        "sync_sources": {name: n * per for name, n in sources.most_common()},
    }


class StepWindow:
    """Profile optimizer steps ``[wait, wait + active)`` of whatever trains in this process.

    Every optimizer's ``step`` calls a global post-step hook (both headbench's Lightning loop
    and the HF ``Trainer`` step a ``torch.optim`` optimizer once per batch), which times the
    steps, opens the profiler after ``wait`` steps and closes it ``active`` steps later. On a
    GPU the queue is drained when the window opens and closes, so its kernels are its own.

    Args:
        wait: Optimizer steps before the window (the first ones warm up; their intervals,
            but the first ``wait // 4``, give :attr:`step_ms`).
        active: Optimizer steps profiled.
    """

    def __init__(self, wait: int, active: int) -> None:
        if wait < 2 or active < 1:
            raise ValueError(f"wait must be >= 2 and active >= 1, got {wait} and {active}")
        self.wait, self.active = wait, active
        self.steps = 0
        self.stamps: list[float] = []
        #: Padded tokens of each step's batch (index: steps finished when it was looked up).
        self.tokens: dict[int, int] = {}
        self.summary: dict[str, Any] | None = None
        self._prof: torch.profiler.profile | None = None
        self._opened = 0.0
        self._began = 0.0

    def _lookup(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        """Note the padded tokens of a step's batch: its first 2-D embedding lookup.

        The word embedding is the first embedding a forward calls in the encoders here (BERT,
        RoBERTa, GPT-2 embed words before positions); evaluation forwards run without
        gradients and are not counted. Inside a compiled encoder the hook is not run: traced,
        it would guard on the step count and recompile the encoder every step, so a compiled
        side records no tokens (it trains on its eager side's batches: same seed and order).
        """
        if torch.compiler.is_compiling():
            return
        ids = args[0] if args else None
        if (
            isinstance(module, nn.Embedding)
            and isinstance(ids, torch.Tensor)
            and ids.dim() == 2
            and torch.is_grad_enabled()
            and self.steps not in self.tokens
        ):
            self.tokens[self.steps] = ids.numel()

    def _hook(self, *_: Any) -> None:
        self.steps += 1
        self.stamps.append(time.perf_counter())
        if self.steps == self.wait:
            self._sync()
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._prof = torch.profiler.profile(activities=activities)
            self._prof.__enter__()
            self._opened = time.perf_counter()
        elif self.steps == self.wait + self.active and self._prof is not None:
            self._sync()
            wall = time.perf_counter() - self._opened
            self._prof.__exit__(None, None, None)
            self.summary = summarise(events_of(self._prof), self.active)
            self.summary["profiled_step_ms"] = wall / self.active * 1000
            window = [self.tokens.get(i, 0) for i in range(self.wait, self.wait + self.active)]
            self.summary["padded_tokens"] = sum(window) / self.active
            self._prof = None

    @staticmethod
    def _sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    @property
    def gaps_ms(self) -> list[float]:
        """Every interval between two optimizer steps before the window, milliseconds."""
        stamps = self.stamps[: self.wait]
        return [(b - a) * 1000 for a, b in itertools.pairwise(stamps)]

    @property
    def ms_per_1k_tokens(self) -> float | None:
        """The steps of :attr:`step_ms` as milliseconds per 1,000 padded tokens of their batches.

        On a CPU a step's time grows with its batch's size, so two sides whose batches differ
        compare here; on an idle GPU a step costs its launches whatever its size.
        """
        steps = range(self.wait // 4 + 1, self.wait)
        tokens = sum(self.tokens.get(i, 0) for i in steps)
        gaps = self.gaps_ms[self.wait // 4 :]
        return sum(gaps) / tokens * 1000 if tokens and gaps else None

    @property
    def step_ms(self) -> float | None:
        """Median interval between optimizer steps before the window, milliseconds."""
        gaps = self.gaps_ms[self.wait // 4 :]
        return statistics.median(gaps) if gaps else None

    @contextlib.contextmanager
    def watching(self) -> Iterator[StepWindow]:
        """Install the hook for the duration of the block."""
        self._began = time.perf_counter()
        handle = register_optimizer_step_post_hook(self._hook)
        lookups = register_module_forward_pre_hook(self._lookup)
        try:
            yield self
        finally:
            handle.remove()
            lookups.remove()
            if self._prof is not None:  # training ended inside the window
                self._prof.__exit__(None, None, None)
                self._prof = None

    def record(self) -> dict[str, Any]:
        """What was measured; ``summary`` is None when training ended before the window did."""
        return {
            "steps_seen": self.steps,
            "wait": self.wait,
            "active": self.active,
            "first_step_s": self.stamps[0] - self._began if self.stamps else None,
            "step_ms": self.step_ms,
            "ms_per_1k_tokens": self.ms_per_1k_tokens,
            "gaps_ms": self.gaps_ms,
            "summary": self.summary,
        }


def profile_side(args: argparse.Namespace, side: str, work: Path) -> dict[str, Any]:
    """Train part 2's cell as ``side`` (:data:`STEP_SIDES`) in this process and profile it."""
    from benchmarks import perf

    framework, precision, extra = STEP_SIDES[side]
    perf._quiet()
    torch.set_num_threads(args.threads)
    window = StepWindow(args.steps_wait, args.steps_active)
    overrides = [
        *perf._finetune_overrides(args, "bucket"),
        f"trainer.precision={precision}",
        *extra,
    ]
    with window.watching():
        if framework == "headbench":
            run = perf._run_cell(overrides, work)
        else:
            run = perf._hf_trainer_cell(args, perf._compose(overrides), work, precision)
    return {
        "side": side,
        "framework": framework,
        "precision": precision,
        "batches_pinned": batches_pinned(framework),
        "git": git_commit(),  # the code that measured this side (a part may span several)
        **window.record(),
        "status": run.get("status", "ok"),  # the Trainer side raises instead of failing
        "reason": run.get("reason"),
        "dev_accuracy": run["dev_accuracy"],
    }


def sides_to_measure(saved: dict[str, Any], wanted: Iterable[str], on_gpu: bool) -> list[str]:
    """The sides of ``wanted`` that a run measures, in order.

    Those not saved, and those saved from batches pinned otherwise than this code pins them
    (:func:`batches_pinned`): such a side is stale.

    Args:
        saved: The part's saved sides.
        wanted: The sides asked for (``--steps-sides``), in order.
        on_gpu: Whether this machine (which measured ``saved``: a file never resumes on
            another device) has a GPU.
    """
    out = []
    for side in wanted:
        record = saved.get(side)
        if record is not None:
            pinned = recorded_pinned(record, on_gpu)
            if pinned == batches_pinned(STEP_SIDES[side][0]):
                continue
            print(f"[steps {side}] saved with batches pinned={pinned}: measured again")
        out.append(side)
    return out


def run_steps(args: argparse.Namespace, state: dict[str, Any], save: Any) -> None:
    """Part 7: one profiled window per side, each in a fresh process; resumes side by side."""
    from benchmarks import perf

    keys = ("encoder", "task", "max_length", "batch_size", "seed", "threads")
    settings: dict[str, Any] = {k: getattr(args, k) for k in keys}
    settings.update(
        train_size=args.steps_train_size, epochs=1, wait=args.steps_wait, active=args.steps_active
    )
    part = perf.settle_part(state, "steps", settings)
    sides = part.setdefault("sides", {})
    work = Path(tempfile.mkdtemp(prefix="headbench-perf-steps-"))
    one_epoch = argparse.Namespace(
        **{**vars(args), "ft_epochs": 1, "ft_train_size": args.steps_train_size}
    )
    for side in sides_to_measure(sides, args.steps_sides, torch.cuda.is_available()):
        (record,) = perf._in_fresh_processes(profile_side, [(one_epoch, side, work / side)])
        sides[side] = record
        s = record["summary"] or {}
        print(
            f"[steps {side}] {record['step_ms'] or float('nan'):.1f} ms a step, "
            f"{s.get('ops', float('nan')):.0f} operators, {s.get('kernels', 0):.0f} kernels, "
            f"{s.get('syncs', 0):.1f} syncs a step",
            flush=True,
        )
        save()


def _framework_of(side: str) -> dict[str, str]:
    """``{"framework": ...}`` of a side of :data:`STEP_SIDES` (nothing for another name)."""
    return {"framework": STEP_SIDES[side][0]} if side in STEP_SIDES else {}


def steps_table(part: dict[str, Any], machine: dict[str, Any] | None = None) -> list[str]:
    """Part 7's figures as Markdown, when measured.

    Args:
        part: The ``steps`` part of the output file.
        machine: The machine that measured it (the file's ``part_machine``), if recorded.
    """
    sides = part.get("sides") or {}
    if not sides:
        return []
    st = part["settings"]
    device = (machine or {}).get("device") or {}
    where = (
        f"{device.get('name') or device.get('kind')}; {machine.get('cpu_model')}, "
        f"{machine.get('cpus')} cores, torch {machine.get('torch')}; "
        if machine
        else ""
    )
    gpu = any((r.get("summary") or {}).get("kernels") for r in sides.values())
    head = (
        "| side | s to the first step | ms a step (per 1k padded tokens) | padded tokens a step "
        "| operators | of which views | host ms in operators |"
    )
    rule = "|---|---|---|---|---|---|---|"
    if gpu:
        head += " kernels | GPU busy ms | launches | syncs | copies |"
        rule += "---|---|---|---|---|"
    lines = [
        "",
        f"Anatomy of a fine-tuning step ({where}{st['encoder']}, {st['task']}, batch "
        f"{st['batch_size']}, max length {st['max_length']}; per optimizer step: the median "
        f"interval before the profiled window and its time per 1,000 padded tokens, then "
        f"steps {st['wait'] + 1}-{st['wait'] + st['active']} under torch.profiler; operators: "
        "aten calls from Python or autograd):",
        "",
        head,
        rule,
    ]
    for side, r in sides.items():
        s = r.get("summary")
        if not s:
            why = str(r.get("reason") or "").replace("|", "/").strip().split("\n")[0]
            if r.get("status") != "failed" or not why:
                why = "training ended before the window closed"
            lines.append(f"| {side} | {why} |")
            continue
        first, per_1k, tokens = (
            r.get("first_step_s"),
            r.get("ms_per_1k_tokens"),
            s.get("padded_tokens"),
        )
        row = (
            f"| {side} | {'-' if first is None else f'{first:.1f}'} "
            f"| {r['step_ms']:.2f} ({'-' if per_1k is None else f'{per_1k:.2f}'}) "
            f"| {f'{tokens:.0f}' if tokens else '-'} | {s['ops']:.0f} | {s['view_ops']:.0f} "
            f"| {s['op_ms']:.2f} |"
        )
        if gpu:
            row += (
                f" {s['kernels']:.0f} | {s['kernel_ms']:.2f} | {s['launches']:.0f} "
                f"| {s['syncs']:.1f} | {s['memcpy']:.1f} |"
            )
        lines.append(row)
    if gpu:
        pinned = ", ".join(
            f"{side} {'yes' if recorded_pinned(_framework_of(side) | r, True) else 'no'}"
            for side, r in sides.items()
        )
        lines += ["", f"Batches in pinned host memory (bench/data/pinning.py): {pinned}."]
    waits = [
        f"- {side}: "
        + ", ".join(f"{n:.1f} {where}" for where, n in r["summary"]["sync_sources"].items())
        for side, r in sides.items()
        if (r.get("summary") or {}).get("sync_sources")
    ]
    if waits:
        lines += ["", "Where the host waited for the GPU (syncs a step, by call and caller):", ""]
        lines += waits
    return lines
