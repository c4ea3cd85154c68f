"""A user's SQLite file (an Nsight Systems export), opened so that no read of it can run without end.

SQLite runs whatever a file's schema says: a view in place of a table can be a recursive query that never ends,
and Python gets no control back while SQLite steps through it, so not even Ctrl-C stops it. Every connection
tracer opens on a user's SQLite file comes from :func:`open_bounded`, which:

- opens it read-only (``mode=ro``, ``PRAGMA query_only``), with ``PRAGMA trusted_schema = OFF`` (a schema's
  views may not call functions that have side effects) and no attached databases;
- caps any one string or BLOB at :data:`MAX_VALUE_BYTES` (``Connection.setlimit``, Python 3.11 and later);
- runs a progress handler every :data:`_TICK` SQLite VM steps, which ends the read with one
  :class:`~tracer.errors.TraceFormatError` once it has taken longer than its budget (:func:`read_budget_s`:
  scaled to the file's size; ``TRACER_SQLITE_MAX_SECONDS`` sets it), and through which Ctrl-C and SIGTERM
  get in: their exception, raised inside the handler, is kept and raised again once SQLite has stopped.

:func:`schema_objects` says which names are plain tables; a reader reads nothing else (a view, a virtual table,
a table whose columns are computed on read) — see :func:`tracer.parsers.nsys.parse_nsys_sqlite`.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from tracer.errors import TraceFormatError
from tracer.files.env_limits import env_limit

#: The environment variable that sets the time budget of one file's read, in seconds (0: none).
BUDGET_ENV = "TRACER_SQLITE_MAX_SECONDS"
#: The budget of one file's read: a floor, plus this much per MB of file. Reading a real export takes well
#: under a second per 10 MB (pandas included); the budget is about 20 times that, so that only a read that
#: does not end, or a file built to be slow, reaches it.
BUDGET_FLOOR_S = 30.0
BUDGET_S_PER_MB = 0.5
#: The longest string or BLOB SQLite may make while reading (a name, a JSON value: real ones are KB).
MAX_VALUE_BYTES = 64 * 1024 * 1024
#: SQLite VM steps between two calls of the progress handler: well under a millisecond of work, so Ctrl-C
#: is answered at once, and the handler's cost (one clock read) is lost in the work.
_TICK = 20_000
#: How a virtual table's statement starts (SQLite keeps the text as written, in any case and spacing).
_VIRTUAL = re.compile(r"\s*CREATE\s+VIRTUAL\b", re.IGNORECASE)


def read_budget_s(size_bytes: int) -> float | None:
    """The seconds a read of a file of ``size_bytes`` may take (None: no limit, ``TRACER_SQLITE_MAX_SECONDS=0``)."""
    value = env_limit(BUDGET_ENV)
    if value is not None:
        return value or None
    return float(round(BUDGET_FLOOR_S + BUDGET_S_PER_MB * size_bytes / 1e6))  # (whole seconds: said in errors)


class _Guard:
    """The progress handler's state: the deadline, and why the read was stopped (None while it runs on)."""

    def __init__(self, subject: str, seconds: float | None) -> None:
        self.subject = subject
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.stop: BaseException | None = None
        # The handler is a generator's __next__, not a function: a signal's exception (KeyboardInterrupt)
        # is raised where Python first checks for signals, which in a function is its first instruction,
        # before any try; in a generator it is the resumption after ``yield``, inside the try below. (An
        # exception that leaves the handler is dropped by sqlite3 and only "interrupted" is seen.)
        self.tick = self._ticks().__next__

    def _ticks(self) -> Iterator[int]:
        while True:
            try:
                while self.stop is None:
                    if self.deadline is not None and time.monotonic() > self.deadline:
                        self.stop = TraceFormatError(
                            self.subject,
                            f"reading this SQLite file took longer than {self.seconds:g} s: refused (a view or "
                            f"a query that does not end?); {BUDGET_ENV} sets the limit, 0 for none",
                        )
                        break
                    yield 0
                while True:
                    yield 1  # non-zero: SQLite stops the statement ("interrupted"); every later one too
            except GeneratorExit:
                return
            except BaseException as exc:  # noqa: BLE001 - Ctrl-C or SIGTERM, raised again once SQLite stopped
                if self.stop is None or isinstance(self.stop, TraceFormatError):
                    self.stop = exc


def _uri(path: Path) -> str:
    """A read-only URI for ``path``: quoted, so that a ``?`` or ``#`` in a name is part of the name."""
    return f"file:{quote(str(path.resolve()))}?mode=ro"


@contextmanager
def open_bounded(path: str | os.PathLike[str], subject: str | os.PathLike[str] | None = None,
                 *, seconds: float | None = -1.0) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the SQLite file ``path`` whose every read is bounded (see the module).

    ``subject``: the file named in the error (default ``path``: a gzipped file's is unpacked elsewhere).
    ``seconds``: the time budget of all reads together (default :func:`read_budget_s` of the file's size;
    None: none). A read past it raises :class:`TraceFormatError`, "took longer than N s: refused"; Ctrl-C or
    SIGTERM during a read raises their exception, whatever the block made of SQLite's "interrupted".
    ``sqlite3.Error`` from opening the file is the caller's to judge.
    """
    p = Path(path)
    if seconds is not None and seconds < 0:
        seconds = read_budget_s(p.stat().st_size)
    con = sqlite3.connect(_uri(p), uri=True)
    guard = _Guard(str(subject if subject is not None else path), seconds)
    con.set_progress_handler(guard.tick, _TICK)
    try:
        con.execute("PRAGMA query_only = ON")
        con.execute("PRAGMA trusted_schema = OFF")
        if hasattr(con, "setlimit"):  # Python 3.11 and later (the limits' numbers are SQLite's own)
            con.setlimit(getattr(sqlite3, "SQLITE_LIMIT_LENGTH", 0), MAX_VALUE_BYTES)
            con.setlimit(getattr(sqlite3, "SQLITE_LIMIT_ATTACHED", 7), 0)
        yield con
    except BaseException:
        if guard.stop is not None:
            raise guard.stop from None
        raise
    finally:
        con.close()
    if guard.stop is not None:  # stopped in a read whose error the block judged harmless (an optional table)
        raise guard.stop


def schema_objects(con: sqlite3.Connection) -> tuple[set[str], dict[str, str]]:
    """The names of the file's plain tables, and what each other name of its schema that could be read is
    ("a view", "a virtual table", "a table with generated columns"): what a reader must not read, since
    reading it runs a query of the file's choosing."""
    plain: set[str] = set()
    other: dict[str, str] = {}
    rows = con.execute("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    for kind, name, sql in rows:
        if not isinstance(name, str):
            continue
        if kind == "view":
            other[name] = "a view"
        elif isinstance(sql, str) and _VIRTUAL.match(sql):
            other[name] = "a virtual table"
        else:
            plain.add(name)
    # (a generated column is computed on every read, from an expression of the file's choosing)
    generated = {r[0] for r in con.execute(
        "SELECT DISTINCT m.name FROM sqlite_master AS m, pragma_table_xinfo(m.name) AS x "
        "WHERE m.type = 'table' AND m.sql NOT LIKE 'CREATE VIRTUAL%' AND x.hidden IN (2, 3)")}
    for name in generated & plain:
        plain.discard(name)
        other[name] = "a table with generated columns"
    return plain, other
