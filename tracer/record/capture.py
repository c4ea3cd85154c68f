"""Record a Python process you did not write for tracer: torch.profiler from the moment it imports torch until
it exits, one Kineto trace per process, written into a directory the parent names.

``tracer record -- COMMAND`` puts ``tracer/record/_bootstrap`` (a ``sitecustomize``) on the child's PYTHONPATH and
sets :data:`ENV_DIR`; every Python process started below it then calls :func:`install` at start-up, the way
coverage.py's start-up hook and ``opentelemetry-instrument`` reach processes they do not start themselves.
A process that never imports torch does nothing more (no torch import, no file). Which processes are left out
on purpose: the torchrun launcher (its workers are the ranks) and multiprocessing's spawned children
(DataLoader workers: torch.profiler does not see them either).

Each process writes ``<stem>.json.gz`` (the trace) and ``<stem>.capture.json`` (who wrote it and how it ended),
stem = ``rank<R>-pid<P>`` under a launcher that sets RANK, else ``pid<P>``; a process whose recording was cut into
parts (a schedule's cycles, the script's own profiler in between) adds ``-part<N>``. Files appear under their
final name only when complete.

How a process ends decides nothing: a normal exit, ``sys.exit(N)``, an uncaught exception, Ctrl-C and SIGTERM
(from a launcher tearing a job down) all save the trace. ``os._exit`` and SIGKILL cannot be seen and save
nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.machinery
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import orjson

from tracer.record.profiler import export_trace, quiet_kineto, torch_profiler_settings

#: The directory traces go to; set by the parent, the switch that turns capture on.
ENV_DIR = "TRACER_CAPTURE_DIR"
#: Where tracer itself is, for a child that cannot import it otherwise (added at the end of its sys.path).
ENV_HOME = "TRACER_CAPTURE_HOME"
#: ``WAIT,WARMUP,ACTIVE[,REPEAT]``: torch.profiler.schedule over optimizer steps (default: everything).
ENV_STEPS = "TRACER_CAPTURE_STEPS"
#: Seconds: start at the first optimizer step after DELAY s, stop at the first after DELAY + DURATION s.
ENV_DELAY = "TRACER_CAPTURE_DELAY"
ENV_DURATION = "TRACER_CAPTURE_DURATION"

_lock = threading.RLock()
_capture: Capture | None = None


def parse_steps(text: str) -> tuple[int, int, int, int]:
    """``"WAIT,WARMUP,ACTIVE[,REPEAT]"`` -> four non-negative ints (REPEAT 0: cycles until the end); ValueError
    with a sentence for anything else."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (3, 4) or not all(p.isdigit() for p in parts):
        raise ValueError(f"steps {text!r}: expected WAIT,WARMUP,ACTIVE[,REPEAT], four whole numbers at most")
    wait, warmup, active, repeat = (int(p) for p in parts + ["0"] * (4 - len(parts)))
    if active < 1:
        raise ValueError(f"steps {text!r}: ACTIVE must be at least 1")
    if wait + warmup < 1:
        # torch runs optimizer step hooks inside its "Optimizer.step#..." range: a cycle that stops and starts
        # the profiler at once there (no wait, no warm-up) crashes the process (segfault, torch 2.13)
        raise ValueError(f"steps {text!r}: WAIT + WARMUP must be at least 1")
    return wait, warmup, active, repeat


LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _skipped_process() -> str | None:
    """Why this process is not recorded, or None. Reads the interpreter's own command line (``sys.orig_argv``):
    at start-up ``sys.argv`` of ``python -m MOD`` is ``["-m"]``, without the module."""
    argv = list(getattr(sys, "orig_argv", None) or sys.argv or [""])
    if "--multiprocessing-fork" in argv or any("from multiprocessing." in a for a in argv):
        return "a multiprocessing child"  # spawn and forkserver children (DataLoader workers)
    for i, a in enumerate(argv[:-1]):
        if a == "-m" and argv[i + 1] in LAUNCHER_MODULES:
            return "the torchrun launcher"
    if any(Path(a).name in ("torchrun", "torchrun.exe") or a.endswith(("torch/distributed/run.py",
                                                                          "torch/distributed/launch.py"))
           for a in argv[:2]):
        return "the torchrun launcher"
    return None


def install() -> None:
    """Called at the start of every Python process under ``tracer record -- ...``: arrange for torch.profiler
    to start when (and if) torch is imported."""
    out = os.environ.get(ENV_DIR)
    if not out or _skipped_process():
        return
    if "torch" in sys.modules:
        _start(Path(out))
        return
    sys.meta_path.insert(0, _TorchImportHook(Path(out)))


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Waits for ``import torch`` and starts the capture once torch's module has run."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        # Stay installed until torch is really imported: `importlib.util.find_spec("torch")` (transformers'
        # is_torch_available) asks without importing
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, out, hook = spec.loader, self.out, self

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                if hook in sys.meta_path:
                    sys.meta_path.remove(hook)  # once, and never for torch's own submodules
                loader.exec_module(module)
                try:
                    _start(out)
                except Exception as exc:  # noqa: BLE001 - never break the user's program for a recording
                    _warn(f"recording could not start: {exc}")

        spec.loader = _Loader()
        return spec


def _warn(text: str) -> None:
    try:
        sys.stderr.write(f"tracer: warning: pid {os.getpid()}: {text}\n")
    except (OSError, ValueError):
        pass


def _start(out: Path) -> None:
    global _capture
    with _lock:
        if _capture is not None:
            return
        _capture = Capture(out)
        # Ctrl-C waits while the profiler starts: a KeyboardInterrupt raised in the middle of it goes through
        # torch's C++ (swallowed, the script runs on to its end; or std::terminate, exit 134). It comes after,
        # in the script, which ends as on any Ctrl-C, its trace saved.
        from tracer.files.atomic import ctrl_c_held  # (as gzip_copy below: off every recorded process's start)

        with ctrl_c_held():
            _capture.begin()


def start_windowed(out: Path) -> Capture:
    """This process's capture, saving into ``out`` like the start-up hook's (same file names, same status file,
    saved on exit, on an exception and on SIGTERM), but recording only inside :meth:`Capture.recording`: for a
    process tracer starts itself, such as one rank of a multi-process scenario (tracer/record/ranks.py)."""
    global _capture
    with _lock:
        if _capture is None:
            _capture = Capture(out)
            _capture.begin(record=False)
        return _capture


def current() -> Capture | None:
    """The running capture of this process, if any."""
    return _capture


class Capture:
    """torch.profiler over one process: started at torch's import, stepped by optimizer steps, saved on exit."""

    def __init__(self, out: Path) -> None:
        self.out = out
        rank = os.environ.get("RANK")
        self.rank = int(rank) if rank and rank.isdigit() else None
        self.stem = f"rank{self.rank}-pid{os.getpid()}" if self.rank is not None else f"pid{os.getpid()}"
        self.prof: Any = None
        self.part = 0
        self.steps = 0
        self.files: list[str] = []
        self.ended = "exit"
        self.started = time.monotonic()
        self.window = (float(os.environ.get(ENV_DELAY) or 0), float(os.environ.get(ENV_DURATION) or 0))
        self.schedule = parse_steps(os.environ[ENV_STEPS]) if os.environ.get(ENV_STEPS) else None
        self.paused_by_user = 0  # how many of the script's own profilers are running
        self.window_done = False
        self.recording_since: float | None = None  # when the (first) recording started, for --duration
        self.broken = False  # a failure of tracer's own: stop recording, never break the program
        self._finishing = False
        self._own_call = False
        self.notes: list[str] = []  # said in the status file: pauses, a recording stopped
        #: why a trace could not be written ("No space left on device"): the parent then refuses the run
        self.write_error: str | None = None
        self.write_errno: int | None = None

    # -- life cycle ---------------------------------------------------------------------------------------
    def begin(self, *, record: bool = True) -> None:
        """Hook the exits and optimizer steps; with ``record``, start recording (now, or after the delay)."""
        import torch  # noqa: F401 - imported already; here for the hooks below

        self.out.mkdir(parents=True, exist_ok=True)
        _watch_other_profilers()
        _hook_optimizer_steps()
        atexit.register(self.finish)
        _hook_exit_paths()
        if record and self.window[0] <= 0:
            self._start_profiler()
        elif not record:
            self.window_done = True  # no delay or duration to watch: only recording() starts and stops it

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record the block (a scenario's profiled window): the trace is saved when it ends, however it ends."""
        with _lock:
            self._start_profiler()
        try:
            yield
        finally:
            with _lock:
                self._stop_profiler()

    def _start_profiler(self) -> None:
        from torch.profiler import ProfilerAction, profile, schedule

        settings = torch_profiler_settings(all_threads=True)
        if self.schedule is not None:
            wait, warmup, active, repeat = self.schedule
            settings["schedule"] = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
        else:
            # torch.profiler writes its ProfilerStep#N ranges only when it has a schedule: one that records
            # every step is the default's behaviour with the step ranges added
            settings["schedule"] = lambda _step: ProfilerAction.RECORD
        settings["on_trace_ready"] = self._save  # each cycle, and at stop()
        self.prof = profile(**settings)
        with self._ours(), quiet_kineto():
            self.prof.start()
        if self.recording_since is None:
            self.recording_since = time.monotonic()

    def _stop_profiler(self) -> None:
        prof, self.prof = self.prof, None
        if prof is None:
            return
        with self._ours(), quiet_kineto():
            prof.stop()  # (saves through on_trace_ready while a cycle was recording)

    @contextlib.contextmanager
    def _ours(self) -> Iterator[None]:
        """Mark a call on tracer's own profiler, so that the watch on other profilers lets it through."""
        self._own_call = True
        try:
            yield
        finally:
            self._own_call = False

    def step(self) -> None:
        """One optimizer step happened: a profiler step, and the time window's edges."""
        with _lock:
            self.steps += 1
            if self.broken or self._finishing:
                return
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - tracer's failure must not break the user's optimizer step
                self._give_up(exc)

    def _step(self) -> None:
        delay, duration = self.window
        now = time.monotonic()
        if self.prof is None and not self.window_done and not self.paused_by_user and delay > 0 \
                and now - self.started >= delay:
            self._start_profiler()
            return
        if self.prof is not None and duration > 0 and self.recording_since is not None \
                and now - self.recording_since >= duration:
            self.window_done = True
            self._stop_profiler()
            return
        if self.prof is not None:
            with self._ours():
                self.prof.step()

    def _give_up(self, exc: BaseException) -> None:
        """Stop recording after a failure of tracer's own; the program goes on."""
        self.broken = True
        self._note(f"recording stopped: {exc}")
        _warn(f"recording stopped: {exc}")
        prof, self.prof = self.prof, None
        if prof is not None:
            try:
                with self._ours():
                    prof.stop()
            except Exception:  # noqa: BLE001
                pass

    def finish(self) -> None:
        """Stop and save (at exit, on SIGTERM); once. SIGINT and SIGTERM wait while it saves (torchrun sends a
        worker the Ctrl-C it got once more, and a second signal in the middle of the save would lose it)."""
        with _lock:
            if self._finishing:
                return
            self._finishing = True
            blocked = _block_signals()
            try:
                if self.prof is not None:
                    try:
                        self._stop_profiler()
                    except BaseException as exc:  # noqa: BLE001 - at exit, say it and let the process end
                        if self.write_error is None:  # (a write fault: the parent says it, in its one line)
                            _warn(f"could not save the trace: {_words(exc)}")
                self._write_status()
            finally:
                _unblock_signals(blocked)

    # -- the script's own profiler -------------------------------------------------------------------------
    def other_profiler_starts(self) -> None:
        """The script starts a torch.profiler of its own: only one can run (the second would silently empty
        the first), so ours saves what it has as a part and waits."""
        with _lock:
            self.paused_by_user += 1
            if self.prof is not None and not self.broken:
                try:
                    self._stop_profiler()
                    self._note("the script started its own torch.profiler: tracer's recording paused meanwhile")
                except Exception as exc:  # noqa: BLE001
                    self._give_up(exc)

    def other_profiler_stops(self) -> None:
        with _lock:
            self.paused_by_user = max(0, self.paused_by_user - 1)
            if not self.paused_by_user and self.prof is None and not self.window_done and not self.broken \
                    and not self._finishing and time.monotonic() - self.started >= self.window[0]:
                try:
                    self._start_profiler()
                except Exception as exc:  # noqa: BLE001
                    self._give_up(exc)

    # -- files -----------------------------------------------------------------------------------------------
    def _save(self, prof: Any) -> None:
        """Export ``prof``'s trace as the next part, gzipped, under its final name only when whole."""
        self.part += 1
        stem = self.stem if self.part == 1 else f"{self.stem}-part{self.part}"
        final = self.out / f"{stem}.json.gz"
        try:
            export_trace(prof, final)  # (a failed write raised, not only logged by Kineto; final only when whole)
            self.files.append(final.name)
        except OSError as exc:
            self.write_error, self.write_errno = _words(exc), exc.errno
            raise

    def _note(self, text: str) -> None:
        self.notes.append(text)

    def _write_status(self) -> None:
        status = {
            "pid": os.getpid(),
            "rank": self.rank,
            "local_rank": _env_int("LOCAL_RANK"),
            "world_size": _env_int("WORLD_SIZE"),
            "argv": list(sys.argv),
            "ended": self.ended,
            "optimizer_steps": self.steps,
            "files": self.files,
            "notes": self.notes,
            "write_error": self.write_error,
            "write_errno": self.write_errno,
        }
        final = self.out / f"{self.stem}.capture.json"
        tmp = self.out / f".{self.stem}.capture.json.tmp"
        try:
            tmp.write_bytes(orjson.dumps(status, option=orjson.OPT_INDENT_2))
            os.replace(tmp, final)
        except OSError as exc:  # (at exit: a line, not atexit's traceback; the parent sees the disk is full)
            tmp.unlink(missing_ok=True)
            _warn(f"could not save its status: {_words(exc)}")


def _words(exc: BaseException) -> str:
    """An error in words, without Python's ``[Errno 28]``: "No space left on device"."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _block_signals() -> set[int] | None:
    try:
        return set(signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS))
    except (AttributeError, OSError, ValueError):
        return None


def _unblock_signals(previous: set[int] | None) -> None:
    if previous is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def _hook_optimizer_steps() -> None:
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except ImportError:  # torch older than 2.0
        return

    def after_step(*_args: Any) -> None:
        if _capture is not None:
            _capture.step()

    register_optimizer_step_post_hook(after_step)


def _watch_other_profilers() -> None:
    """Route the start and end of every other torch.profiler session to the capture (see
    :meth:`Capture.other_profiler_starts`). Both torch.profiler.profile and the older
    torch.autograd.profiler.profile go through these two methods."""
    from torch.autograd import profiler as autograd_profiler

    cls = autograd_profiler.profile
    if getattr(cls, "_tracer_watched", False):
        return
    # (torch leaves both untyped)
    prepare = cast(Callable[..., Any], cls._prepare_trace)
    exit_ = cast(Callable[..., Any], cls.__exit__)

    def _prepare_trace(self: Any, *args: Any, **kwargs: Any) -> Any:
        c = _capture
        if c is not None and not c._own_call and not getattr(self, "_tracer_counted", False):
            self._tracer_counted = True
            c.other_profiler_starts()
        return prepare(self, *args, **kwargs)

    def __exit__(self: Any, *args: Any) -> Any:
        try:
            return exit_(self, *args)
        finally:
            c = _capture
            if c is not None and getattr(self, "_tracer_counted", False):
                self._tracer_counted = False
                c.other_profiler_stops()

    # Patching torch's class in place is the point: every session, whoever started it, goes through these.
    cls._prepare_trace = _prepare_trace  # type: ignore[method-assign]
    cls.__exit__ = __exit__  # type: ignore[method-assign]
    cls._tracer_watched = True  # type: ignore[attr-defined]  # our marker: patched once per process


def _hook_exit_paths() -> None:
    """SIGTERM (a launcher tearing a job down) ends a process without atexit: save first, then die of it as
    before. An uncaught exception is noted. A handler the script installed itself is left alone."""
    previous_hook = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if _capture is not None:
            _capture.ended = "interrupted" if issubclass(kind, KeyboardInterrupt) else f"exception {kind.__name__}"
        previous_hook(kind, value, tb)

    sys.excepthook = excepthook
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
    except (ValueError, OSError):
        return

    def on_term(signum: int, _frame: Any) -> None:
        if _capture is not None:
            _capture.ended = "SIGTERM"
            _capture.finish()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_term)
