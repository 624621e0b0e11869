"""What a fine-tuning step makes its host wait for, counted on any machine, a CPU included.

``torch.profiler`` sees a GPU's synchronisations only on a GPU (``perf.py --parts steps``).
The operators that cause most of them are visible anywhere, one level up, in the
dispatcher: reading a tensor's value on the host (``.item()``, ``bool(t)``, ``int(t)``:
one ``_local_scalar_dense``), operators whose output shape depends on the data
(``nonzero``, ``masked_select``, ``unique``, indexing by a boolean mask...), and tensors
made from Python data on the host (``lift_fresh``: ``torch.tensor``, a tokenizer's
``return_tensors="pt"``), each a copy to make before a GPU can use it. This script trains
``perf.py``'s fine-tuning cell (part 2) as one side, in this process, counts those
operators over a window of optimizer steps with a ``TorchDispatchMode``, and prints them per
step with the Python frames that called them::

    python benchmarks/host_reads.py --side headbench --encoder minilm --ft-train-size 600
    python benchmarks/host_reads.py --side hf_trainer --encoder minilm --ft-train-size 600

On a CPU a read waits for nothing; on a GPU each value read waits for the device, and so
does a copy from pageable memory (``bench.data.pinning``). It does not see what the CUDA
runtime does on its own (those are in the ``steps`` part's ``sync_sources``).
"""

from __future__ import annotations

import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode

if __package__ in (None, ""):  # run as a script: the checkout's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

aten = torch.ops.aten
#: Operators that read a value, or a shape that depends on values, back to the host.
HOST_READS = frozenset(
    (
        aten._local_scalar_dense.default,
        aten.nonzero.default,
        aten.masked_select.default,
        aten.equal.default,
        aten._unique2.default,
        aten.repeat_interleave.Tensor,
    )
)
#: Indexing operators whose output shape depends on the data when an index is a mask.
MASK_INDEXING = frozenset(
    (
        aten.index.Tensor,
        aten.index_put.default,
        aten.index_put_.default,
        aten._index_put_impl_.default,
    )
)
#: A tensor made from Python data, on the host.
FROM_PYTHON = aten.lift_fresh.default


def reads_back(func: Any, args: tuple[Any, ...]) -> bool:
    """Whether an operator call needs a value from its device on the host.

    Args:
        func: The operator overload.
        args: Its positional arguments.
    """
    if func in HOST_READS:
        return True
    if func in MASK_INDEXING and len(args) > 1:
        indices = args[1] or ()
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)
    return False


#: torch's own source files: not the callers a reader looks for.
TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def caller(limit: int = 4) -> str:
    """The innermost ``limit`` Python frames outside torch (and this file), innermost first."""
    frames = [
        f
        for f in traceback.extract_stack()
        if not f.filename.startswith(TORCH_DIR) and f.filename != __file__
    ]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[::-1][:limit])


class HostReads(TorchDispatchMode):
    """Count :data:`HOST_READS` and :data:`FROM_PYTHON` calls by operator and caller."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[tuple[str, str]] = Counter()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Count the call when it reads back or makes a tensor from Python data; run it."""
        if func is FROM_PYTHON or reads_back(func, args):
            name = str(func.overloadpacket.__name__)
            if func in MASK_INDEXING:
                name += " by a mask"
            self.calls[(name, caller())] += 1
        return func(*args, **(kwargs or {}))


class StepWindow:
    """Count with :class:`HostReads` from optimizer step ``wait`` to ``wait + active``.

    Args:
        wait: Optimizer steps before the window.
        active: Optimizer steps counted.
    """

    def __init__(self, wait: int, active: int) -> None:
        if wait < 1 or active < 1:
            raise ValueError(f"wait and active must be >= 1, got {wait} and {active}")
        self.wait, self.active = wait, active
        self.steps = 0
        self.reads = HostReads()
        self.closed = False

    def __call__(self, *_: Any) -> None:
        """The optimizer's post-step hook."""
        self.steps += 1
        if self.steps == self.wait:
            self.reads.__enter__()
        elif self.steps == self.wait + self.active:
            self.reads.__exit__(None, None, None)
            self.closed = True

    def per_step(self) -> list[tuple[float, str, str]]:
        """``(calls a step, operator, caller)``, most frequent first; empty if not closed."""
        if not self.closed:
            return []
        return [(n / self.active, op, where) for (op, where), n in self.reads.calls.most_common()]


def count(train: Callable[[], Any], wait: int, active: int) -> StepWindow:
    """Run ``train`` with a window installed on every optimizer's steps.

    Args:
        train: Trains something (e.g. a cell) in this process.
        wait: Optimizer steps before the window.
        active: Optimizer steps counted.

    Returns:
        The window (its :meth:`StepWindow.per_step` is empty if training ended inside it).
    """
    window = StepWindow(wait, active)
    handle = register_optimizer_step_post_hook(window)
    try:
        train()
    finally:
        handle.remove()
        if window.steps >= window.wait and not window.closed:
            window.reads.__exit__(None, None, None)
    return window


def main(argv: list[str] | None = None) -> None:
    """Command line: ``--side``, ``--wait``, ``--active`` and ``perf.py``'s cell options."""
    from benchmarks import perf

    parser = perf._parser()
    parser.description = __doc__.split("\n", 1)[0] if __doc__ else None
    parser.add_argument("--side", choices=("headbench", "hf_trainer"), default="headbench")
    parser.add_argument("--wait", type=int, default=8, help="optimizer steps before the window")
    parser.add_argument("--active", type=int, default=10, help="optimizer steps counted")
    args = parser.parse_args(argv)
    perf._quiet()
    torch.set_num_threads(args.threads)
    overrides = [*perf._finetune_overrides(args, "bucket"), "trainer.precision=32-true"]
    work = Path(tempfile.mkdtemp(prefix="headbench-host-reads-"))
    if args.side == "headbench":
        window = count(lambda: perf._run_cell(overrides, work), args.wait, args.active)
    else:
        cfg = perf._compose(overrides)
        window = count(lambda: perf._hf_trainer_cell(args, cfg, work), args.wait, args.active)
    rows = window.per_step()
    print(
        f"{args.side}, {args.encoder} on {args.task}, batch {args.batch_size}: host reads and "
        f"tensors from Python data a step, steps {args.wait + 1}-{args.wait + args.active}"
    )
    if not window.closed:
        print(f"training ended after {window.steps} steps, inside the window: nothing counted")
    for n, op, where in rows:
        print(f"{n:6.1f}  {op:22s} {where}")


if __name__ == "__main__":
    main()
