"""The operating system calls a local worker process makes as it starts (:mod:`tracer.job.workers`): end with its
parent (Linux's prctl), keep freed memory for the next rank (glibc's mallopt), SIGTERM back to its default; and
the same end-with-the-parent for the command ``tracer record`` runs (:func:`ends_with_parent`).

Each is a guard or a speed-up, never an error: where the call is not there (not Linux, not glibc, no ctypes) it
does nothing.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable


def default_sigterm() -> None:
    """SIGTERM ends this worker at once, as it ends any process: a worker forked from the ``tracer`` command
    inherits the command's handler (:mod:`tracer.cli`: SIGTERM raised as an exception, for its clean-up),
    which in a worker would only turn a stopped task into an error sent back. The job's process, told by its
    pool that a worker died, says so in one line."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


#: prctl's option (linux/prctl.h): the signal this process gets when its parent ends
_PR_SET_PDEATHSIG = 1


def die_with(parent: int | None) -> None:
    """Linux: this process is killed (SIGKILL) as soon as its parent ends, however it ends (SIGTERM from a batch
    system's time limit, SIGKILL, the out-of-memory killer): a job's workers do not go on parsing ranks for nobody.
    ``parent``: the pid the caller forked this process from; where the parent is already gone (it ended before
    the kernel was told), this process ends now. Elsewhere nothing: there a worker of a job that was killed can
    stay blocked on its queue (the other workers hold the pipe's write end, so it never reads its end)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # (here: a process that never starts a worker does without it; and it may be missing)

        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return
    except Exception:  # noqa: BLE001 - (no _ctypes, no symbol ...): a guard only, never an error
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def ends_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: Linux sends the child ``signum`` when the thread that
    started it ends, however tracer ends (SIGKILL, the out-of-memory killer): the user's script does not train on
    for nobody. SIGTERM, not SIGKILL: the script (its capture) may save and clean up as on a launcher's
    SIGTERM. Start the child from a thread that lives as long as the wait (the main thread): the signal follows
    the thread, not the process. None where there is no prctl (not Linux, no ctypes): the child then outlives a
    killed tracer. The libc call is looked up here, before the fork, so the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except Exception:  # noqa: BLE001 - a guard only, never an error
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:  # tracer ended before the kernel was told: end now, as the signal would have
            os._exit(128 + signum)  # (not os.kill: here, before exec, tracer's own Python handlers still stand)

    return preexec


#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> None:
    """In a local worker process (it parses rank after rank): let glibc's malloc keep freed memory for the next
    rank instead of handing it back to the kernel. By default every allocation over its threshold (the file's
    bytes, the large arrays) is a fresh mmap, faulted in page by page and unmapped when freed: ~37,000 page faults
    and ~0.15 s of system time per 100 MB rank, ~3,000 and ~0.03 s with these settings (measured in
    docs/performance.md). Only for workers that parse several ranks (the pool sets it so), never in the
    caller's own process (a dashboard's server lives on); nothing where malloc is not glibc's."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # (as in die_with)

        mallopt = ctypes.CDLL(None).mallopt
        # glibc 2.36 (measured) takes 1 GiB, so a rank's 100 MB of file bytes come from the heap too; a glibc
        # that refuses thresholds over 32 MiB still keeps everything below that
        if not mallopt(_M_MMAP_THRESHOLD, 1 << 30):
            mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    except Exception:  # noqa: BLE001 - (no _ctypes, musl, no symbol table ...): a speed-up only, never an error
        return
