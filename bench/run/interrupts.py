"""A process told to stop (SIGTERM, SIGINT) stops: nothing it was training counts as failed.

A scheduler's time limit, ``timeout``, a preempted node or Ctrl-C signal the whole process
group: the training process and its DataLoader workers or TorchInductor's compile workers.
The helpers die first, and the training process then sees an ordinary error ("DataLoader
worker ... is killed by signal: Terminated", ``BackendCompilerFailed``) where a cell's
failure is recorded. Left alone, that records the cell as ``failed`` (so the next launch
skips it unless ``+rerun_failed=true``) and the process goes on to its next cell: Lightning
catches SIGTERM while it trains and only sets a flag, and a launcher's worker process
(loky, gpu_pack) takes the next job it was given, outliving the launch that was stopped.

:func:`watch` makes every cell process record the first stop signal it receives; from then
on a cell's error is an :class:`Interrupted` (no ``result.json`` is written, the cell stays
pending and the next launch trains it). After SIGTERM, :func:`check` refuses to start
another cell. After SIGINT it lets the next one start and forgets the signal: Ctrl-C stops
the cell in progress (joblib itself ends a launch's workers on Ctrl-C), and a cell started
after it in the same interpreter (a notebook, a REPL) is the user's new request.
A SIGTERM whose previous handler was the default (the process would have died) raises
:class:`Interrupted` at once, also inside ``Trainer.fit`` (Lightning calls the handler it
found installed after its own); SIGINT keeps its ``KeyboardInterrupt`` (Lightning's ``fit``
catches that and exits 1: :func:`as_interruption` makes that exit the interruption again, 130).

The same SIGTERM kills the DataLoader workers, and torch's SIGCHLD handler raises "DataLoader
worker ... is killed by signal" when their deaths are reported. Pending together, SIGTERM's
handler runs first (signals are handled in number order) and SIGCHLD's while the
:class:`Interrupted` unwinds, where its error would replace the interruption (the process would
exit 1, not 143, and skip the cleanup it was in). After SIGTERM, the death of a DataLoader
worker is therefore no error (:func:`_tolerate_worker_deaths`).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

#: The signals a cell process treats as "stop": a scheduler's or ``timeout``'s, and Ctrl-C.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_received: int | None = None
_previous: dict[int, Any] = {}
#: SIGCHLD's handler (torch's, for DataLoader workers) before :func:`_tolerate_worker_deaths`.
_previous_sigchld: Any = None


class Interrupted(SystemExit):
    """The process received a stop signal: what it was training is left pending, not failed.

    A :class:`SystemExit` (exit status 128 + the signal's number when nothing catches it):
    ``except Exception`` blocks, which record a cell's failure, let it through.

    Attributes:
        signum: The signal received.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}: the cell stays pending"


def _handle(signum: int, frame: FrameType | None) -> None:
    global _received
    if _received is None:
        _received = signum
    if signum == signal.SIGTERM:
        _tolerate_worker_deaths()
    previous = _previous.get(signum)
    if callable(previous):
        previous(signum, frame)  # SIGINT: Python's default raises KeyboardInterrupt
    elif previous in (signal.SIG_DFL, None):
        raise Interrupted(signum)  # the process would have died: unwind it instead


def _after_stop_sigchld(signum: int, frame: FrameType | None) -> None:
    try:
        _previous_sigchld(signum, frame)
    except RuntimeError as err:  # torch's: a worker the stop killed; anything else goes on
        if not str(err).startswith("DataLoader worker"):
            raise


def _tolerate_worker_deaths() -> None:
    """Make SIGCHLD's handler ignore DataLoader workers that died (of the stop signal)."""
    global _previous_sigchld
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGCHLD)
    if callable(current) and current is not _after_stop_sigchld:
        _previous_sigchld = current
        signal.signal(signal.SIGCHLD, _after_stop_sigchld)


def watch() -> None:
    """Record the stop signals this process receives (idempotent; main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        current = signal.getsignal(signum)
        if current is _handle:
            continue
        _previous[signum] = current
        signal.signal(signum, _handle)


def received() -> int | None:
    """The first stop signal this process received since :func:`watch`, if any."""
    return _received


def check() -> None:
    """Refuse to start a cell in a process that was told to terminate.

    A SIGINT received before is forgotten here: it stopped the cell it interrupted, and this
    cell is a new request (see the module docstring).

    Raises:
        Interrupted: When SIGTERM was received.
    """
    global _received
    if _received == signal.SIGINT:
        _received = None
    elif _received is not None:
        raise Interrupted(_received)


def starting() -> None:
    """Before a cell (or a group, or a Hydra job) starts: :func:`watch`, then :func:`check`.

    Raises:
        Interrupted: When SIGTERM was received.
    """
    watch()
    check()


def as_interruption(err: BaseException) -> BaseException:
    """What a cell's error really is: :class:`Interrupted` once the process was told to stop.

    Args:
        err: What stopped the cell.

    Returns:
        ``err`` itself when no stop signal was received, or for an interruption or a
        ``KeyboardInterrupt``; else an :class:`Interrupted` (raise it ``from err``: the
        traceback keeps what the stop broke). A ``SystemExit`` is one too: Lightning ends
        its ``KeyboardInterrupt`` with ``sys.exit(1)``, which would hide the signal.
    """
    if _received is None or isinstance(err, Interrupted | KeyboardInterrupt):
        return err
    return Interrupted(_received)


def reset() -> None:
    """Forget a received signal and restore the handlers :func:`watch` replaced (tests)."""
    global _received, _previous_sigchld
    _received = None
    if threading.current_thread() is threading.main_thread():
        for signum, previous in _previous.items():
            if signal.getsignal(signum) is _handle and previous is not None:
                signal.signal(signum, previous)
        if signal.getsignal(signal.SIGCHLD) is _after_stop_sigchld:
            signal.signal(signal.SIGCHLD, _previous_sigchld)
    _previous.clear()
    _previous_sigchld = None
