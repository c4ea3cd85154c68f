"""The ``tracer`` command line: one Typer app, one module per command.

Library code raises :class:`tracer.errors.TracerError`; :func:`main` alone turns it into one line on stderr
and exit code 2, so no user ever sees a traceback for bad input. The command itself (and ``python -m tracer``)
is :func:`run`: :func:`main`, then :func:`leave`.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

from tracer import __version__
from tracer._blas import quiet_blas
from tracer.errors import TracerError
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


class TracerGroup(_PlainFlags, TyperGroup):
    """The ``tracer`` group itself."""

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


# Each command module registers itself on `app` when imported.
from tracer.cli import summary as _summary  # noqa: E402,F401

for _optional in ("record", "export", "dashboard", "diff", "sql", "explain", "lines"):
    try:
        __import__(f"tracer.cli.{_optional}")
    except ModuleNotFoundError as exc:  # a command whose module is not written yet
        if exc.name != f"tracer.cli.{_optional}":
            raise


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
    try:
        # (SIGTERM raised as Terminated: the command's clean-up runs, its workers stop, one line is said)
        with sigterm_raises(Terminated):
            rc = app(args=args, prog_name="tracer", standalone_mode=False, obj=obj)
    except Terminated:
        print("tracer: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except TracerError as exc:
        print(f"tracer: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (KeyboardInterrupt, _Interrupted):
        print("tracer: interrupted", file=sys.stderr)
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
            print(f"tracer: error: {exc.format_message()} (try '{where} --help')", file=sys.stderr)
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
