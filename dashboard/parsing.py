"""The dashboard's parses, each in a child process with a time and a memory budget (issue 38).

Parsed on a request thread, a trace that is slow or huge to parse held that thread, and its memory, in the server
for as long as it ran: nine uploads of one endless file pinned every thread and the dashboard stopped answering.
Here every parse the dashboard makes (an upload, a run opened in the page, the runs table's summaries) runs in a
process of its own, which parses one trace, lays it out (:func:`tracer.dashboard.model.prepare`) and summarises it
(:func:`summary_of`), hands the :class:`~tracer.dashboard.model.TimelineView` and the summary back and ends:

- a wall-time budget (:attr:`ParseLimits.timeout_s`): past it the child is killed, and the page says so in one
  line;
- a memory budget (:attr:`ParseLimits.memory_bytes`): the child's ``RLIMIT_DATA`` is set to what it holds at its
  start plus the budget, so that an allocation past it fails (MemoryError, one line) rather than taking the
  machine's memory; the inflate budget of a gzip trace reads the same limit (:mod:`tracer.files.memory`);
- the kernel's out-of-memory killer takes a parse first (:func:`_first_to_go`);
- at most :attr:`ParseLimits.slots` parses at once: a request that gets no slot within
  :attr:`ParseLimits.wait_s` is told that the dashboard is busy, instead of holding a server thread while it
  waits. The server's own lock is never held during a parse: a run already parsed is served meanwhile.

The children are forked from a forkserver (:func:`_context`), and each ends with it: a dashboard that is stopped
(:meth:`Parser.close`) kills its children, and one that is killed takes its forkserver with it, whose children
then get SIGKILL (``PR_SET_PDEATHSIG``, :func:`tracer.job.oscalls.die_with`).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, NamedTuple

from tracer import errors
from tracer.analysis import registry
from tracer.analysis.summary import analyze
from tracer.dashboard.model import TimelineView, prepare
from tracer.errors import TracerError
from tracer.files.env_limits import env_limit
from tracer.files.memory import data_bytes, total_bytes
from tracer.timeline import Timeline

#: The environment variable that sets the time budget of one parse, in seconds (0: none).
TIMEOUT_ENV = "TRACER_PARSE_TIMEOUT"
#: The environment variable that sets the memory budget of one parse, in MB (0: none).
MEMORY_ENV = "TRACER_PARSE_MEMORY_MB"
#: The time budget of one parse when neither the command nor the environment sets one. A 100 MB Kineto trace
#: parses in a few seconds; only a file built to be slow, or one far bigger than a page can show, reaches it.
DEFAULT_TIMEOUT_S = 120.0
#: The memory budget of one parse by default: this share of the machine's memory (its cgroup's, where smaller).
#: Half: a gzip trace may inflate to a quarter of what is available, and parsing takes about as much again.
MEMORY_SHARE = 2
#: Parses at once by default, and how long a request waits for one to end before it is told to come back.
DEFAULT_SLOTS = 2
DEFAULT_WAIT_S = 5.0
#: What the forkserver imports once, before it forks any child (:mod:`tracer.dashboard._parse_preload`).
#: "__main__": a child then finds the main module imported, rather than running a script's imports again.
PRELOAD = ["__main__", "tracer.dashboard._parse_preload"]


@dataclass(frozen=True)
class ParseLimits:
    """The budgets of the dashboard's parses (None: no limit)."""

    timeout_s: float | None = DEFAULT_TIMEOUT_S
    memory_bytes: int | None = None
    slots: int = DEFAULT_SLOTS
    wait_s: float = DEFAULT_WAIT_S

    @classmethod
    def from_env(
        cls,
        timeout_s: float | None = None,
        memory_mb: float | None = None,
        *,
        slots: int = DEFAULT_SLOTS,
        wait_s: float = DEFAULT_WAIT_S,
    ) -> ParseLimits:
        """The limits given (0: none), else :data:`TIMEOUT_ENV` / :data:`MEMORY_ENV`, else the defaults
        (:data:`DEFAULT_TIMEOUT_S`; 1 / :data:`MEMORY_SHARE` of the machine's memory)."""
        if timeout_s is None:
            timeout_s = env_limit(TIMEOUT_ENV)
        if timeout_s is None:
            timeout_s = DEFAULT_TIMEOUT_S
        if memory_mb is None:
            memory_mb = env_limit(MEMORY_ENV)
        if memory_mb is None:
            total = total_bytes()
            memory = total // MEMORY_SHARE if total else None
        else:
            memory = int(memory_mb * 1e6) if 0 < memory_mb < math.inf else None
        return cls(timeout_s if 0 < timeout_s < math.inf else None, memory, max(1, slots), max(0.0, wait_s))


class Parsed(NamedTuple):
    """A parse's result: the run's drawing layout, and its summary where it was asked for."""

    view: TimelineView
    summary: dict[str, Any] | None


def summary_of(timeline: Timeline) -> dict[str, Any]:
    """The run's summary as its summary.json says it, less the analyses computed on demand (ranges, launches: the
    runs table and the heading show neither, and a page that does computes them from the view). A plain dict: it
    crosses from the child to the server, and holds no timeline."""
    return analyze(timeline, keep_timeline=False).to_dict(skip=[a.name for a in registry.analyses() if a.lazy])


class ParseBusyError(TracerError):
    """No parse could start now (every slot taken, or this run is being parsed for another request): said on the
    page, never remembered as the run's error."""


@dataclass(frozen=True)
class _Request:
    """What a child parses, and how."""

    path: Path
    job_files: tuple[Path, ...] = ()
    cache: bool = True
    summarize: bool = False
    memory_bytes: int | None = None
    #: the server's TRACER_* variables now: the forkserver's environment is the one it started with
    env: dict[str, str] = field(default_factory=dict)


class Parser:
    """Runs parses in child processes under :class:`ParseLimits`. Thread-safe: every request thread calls
    :meth:`view`."""

    def __init__(self, limits: ParseLimits) -> None:
        self.limits = limits
        self._slots = threading.BoundedSemaphore(limits.slots)
        self._lock = threading.Lock()
        self._children: set[Any] = set()  # the processes running now (multiprocessing's Process)
        self._closed = False

    def parse(
        self,
        subject: str,
        path: Path,
        *,
        job_files: Sequence[Path] = (),
        cache: bool = True,
        summarize: bool = False,
        wait: bool = True,
    ) -> Parsed:
        """``path`` (or the job's ``job_files``) parsed, laid out and (with ``summarize``) summarised in a child;
        ``subject`` names it in errors. Raises :class:`TracerError`: the parser's own, or one line for a parse past
        a budget, a child that died, or no slot free within :attr:`ParseLimits.wait_s` (at once, without
        ``wait``): :class:`ParseBusyError`."""
        if not self._slots.acquire(timeout=self.limits.wait_s if wait else 0):
            raise ParseBusyError(
                subject,
                f"not opened now: the dashboard is busy parsing {self.limits.slots} other "
                "trace(s); try again in a moment",
            )
        try:
            env = {k: v for k, v in os.environ.items() if k.startswith("TRACER_")}
            request = _Request(
                Path(path), tuple(Path(p) for p in job_files), cache, summarize, self.limits.memory_bytes, env
            )
            return self._run(subject, request)
        finally:
            self._slots.release()

    def _run(self, subject: str, request: _Request) -> Parsed:
        ctx = _context()
        with self._lock:
            if self._closed:
                raise TracerError(subject, "not opened: the dashboard is stopping")
            ours, theirs = ctx.Pipe(duplex=False)
            # not a daemon: a job's child starts worker processes of its own, which a daemon may not
            child = ctx.Process(target=_child_main, args=(theirs, request), name="tracer-dashboard-parse")
            try:
                child.start()
            except OSError as exc:  # (no more processes, no memory to fork: the machine's state, not the trace's)
                ours.close()
                theirs.close()
                raise TracerError(
                    subject, f"not opened: cannot start a process to parse it ({exc.strerror or exc})"
                ) from None
            self._children.add(child)
        theirs.close()  # (ours is then the only read end: a child that dies is an EOF here)
        message: tuple[Any, ...] | None = None
        try:
            timeout = self.limits.timeout_s
            if not wait([ours, child.sentinel], timeout=timeout):
                raise TracerError(
                    subject,
                    f"parsing took longer than {timeout:g} s, the dashboard's limit (tracer "
                    f"dashboard --parse-timeout); open it with `tracer summary {subject}` "
                    "instead",
                )
            try:
                message = _receive(ours)
            except (EOFError, OSError):  # (it died before it said anything)
                message = None
        finally:
            ours.close()
            if message is not None:
                child.join(timeout=5)  # (one that has sent is ending)
            if child.exitcode is None:  # (past its time, the request gone (Ctrl-C), or it sent and hangs on)
                child.kill()
            child.join()
            with self._lock:
                self._children.discard(child)
        if message is None and self._closed:
            raise TracerError(subject, "not opened: the dashboard is stopping")
        if message is None:
            raise TracerError(
                subject,
                f"the parse ended without a result ({_how_it_ended(child.exitcode)}); "
                f"open it with `tracer summary {subject}` to see why",
            )
        return _outcome(subject, message, request)

    def close(self) -> None:
        """Kill every parse running now, and start no more. Safe twice."""
        with self._lock:
            self._closed = True
            children = list(self._children)
        for child in children:
            try:
                child.kill()
            except (OSError, ValueError, AttributeError):  # (ended meanwhile, or already closed)
                pass

    def running(self) -> list[int]:
        """The pids of the parses running now."""
        with self._lock:
            return [c.pid for c in self._children if c.pid is not None]


def _context() -> Any:
    """Where children come from: a forkserver (``spawn`` where there is none, on Windows).

    Not ``fork``: the server runs threads, and a fork copies their locks mid-use. Not ``spawn``: a fresh
    interpreter importing pandas and the parsers for every parse costs ~0.8 s (measured, docs/reliability.md).
    A forkserver is a process that runs no Python thread but its own and imported the parsers once
    (:data:`PRELOAD`; the one other thread in it, pyarrow's allocator's, takes care of forks itself); forking a
    child from it costs milliseconds, and each child parses one trace and ends, so nothing of a parse outlives it (its
    memory, a C extension's state) and the memory limit is that parse's alone. Not a ``ProcessPoolExecutor``
    (``max_tasks_per_child=1`` would give the same children): a task past its time can only be stopped by
    killing its worker, which breaks the pool for every other parse."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    _short_socket_dir()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # (read when the forkserver starts: the first parse's)
    return ctx


#: The longest temporary folder a forkserver's socket can live under: an AF_UNIX path holds at most 107 bytes, and
#: multiprocessing adds ``/pymp-XXXXXXXX/listener-XXXXXXXX`` (34) to it.
_MAX_SOCKET_BASE = 70


def _short_socket_dir() -> None:
    """Make multiprocessing's temporary folder (where the forkserver's socket goes; made once per process) one whose
    path an AF_UNIX socket can take. Under a long $TMPDIR (a CI job's, pytest's) every parse failed with "AF_UNIX
    path too long"; Python 3.13 falls back to /tmp itself, 3.11 does not."""
    from multiprocessing import util

    if len(tempfile.gettempdir()) <= _MAX_SOCKET_BASE:
        return
    base = next((d for d in ("/tmp", "/var/tmp", "/dev/shm") if os.access(d, os.W_OK | os.X_OK)), None)
    if base is None:
        return  # (the start then fails with one line on the page, as any other)
    saved = tempfile.tempdir
    tempfile.tempdir = base  # (the documented override, for the one mkdtemp get_temp_dir makes and keeps)
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def _child_main(conn: Connection, request: _Request) -> None:
    """A child's life: parse, send the view back, end. Its errors go back as messages, never as a traceback."""
    # Ctrl-C in the terminal reaches the whole process group; the server stops its children itself (close())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tracer.job.oscalls import die_with

    _let_the_forkserver_go()
    die_with(None)  # (its parent is the forkserver, which ends with the server)
    _first_to_go()
    for k in [k for k in os.environ if k.startswith("TRACER_") and k not in request.env]:
        del os.environ[k]
    os.environ.update(request.env)
    if request.memory_bytes is not None:
        _limit_memory(request.memory_bytes)
    try:
        try:
            if request.job_files:
                from tracer.job.load import load_job  # (a job's reader: for jobs only)

                timeline = load_job(request.job_files, cache=request.cache)
            else:
                from tracer.parsers import load_trace

                timeline = load_trace(request.path, cache=request.cache)
            _send(conn, Parsed(prepare(timeline), summary_of(timeline) if request.summarize else None))
        except MemoryError:
            conn.send(("memory",))
        except TracerError as exc:
            conn.send(("error", type(exc).__name__, exc.subject, exc.problem))
        except Exception as exc:  # noqa: BLE001 - a parser's bug is that trace's one line, not the server's traceback
            conn.send(("failed", type(exc).__name__, " ".join(str(exc).split())[:200]))
    except OSError:  # (the server stopped listening: it gave up on this parse)
        pass
    finally:
        conn.close()


def _let_the_forkserver_go() -> None:
    """Close this child's copy of the forkserver's lifeline. multiprocessing hands every child of a forkserver the
    write end of the pipe whose end-of-file tells the forkserver that its clients are gone: a forkserver then
    outlives a killed server for as long as any of its children runs, and a child's ``PR_SET_PDEATHSIG``, which
    waits for the forkserver to end, never comes (seen: a parse ran on to its end). Without it here, the server's
    end is the forkserver's, and so this child's. (A private attribute: where it is not there, nothing is done,
    and the test of a killed server says so.)"""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None  # type: ignore[union-attr]  # (a forkserver of its own would start)


def _first_to_go() -> None:
    """Linux: make this process the one the kernel's out-of-memory killer picks first (``oom_score_adj`` 1000).
    Each parse stays within its budget, but two at once (half the machine's memory each, by default) may together
    pass what the machine has: then a parse should go, not the server or another program."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:  # (not Linux)
        pass


def _limit_memory(budget: int) -> None:
    """Let this process take ``budget`` bytes more than it holds now (``RLIMIT_DATA``, Linux; nothing where it
    cannot be set)."""
    held = data_bytes()
    if held is None:
        return
    try:
        import resource

        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        limit = held + budget if hard == resource.RLIM_INFINITY else min(held + budget, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ImportError, OSError, ValueError):
        return
    # pyarrow's allocator (mimalloc) reserved 1 GiB of address space at its first use, counted in what this process
    # held at its start: what pyarrow allocates within it would escape the limit. The C library's malloc does not.
    if "pyarrow" in sys.modules:
        import pyarrow

        pyarrow.set_memory_pool(pyarrow.system_memory_pool())


def _send(conn: Connection, parsed: Parsed) -> None:
    """Send ``parsed`` with its arrays as separate messages (pickle protocol 5, out of band): neither side copies
    them into one pickle's bytes, so a parse's result costs its size once on each side, not twice."""
    raw: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            raw.append(buffer.raw())
        except BufferError:  # (not contiguous: it goes in the pickle itself)
            return True
        return False

    head = pickle.dumps(parsed, protocol=5, buffer_callback=out_of_band)
    conn.send(("view", head, [b.nbytes for b in raw]))
    for b in raw:
        conn.send_bytes(b)


def _receive(conn: Connection) -> tuple[Any, ...]:
    """A child's message; a view's arrays are read into buffers of their own (writable, as pandas wants them)."""
    message = conn.recv()
    if not (isinstance(message, tuple) and message and message[0] == "view"):
        return tuple(message)
    _, head, sizes = message
    buffers = []
    for size in sizes:
        buffer = bytearray(size)
        if size:
            conn.recv_bytes_into(buffer)
        else:
            conn.recv_bytes()
        buffers.append(buffer)
    return ("view", pickle.loads(head, buffers=buffers))


def _outcome(subject: str, message: tuple[Any, ...], request: _Request) -> Parsed:
    """What a child sent: the parse's result, or the error it said."""
    kind = message[0]
    if kind == "view" and isinstance(message[1], Parsed):
        return message[1]
    if kind == "memory":
        budget = f"{request.memory_bytes / 1e6:,.0f} MB" if request.memory_bytes else "the memory available"
        raise TracerError(
            subject,
            f"parsing it needed more than {budget}, the dashboard's memory limit for one "
            f"parse (tracer dashboard --parse-memory-mb); open it with `tracer summary "
            f"{subject}` instead",
        )
    if kind == "error":
        _, name, error_subject, problem = message
        cls = getattr(errors, name, None)
        if not (isinstance(cls, type) and issubclass(cls, TracerError)):
            cls = TracerError
        raise cls(error_subject, problem)
    if kind == "failed":
        raise TracerError(subject, f"could not be read ({message[1]}: {message[2]})")
    raise TracerError(subject, "the parse sent back nothing the dashboard understands")


def _how_it_ended(code: int | None) -> str:
    """A child's exit code in words: a signal's name (SIGKILL from the kernel: likely out of memory)."""
    if code is None or code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}" + (", perhaps for lack of memory" if -code == signal.SIGKILL else "")
