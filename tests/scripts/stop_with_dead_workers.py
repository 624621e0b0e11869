"""A SIGTERM and the deaths of the DataLoader workers it killed, handled together.

``timeout`` or a scheduler signals the whole process group. The workers die of it, and torch's
SIGCHLD handler raises "DataLoader worker ... is killed by signal" once their deaths are
reported. When both signals are pending, Python runs SIGTERM's handler first (number order) and
SIGCHLD's later, while the interruption unwinds. This script makes that order certain: both
signals are blocked in every thread until the workers' deaths are reported, then unblocked at
once; the unwinding then handles the pending SIGCHLD. It exits with the status of what stopped
it: 143 (the interruption) or 1 (the workers' error).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

BOTH = {signal.SIGTERM, signal.SIGCHLD}
signal.pthread_sigmask(signal.SIG_BLOCK, BOTH)  # before any thread exists: every one blocks them

from torch.utils.data import DataLoader  # noqa: E402

from bench.run import interrupts  # noqa: E402


def _unblock(worker_id: int) -> None:
    """A worker dies of SIGTERM (it inherited the blocked mask)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BOTH)


def _reported(pid: int) -> bool:
    """The worker's death is reported to this process (its SIGCHLD is generated)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


interrupts.watch()
batches = iter(DataLoader(list(range(64)), batch_size=4, num_workers=2, worker_init_fn=_unblock))
next(batches)  # the workers run; torch's SIGCHLD handler is installed
workers = [worker.pid for worker in batches._workers]  # type: ignore[attr-defined]
# Sent by another process, as `timeout` sends it: a worker told to stop by its parent exits
# cleanly, by anyone else it dies of the signal.
subprocess.run(["kill", "-TERM", *map(str, [*workers, os.getpid()])], check=True)
deadline = time.monotonic() + 60
while not all(_reported(pid) for pid in workers):
    assert time.monotonic() < deadline, "the workers did not die"
    time.sleep(0.05)
try:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BOTH)  # SIGTERM's handler raises here
finally:
    signal.pthread_sigmask(signal.SIG_BLOCK, ())  # handles pending signals: SIGCHLD's now
print("not interrupted")
