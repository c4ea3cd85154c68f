"""tracer.sigterm: SIGTERM raised as an exception while inside, nested, never over a host program's handler."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tracer.sigterm import Terminated, sigterm_raises


@pytest.fixture(autouse=True)
def _default_sigterm() -> Iterator[None]:
    # (these tests start from Python's default, whatever pytest's plugins set, and leave the handler as found)
    found = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, found)


def _term() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # (the handler runs in this, the main, thread, before kill returns)


def test_sigterm_raises_inside_and_the_default_is_back_outside() -> None:
    with pytest.raises(Terminated), sigterm_raises() as active:
        assert active
        _term()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_inner_use_takes_over_and_gives_the_outer_back() -> None:
    # the dashboard's KeyboardInterrupt inside the command's Terminated
    with sigterm_raises(Terminated) as outer:
        assert outer
        with pytest.raises(KeyboardInterrupt), sigterm_raises(KeyboardInterrupt) as inner:
            assert inner
            _term()
        with pytest.raises(Terminated):
            _term()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_host_programs_own_handler_is_left_alone() -> None:
    got: list[int] = []

    def own(signum: int, _frame: Any) -> None:
        got.append(signum)

    signal.signal(signal.SIGTERM, own)
    with sigterm_raises() as active:
        assert not active
        _term()  # the host's handler runs; nothing is raised
    assert got == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is own


def test_an_ignored_sigterm_stays_ignored() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with sigterm_raises() as active:
        assert not active
        _term()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_outside_the_main_thread_nothing_changes() -> None:
    seen: list[bool] = []

    def worker() -> None:
        with sigterm_raises() as active:
            seen.append(active)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [False]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
