"""SIGTERM raised as an exception, so that whatever tracer is doing ends as on Ctrl-C: its temporary files removed,
its worker processes and rank processes stopped, one line said.

Python's default for SIGTERM (a batch system's time limit, ``kill``, a CI job cancelled, ``docker stop``) is to
die at once, with no ``finally`` run. Every place in tracer that must clean up on SIGTERM uses
:func:`sigterm_raises`; they nest (the command's :class:`Terminated` around the whole of it, the dashboard's
KeyboardInterrupt around its server), and none of them takes over a handler the host program set itself.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


class Terminated(BaseException):
    """SIGTERM, raised in the main thread (:func:`sigterm_raises`). A BaseException, as KeyboardInterrupt is:
    no ``except Exception`` of a command takes it for a failure of its own."""


class _Raise:
    """A SIGTERM handler that raises ``exc`` (one of this module's: :func:`sigterm_raises` may replace it)."""

    def __init__(self, exc: type[BaseException]) -> None:
        self.exc = exc

    def __call__(self, _signum: int, _frame: Any) -> None:
        raise self.exc()


@contextlib.contextmanager
def sigterm_raises(exc: type[BaseException] = Terminated) -> Iterator[bool]:
    """While inside, SIGTERM raises ``exc`` in the main thread; the handler it found is back on the way out.
    Yields whether it is in force: not where this is not the main thread (an embedding caller's worker
    thread), nor where SIGTERM has a handler of the host program's own (neither Python's default nor one of
    these), which is left alone."""
    current = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or not (
            current is signal.SIG_DFL or isinstance(current, _Raise)):
        yield False
        return
    previous = signal.signal(signal.SIGTERM, _Raise(exc))
    try:
        yield True
    finally:
        signal.signal(signal.SIGTERM, previous)
