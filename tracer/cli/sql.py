"""`tracer sql`: read-only SQL (DuckDB, in-process) over the timelines of runs and traces; docs/sql.md."""

from __future__ import annotations

import csv
import io
import os
import sys
from collections.abc import Iterable, Iterator
from decimal import Decimal
from enum import Enum
from itertools import islice
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape

from tracer.cli import TracerCommand, app
from tracer.cli._report import say_cached, say_skipped_file
from tracer.errors import InputNotFoundError, TracerError, UsageError
from tracer.sql.session import Session


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


#: How many rows a table shows unless --max-rows says otherwise (csv and json print every row).
MAX_ROWS = 1000
#: --timeout's default for a query given as an argument or a script read from a pipe (a query over a real run
#: takes well under a second; a minute is a statement that would run on, a cross join, say).
TIMEOUT_S = 60.0

_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
            "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL")


def _cell(value: Any) -> str:
    """A value as a table shows it: NULL, whole numbers as they are, fractions to 3 decimals (trailing zeros cut)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        text = f"{value:.3f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    return str(value)


def render_table(names: list[str], types: list[str], rows: list[tuple[Any, ...]]) -> Any:
    """A rich Table of a result: numbers right-aligned; a caption when there are no rows."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, caption_justify="left")
    for name, kind in zip(names, types):
        numeric = kind.startswith(_NUMERIC)
        table.add_column(escape(name), justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*(escape(_cell(v)) for v in row))
    if not rows:
        table.caption = "(no rows)"
    return table


def table_text(names: list[str], types: list[str], rows: list[tuple[Any, ...]], width: int = 100) -> str:
    """The table as plain text, ``width`` characters wide (what docs/sql.md shows)."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False, legacy_windows=False)
    console.print(render_table(names, types, rows))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()).strip("\n") + "\n"


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    return str(value)


def _write_result(names: list[str], types: list[str], rows: Iterator[tuple[Any, ...]], fmt: Format,
                  max_rows: int, console: Any) -> None:
    if fmt is Format.table:
        shown = list(islice(rows, max_rows))
        more = sum(1 for _ in rows)
        console.print(render_table(names, types, shown))
        if more:  # (on stderr: stdout stays the table)
            print(f"tracer: note: {len(shown):,} of {len(shown) + more:,} rows shown; --max-rows N or --format csv "
                  "for all", file=sys.stderr)
        return
    out = sys.stdout
    if fmt is Format.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow(["" if v is None else v for v in row])
    else:
        out.write("[")
        for i, row in enumerate(rows):
            text = orjson.dumps(dict(zip(names, row)), default=_json_default).decode()
            out.write(("," if i else "") + text)
        out.write("]\n")
    out.flush()


def _run(session: Any, sql: str, fmt: Format, max_rows: int, console: Any) -> None:
    """Run every statement of ``sql`` in turn, printing each result."""
    for i, statement in enumerate(session.statements(sql)):
        names, types, rows = session.rows(statement)
        if i and fmt is Format.table:
            console.print()
        _write_result(names, types, rows, fmt, max_rows, console)


def history_path() -> Path:
    """Where the prompt keeps its history: $XDG_CACHE_HOME/tracer/sql_history (~/.cache by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracer" / "sql_history"


HELP = """\
Statements end with ';' and may span lines. Ctrl-D (or .quit) leaves; Ctrl-C drops the statement being typed.
.tables            the views, and what one row of each is
.schema [VIEW]     the columns of VIEW (of every view without one)
.format FORMAT     table, csv or json
.help              this text"""


def _dot(session: Any, line: str, state: dict[str, Any], console: Any) -> bool:
    """Run a dot command; False when it says to leave."""
    word, _, rest = line.strip().partition(" ")
    rest = rest.strip().rstrip(";").strip()
    if word in (".quit", ".exit", ".q"):
        return False
    if word == ".tables":
        _write_result(["view", "one row is"], ["VARCHAR", "VARCHAR"], iter(session.tables()), state["fmt"],
                      MAX_ROWS, console)
    elif word == ".schema":
        views = [rest] if rest else [v for v, _ in session.tables()]
        rows = [(v, c, t) for v in views for c, t in session.schema(v)]
        _write_result(["view", "column", "type"], ["VARCHAR"] * 3, iter(rows), state["fmt"], MAX_ROWS, console)
    elif word == ".format":
        try:
            state["fmt"] = Format(rest)
        except ValueError:
            raise UsageError(".format", f"{rest!r} is not one of table, csv, json") from None
    elif word == ".help":
        print(HELP)
    else:
        raise UsageError(word, "unknown command; .help lists them")
    return True


def _read_lines(interactive: bool) -> Iterator[str | None]:
    """Lines from stdin (with readline's editing and history on a terminal); None for a Ctrl-C."""
    first = True
    while True:
        try:
            if interactive:
                yield input("sql> " if first else "...> ")
            else:
                line = sys.stdin.readline()
                if not line:
                    return
                yield line.rstrip("\n")
        except EOFError:
            if interactive:
                print()
            return
        except KeyboardInterrupt:
            print("^C")
            first = True
            yield None
            continue
        first = False


def _statements(lines: Iterable[str | None], is_dot: Any) -> Iterator[str]:
    """Group lines into statements: up to a line ending in ';'; a dot command on a line of its own."""
    buf: list[str] = []
    for line in lines:
        if line is None:  # Ctrl-C: drop what was typed
            buf = []
            continue
        if not buf and is_dot(line):
            yield line
            continue
        if not buf and not line.strip():
            continue
        buf.append(line)
        if line.rstrip().endswith(";"):
            yield "\n".join(buf)
            buf = []
    if "\n".join(buf).strip():  # the input ended without a ';': run what is there
        yield "\n".join(buf)


def prompt(session: Any, fmt: Format, max_rows: int, console: Any) -> int:
    """Read statements from stdin and answer each; return the exit code (2 when reading a script and a statement
    failed, else 0)."""
    interactive = sys.stdin.isatty()
    history = history_path()
    readline: Any = None
    if interactive:
        try:
            import readline as _readline

            readline = _readline
            readline.set_history_length(1000)
            if history.exists():
                readline.read_history_file(history)
        except (ImportError, OSError):
            pass
        views = ", ".join(v for v, _ in session.tables())
        print(f"tracer sql on {', '.join(session.sources)}\nviews: {views}\n"
              "statements end with ';'; .help for more; Ctrl-D to quit", file=sys.stderr)
    state = {"fmt": fmt}
    failed = False
    seen = 0

    def is_dot(line: str) -> bool:
        return line.lstrip().startswith(".")

    try:
        for statement in _statements(_read_lines(interactive), is_dot):
            seen += 1
            try:
                if is_dot(statement):
                    if not _dot(session, statement, state, console):
                        break
                else:
                    _run(session, statement, state["fmt"], max_rows, console)
            except TracerError as exc:
                print(f"tracer: error: {exc}", file=sys.stderr)
                failed = True
            except KeyboardInterrupt:
                if not interactive:  # a script: Ctrl-C ends it (main says "tracer: interrupted", exit 130)
                    raise
                print("tracer: interrupted", file=sys.stderr)
    finally:
        if readline is not None:
            try:
                history.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(history)
            except OSError:
                pass
    if not seen and not interactive:
        # (no query given and nothing on standard input: a script's `tracer sql RUN` with its query forgotten)
        raise UsageError("sql", "no query: give one after the TARGET, or pipe statements (ending in ';') into "
                         "standard input")
    return 2 if failed and not interactive else 0


def _job_source(paths: list[Path], no_cache: bool) -> Any:
    """The job ``paths`` stand for as one source: its stored dataset's partitions, scanned in place (stored first
    where it is not: a first open), or, for a job that is not stored (small, ``--no-cache``, a folder that
    cannot be written), the job read as one timeline."""
    from tracer.cli._job import job_progress, say_job_cached
    from tracer.files.discover import job_label, job_traces
    from tracer.job.load import load_job, store_job
    from tracer.sql import Partitions

    for p in paths:
        if not p.exists():
            raise InputNotFoundError(p, "no such file or directory")
    traces = job_traces(paths, on_skip=say_skipped_file)
    label = str(job_label(traces))
    progress = job_progress(traces, Console(stderr=True))
    stored = None if no_cache else store_job(traces, on_rank=progress, on_cache_write=say_job_cached)
    if stored is not None:
        return Partitions(label, stored.files)
    timeline = load_job(traces, cache=not no_cache, on_rank=progress, on_cache_write=say_job_cached)
    timeline.meta.source = label
    return timeline


@app.command(cls=TracerCommand)
def sql(
    args: Annotated[
        list[str],
        typer.Argument(
            metavar="TARGET",
            help="Run directories, trace files (Kineto JSON[.gz], nsys .sqlite[.gz]/.nsys-rep, Parquet) or folders of "
            "them; several are one set of views with a source column. The last argument is the query when it is "
            "not a file or directory and holds a space; without a query, a prompt reads statements from stdin.",
        ),
    ],
    query: Annotated[
        str | None, typer.Option("--query", "-q", help="The SQL to run (then every argument is a target).")
    ] = None,
    fmt: Annotated[
        Format, typer.Option("--format", "-f", help="table, csv or json (an array of objects).")
    ] = Format.table,
    max_rows: Annotated[
        int, typer.Option("--max-rows", help="Rows a table shows at most (csv and json: all).")
    ] = MAX_ROWS,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse afresh; don't read or write the Parquet cache beside big traces.")
    ] = False,
    timeout: Annotated[
        float | None, typer.Option("--timeout", metavar="SECONDS", help="Interrupt a statement still running after "
                                   f"this long (0: never). Default: {TIMEOUT_S:g} s, none at a terminal's prompt.")
    ] = None,
    memory_limit: Annotated[
        str | None, typer.Option("--memory-limit", metavar="SIZE", help="DuckDB's memory limit (4GB, 500MB, 50%); "
                                 "a query needing more fails in one line. Default: half the memory available.")
    ] = None,
    job: Annotated[
        bool, typer.Option("--job", help="Read every trace found in the TARGETs as the ranks of ONE job (as `tracer "
                           "summary --job` does): one source, named by the job's folder, whose views scan the job's "
                           "stored dataset in place (parsed and stored first where it is not).")
    ] = False,
) -> None:
    """Read-only SQL (DuckDB) over a run's timeline.

    Views: events, kernels, copies, memsets, ranges, ops, calls, lanes, range_gpu, gpus (docs/sql.md). Nothing a
    query says can change a run: DuckDB runs in memory, cut off from the file system, and only reading
    statements (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, PIVOT, EXPLAIN) are run.

    Example: tracer sql runs/mlp "SELECT name, count(*), sum(dur_ns) FROM kernels GROUP BY name ORDER BY 3 DESC"
    """
    targets = list(args)
    if query is None and targets:
        last = targets[-1]
        if not Path(last).exists() and any(c.isspace() for c in last):
            query = targets.pop()
    if not targets:
        raise UsageError("sql", "no TARGET: give a run directory or trace file before the query")
    if max_rows < 1:
        raise UsageError("--max-rows", f"must be at least 1, not {max_rows}")
    if timeout is not None and not timeout >= 0:
        raise UsageError("--timeout", f"must be 0 (none) or more seconds, not {timeout:g}")
    if timeout is None:  # a person at a terminal's prompt stops a statement with Ctrl-C; a script has no one
        timeout = 0 if query is None and sys.stdin.isatty() else TIMEOUT_S

    console = Console()
    sources: list[Any] = [_job_source([Path(t) for t in targets], no_cache)] if job else targets
    with Session(sources, cache=not no_cache, on_cache_write=say_cached, on_skip=say_skipped_file,
                 timeout_s=timeout, memory_limit=memory_limit) as session:
        if query is not None:
            _run(session, query, fmt, max_rows, console)
            return
        rc = prompt(session, fmt, max_rows, console)
    if rc:
        raise typer.Exit(rc)
