"""The ``tracer`` command line: one Typer app, one module per command, imported only when its command runs.

Each command module registers its command on :data:`app` when imported; :data:`COMMANDS` names every command,
its module and its short help, so that ``tracer --help``, ``tracer --version`` and a usage error import no
command module (nor the pandas, Dash or DuckDB those import at their top): :class:`TracerGroup` imports a
command's module only when that command is invoked or its own ``--help`` is asked for.

Library code raises :class:`tracer.errors.TracerError`; :func:`main` alone turns it into one line on stderr
and exit code 2, so no user ever sees a traceback for bad input. The command itself (and ``python -m tracer``)
is :func:`run`: :func:`main`, then :func:`leave`.
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple, NoReturn

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from tracer import __version__
from tracer._blas import quiet_blas
from tracer.errors import TracerError
from tracer.files import atomic
from tracer.sigterm import Terminated, sigterm_raises


def _plain_flags(params: list[Any]) -> None:
    """Flags take no value: show none in --help (Typer 0.2x prints ``<bool>`` beside them)."""
    for p in params:
        if getattr(p, "is_flag", False):
            p.metavar = ""


class _PlainFlags:
    """Mixed into a click command: its flags (``--json``, ``--help`` …) listed without a value placeholder."""

    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain_flags(self.params)

    def get_help_option(self, ctx: Any) -> Any:
        opt = super().get_help_option(ctx)  # type: ignore[misc]  # (a mixin: the click command has it)
        if opt is not None:
            _plain_flags([opt])
        return opt


class TracerCommand(_PlainFlags, TyperCommand):
    """Every tracer subcommand."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        # Typer writes a required argument {PATH}, drops the "..." of one that takes several when it has a
        # metavar, and keeps the lower-case name of one without: say each as click and man pages do (PATH,
        # [PATH], PATH... for one or more).
        pieces: list[str] = super().collect_usage_pieces(ctx)
        arguments = [p for p in self.get_params(ctx) if p.param_type_name == "argument"]
        for param in arguments:
            typer_piece = param.get_usage_pieces(ctx)[0]
            name = (param.metavar or param.name or "").upper()
            piece = name if param.required else f"[{name}]"
            pieces[pieces.index(typer_piece)] = piece + ("..." if param.nargs != 1 else "")
        return pieces


class _Interrupted(Exception):
    """Ctrl-C inside a command, carried past Typer to :func:`main`."""


class CommandRow(NamedTuple):
    """A command as the group knows it before its module is imported: a row of :data:`COMMANDS`."""

    module: str
    """``tracer.cli.<module>`` registers the command on :data:`app` when imported."""
    short_help: str
    """What ``tracer --help`` lists: the first paragraph of the command's help, on one line (a test compares)."""


#: Every command, in the order ``tracer --help`` lists them.
COMMANDS: dict[str, CommandRow] = {
    "summary": CommandRow("summary", "Compute, copy and their overlap per GPU; busy time per stream; GPU time per "
                          "NVTX range."),
    "explain": CommandRow("explain", "The critical path: the chain of dependent intervals that set the end-to-end "
                          "time, each piece labelled (gpu compute, communication, copy, launch overhead, host work, "
                          "waiting on a sync, waiting on another stream, gpu gap, host gap); then the findings: every "
                          "copy that did not overlap compute and every GPU idle gap over --min-gap-us, with the reason "
                          "read from the graph, what it cost and the fix, ranked by time on the path. Times in ms (ns "
                          "in --json). A job's ranks are joined by their collectives: none completes on a rank before "
                          "every rank arrived, so the path crosses to the straggler, and a collective that waited for "
                          "one is a finding. docs/explain.md says how the graph is read from the trace."),
    "record": CommandRow("record", "Run SCENARIO, or your own command, under a profiler and write a run directory: "
                         "trace, Parquet timeline, meta.json, summary.json."),
    "scenarios": CommandRow("record", "List the scenarios `tracer record` runs, with their variants and parameters "
                            "(CPU / GPU defaults)."),
    "export": CommandRow("export", "Write a trace in another tool's format, for Nsight Systems (`nsys stats`, "
                         "ImportNvtxt), Perfetto or DataFrame tools. The file appears only when it is complete; an "
                         "existing OUTPUT needs --force."),
    "dashboard": CommandRow("dashboard", "Browse runs and their timelines in the browser: compute, copies and their "
                            "overlap per GPU and stream."),
    "diff": CommandRow("diff", "Compare two traces: work matched by kind and name (added, removed, increased, "
                       "decreased, unchanged), the headline figures side by side, and where the time went."),
    "sql": CommandRow("sql", "Read-only SQL (DuckDB) over a run's timeline."),
    "lines": CommandRow("lines", "GPU time per line of your code, like a line profiler's table: for each line, the "
                        "GPU time of the kernels, copies and collectives it launched, its share of the run's GPU "
                        "time, its time on the critical path, the time its calls waited for the GPU (syncs) and its "
                        "copies' time beside no compute; per rank for a job. Needs Python stacks (torch.profiler "
                        "with_stack=True). Times in ms (ns in --json). docs/lines.md."),
}


def load_command(name: str) -> Any:
    """The click command ``name`` (a key of :data:`COMMANDS`): its module imported, its registration on
    :data:`app` turned into a command as Typer turns each one when it builds the group."""
    module = f"tracer.cli.{COMMANDS[name].module}"
    importlib.import_module(module)
    for info in app.registered_commands:
        if info.callback is not None and (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
            return typer.main.get_command_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short,
                                                    rich_markup_mode=app.rich_markup_mode)
    raise LookupError(f"{module} registers no command {name!r}")


class _LazyCommands(MutableMapping[str, Any]):
    """The group's commands by name: every name of :data:`COMMANDS` from the start, in its order, each command
    built on first use (:func:`load_command`). Typer reads the names for its "Did you mean ...?"."""

    def __init__(self, built: MutableMapping[str, Any]) -> None:
        self._built = dict(built)  # (the commands of the modules imported already, and any added)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = load_command(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("tracer's commands are not removed")

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(name not in COMMANDS for name in self._built)

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._built


class TracerGroup(_PlainFlags, TyperGroup):
    """The ``tracer`` group itself: it imports a command's module only when the command is invoked or its own
    ``--help`` is asked for (click's "lazy loading" of subcommands)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands(self.commands)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # (the names only: Typer's own reads every command)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if self._listing and cmd_name in COMMANDS:
            # (what the group's help lists of a command: its name and short help, its module not imported)
            return TyperCommand(name=cmd_name, short_help=COMMANDS[cmd_name].short_help)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The group's help, its commands listed from :data:`COMMANDS` (:meth:`get_command`)."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def invoke(self, ctx: Any) -> Any:
        # Typer turns a KeyboardInterrupt into a silent Exit(130) (typer/core.py, _main), so Ctrl-C in any
        # command ended with no message; carry it to main() instead, which says "tracer: interrupted".
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted() from None


app = typer.Typer(
    cls=TracerGroup,
    name="tracer",
    help=(
        "See how PyTorch work runs in parallel across GPUs, CUDA streams and the CPU, and how much copy "
        "traffic hides behind compute.\n\n"
        "Typical use: `tracer record compute-copy` (run a scenario under the profiler), "
        "`tracer summary runs/...` (numbers), `tracer dashboard` (pictures)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

def _version(value: bool) -> None:
    if value:
        print(f"tracer {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    """A group callback, so that every command is a subcommand even while only one exists."""


def interrupted_line(published_before: int, what: str = "interrupted") -> str:
    """What Ctrl-C (``what`` "interrupted") or SIGTERM ("terminated (SIGTERM)") says: that alone where nothing
    was written, else which run was written, whole, before it came (a run published and then "interrupted" or
    "terminated" read as if it had been lost)."""
    kept = atomic.published[published_before:]
    if kept:
        return f"tracer: {what} after the run was written (it is complete and kept): {kept[-1]}"
    return f"tracer: {what}"


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 success, 1 failure — the output could not be written, say — 2 bad
    input or usage, 130 interrupted, 143 terminated by SIGTERM)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] != ["record"]:
        # (not where a scenario runs in this process: where numpy and torch share one OpenBLAS library, as some
        # conda builds do, the scenario's CPU matmuls would run on one thread)
        quiet_blas()
    obj: dict[str, Any] = {}
    if args[:1] == ["record"] and "--" in args:
        # `tracer record [OPTIONS] -- COMMAND ...`: everything after the first "--" is the user's command,
        # options and all, and never tracer's (click would hand it over as positional arguments, mixed with
        # SCENARIO, and could not tell "tracer record -- foo" from "tracer record foo")
        cut = args.index("--")
        args, obj["command"] = args[:cut], args[cut + 1:]
    published_before = len(atomic.published)
    try:
        # (SIGTERM raised as Terminated: the command's clean-up runs, its workers stop, one line is said)
        with sigterm_raises(Terminated):
            rc = app(args=args, prog_name="tracer", standalone_mode=False, obj=obj)
    except Terminated:
        print(interrupted_line(published_before, "terminated (SIGTERM)"), file=sys.stderr)
        return 128 + signal.SIGTERM
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except TracerError as exc:
        print(f"tracer: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (KeyboardInterrupt, _Interrupted):
        print(interrupted_line(published_before), file=sys.stderr)
        return 130
    except Exception as exc:
        # Click's usage errors (Typer vendors its own copy of click, so match by shape, not by class): one
        # line and a hint instead of click's multi-line box, like every other bad input.
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `tracer`: the help is already printed
            return 0
        code = getattr(exc, "exit_code", None)
        if hasattr(exc, "format_message") and isinstance(code, int):
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "tracer"
            hint = f"try '{where} --help'"
            stray = [a for a in args[1:] if "=" in a and not a.startswith("-")]
            if where.endswith("record") and stray and "unexpected extra argument" in exc.format_message():
                # `tracer record compute-copy variant=side-stream`: a scenario's parameters go after -p
                hint = "a scenario's parameters go after -p: " + " ".join(f"-p {a}" for a in stray)
            print(f"tracer: error: {exc.format_message()} ({hint})", file=sys.stderr)
            return int(code)
        if type(exc).__name__ == "Abort":
            print("tracer: aborted", file=sys.stderr)
            return 130
        raise
    return rc if isinstance(rc, int) else 0


def run() -> NoReturn:
    """The ``tracer`` command and ``python -m tracer``: :func:`main`, then :func:`leave` with its exit code."""
    leave(main())


def leave(code: int) -> NoReturn:
    """End the process with ``code`` once a command is done: the exit handlers run (temporary folders removed,
    logs closed) and stdout / stderr are flushed, but the interpreter's teardown of every module loaded (pandas,
    pyarrow, Dask ...: 0.1–0.15 s after a job's summary, ~4% of its first open on 2 cores; docs/performance.md)
    is skipped. The usual exit where another thread still runs (it is joined first) or the output cannot be
    flushed (a pipe closed early: said and coded as it always was)."""
    if threading.active_count() == 1:
        try:
            atexit._run_exitfuncs()  # (they are cleared as they run: an exit below does not run them twice)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - the usual exit deals with it, as without this function
            sys.exit(code)
        os._exit(code)
    sys.exit(code)
