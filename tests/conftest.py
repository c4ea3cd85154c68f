"""Shared fixtures: the real H200 traces in tests/data and a way to run the CLI."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

# A shell without job control starts a background command (`pytest ... &`, nohup) with SIGINT ignored, and an
# ignored signal stays ignored across exec: every tracer the tests start would then shrug off the Ctrl-C that
# the Ctrl-C tests send. Python's own handler here makes the children start with the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

DATA = Path(__file__).parent / "data"
#: HTA's two-rank NCCL sample: the small real job the job tests store and read back
# Tracer keeps a signing key (tracer.files.signed) and the SQL prompt's history under $XDG_CACHE_HOME: the tests'
# go to a folder of their own (their subprocesses inherit it), never the home of whoever runs them.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tracer-tests-cache-")

HTA_RANKS = [DATA / "external" / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]


@pytest.fixture()
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """:data:`HTA_RANKS` in a folder of their own, stored (small as they are) beside them on their first open."""
    monkeypatch.setattr("tracer.job.store.CACHE_MIN_BYTES", 0)
    d = tmp_path / "job"
    d.mkdir()
    for p in HTA_RANKS:
        shutil.copy(p, d / p.name)
    return d


def _build_each_cli_once() -> None:
    """Typer builds the click command of ``tracer`` (every option of every command, from their signatures) at
    each call of the app: 16 ms each time :func:`tracer.cli.main` runs, which the tests do about a thousand times
    in their processes (test_nsys_hostile, test_fuzz's forks, :func:`cli_main`). A process of the command builds
    it once; here too it is built once per app and the commands registered on it, then reused as click reuses
    a command (its CliRunner, many invocations of one object)."""
    import typer.main

    build = typer.main.get_command
    built: dict[int, tuple[object, tuple[int, ...], object]] = {}

    def get_command(typer_instance: typer.Typer) -> object:
        shape = (len(typer_instance.registered_commands), len(typer_instance.registered_groups),
                 id(typer_instance.registered_callback))
        kept = built.get(id(typer_instance))
        if kept is None or kept[0] is not typer_instance or kept[1] != shape:
            kept = built[id(typer_instance)] = (typer_instance, shape, build(typer_instance))
        return kept[2]

    typer.main.get_command = get_command  # type: ignore[assignment]  # (Typer.__call__ looks it up at each call)


_build_each_cli_once()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``gpu`` tests skip, saying so, where torch sees no CUDA GPU (the test machines and CI have none)."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available():
        for item in gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU; torch sees none here"))


@pytest.fixture
def data_dir() -> Path:
    return DATA


def run_cli(*args: str, module: bool = False, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run tracer as a user would: the console script, or ``python -m tracer``."""
    exe = [sys.executable, "-m", "tracer"] if module else [str(Path(sys.executable).with_name("tracer"))]
    return subprocess.run([*exe, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


#: Warnings that Python's default filters hide in a process of its own (what run_cli's command would print)
_HIDDEN_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


class CommandHung(BaseException):
    """:func:`cli_main`'s command ran past its timeout (a BaseException: no ``except Exception`` or ``except
    OSError`` in the command can take it for an error of the input)."""


def cli_main(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``tracer ARGS`` in this process through :func:`tracer.cli.main`, answered as :func:`run_cli` answers:
    the exit code, and stdout and stderr as the command writes them. For tests whose subject is a command's
    output and exit code: it spares the ~0.5 CPU-s of a new interpreter importing pandas and the CLI. What only
    a process shows stays with run_cli: its start (the console script, ``python -m tracer``), its exit
    (:func:`tracer.cli.leave`), signals; each command keeps tests that run it as a process.

    A warning the command raises is written to stderr as the process would print it (those that Python's
    default filters show). A command that registers an exit handler (which only its process would run, at its
    end) is refused: test it with run_cli. ``timeout``: as run_cli's, a command still running then is stopped
    (SIGALRM raises :class:`CommandHung` in it), so that a hang fails the test instead of the whole run."""
    import atexit
    import io
    import warnings
    from contextlib import redirect_stderr, redirect_stdout

    from tracer.cli import main

    # text over bytes, as sys.stdout is (the summary writes its JSON to sys.stdout.buffer)
    raw = [io.BytesIO(), io.BytesIO()]
    out, err = (io.TextIOWrapper(b, encoding="utf-8", write_through=True) for b in raw)
    handlers: list[object] = []
    register = atexit.register

    def record_handler(func: Any, *a: Any, **kw: Any) -> Any:
        if str(getattr(func, "__module__", "")).split(".")[0] == "tracer":
            handlers.append(func)
        return register(func, *a, **kw)

    def hung(signum: int, frame: Any) -> None:
        raise CommandHung(f"tracer {' '.join(args)} still ran after {timeout} s")

    old_cwd = os.getcwd()
    old_alarm = signal.signal(signal.SIGALRM, hung)
    try:
        if cwd is not None:
            os.chdir(cwd)
        atexit.register = record_handler  # type: ignore[assignment]  # (the command's atexit.register calls)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        with warnings.catch_warnings(record=True) as caught, redirect_stdout(out), redirect_stderr(err):
            warnings.simplefilter("default")
            rc = main(list(args))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_alarm)
        atexit.register = register
        os.chdir(old_cwd)
    assert not handlers, f"tracer {' '.join(args)} registered exit handlers {handlers}: run it with run_cli"
    for w in caught:
        if not issubclass(w.category, _HIDDEN_BY_DEFAULT):
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    # (decoded as subprocess.run(text=True) decodes: strict, universal newlines)
    text = [b.getvalue().decode().replace("\r\n", "\n").replace("\r", "\n") for b in raw]
    return subprocess.CompletedProcess(["tracer", *args], rc, *text)


def start_dashboard(argv: list[str], tries: int = 5, first: int | None = None,
                    **popen: object) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``argv`` (a ``tracer dashboard`` command) with ``--port P``, P a free port, and read its stderr up
    to the line with the URL (the lines read come back, that one last). A port found free by binding port 0 is
    free only until the dashboard binds it (``--port 0`` is refused on purpose): where another process took it in
    between, the dashboard's one-line error says so and another port is tried, so the test never flakes on it.
    ``first``: the port of the first try (a test of this retry)."""
    lines: list[str] = []
    for attempt in range(tries):
        if attempt == 0 and first is not None:
            port = first
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        proc = subprocess.Popen([*argv, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, **popen)  # type: ignore[call-overload]
        lines = []
        try:
            while (line := proc.stderr.readline()) if proc.stderr else "":
                lines.append(line)
                if "http://" in line:
                    return proc, lines
            proc.communicate(timeout=60)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        if not any(f":{port}: cannot listen there" in line for line in lines):
            break
    raise AssertionError(f"tracer dashboard ended early: {lines}")


FAKE_NSYS = """#!{python}
# Stands in for Nsight Systems: `profile` runs the program and writes a dummy report; `export` writes the
# real nsys SQLite export from tests/data (a GPU run), so the parsing and writing path is the real one.
import gzip, subprocess, sys
args = sys.argv[1:]
if args[0] == "--version":
    print("NVIDIA Nsight Systems version fake"); sys.exit(0)
out = args[args.index("-o") + 1]
if args[0] == "profile":
    # scenarios bound the capture with cudaProfilerStart/Stop; a user's command is captured whole
    assert ("--capture-range=cudaProfilerApi" in args) == {capture_range!r} and "cuda,nvtx" in args, args
    rc = subprocess.call(args[args.index("-o") + 2:])
    open(out + ".nsys-rep", "wb").write(b"fake report")
    sys.exit(rc)
if args[0] == "export":
    open(out, "wb").write(gzip.open({sqlite!r}).read()); sys.exit(0)
sys.exit(3)
"""


def install_fake_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, capture_range: bool) -> Path:
    """Put a fake ``nsys`` (:data:`FAKE_NSYS`) first on PATH; ``capture_range``: whether its ``profile`` must be
    bounded by cudaProfilerStart/Stop (scenarios) or not (commands)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nsys"
    exe.write_text(FAKE_NSYS.format(python=sys.executable, sqlite=str(DATA / "nsys_compute_copy.sqlite.gz"),
                                    capture_range=capture_range))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return exe


def find_component(component: Any, id_: str) -> Any:
    """The component with id ``id_`` inside a Dash layout tree (None if absent)."""
    if getattr(component, "id", None) == id_:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children]:
        if child is not None and not isinstance(child, (str, int, float)):
            found = find_component(child, id_)
            if found is not None:
                return found
    return None
