"""torch.profiler as tracer runs it: the settings every recording uses, Kineto's start/stop noise kept off the
terminal, and what a run's meta.json says of the software it was recorded with."""

from __future__ import annotations

import contextlib
import inspect
import os
import platform
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracer import __version__

#: What Kineto (torch.profiler's C++ side) writes to stderr at every start and stop in torch 2.13's CPU build:
#: ``USDT:2026-12-03 10:31:55 9445:9445 SyncActivityProfilerHandler.cpp:52] profiler_start`` — markers for
#: user-space tracing probes, not messages for a person. Its own log level (KINETO_LOG_LEVEL) silences them only
#: together with its errors, so they are filtered out by line instead.
KINETO_NOISE = re.compile(rb"^USDT:[^\n]*\] profiler_(start|stop)\r?$")
#: The same, and the line Kineto logs when it cannot write a trace (``ERROR:... output_json.cpp:977] Failed to
#: write to log file!``): :func:`export_trace` raises that failure as an error, said once by tracer in its words.
KINETO_EXPORT_NOISE = re.compile(rb"^(USDT:[^\n]*\] profiler_(start|stop)|ERROR:[^\n]*\] Failed to write to log "
                                 rb"file!)\r?$")

#: `tracer record --stacks` / ``--no-stacks``: "1" records Python stacks (torch.profiler's ``with_stack=True``:
#: what ``tracer lines`` and the findings' source lines read) in every process the recording starts (a command's,
#: a scenario's ranks), "0" does not; unset, :data:`STACKS_DEFAULT`.
ENV_STACKS = "TRACER_STACKS"
#: Off by default: on the CPU, stacks cost a step of many small modules (every call a few Python frames) 22-29%
#: more than torch.profiler alone, far past issue 37's bar of 2%; a step of matmuls or of Python operators
#: 1-12%, within the noise of a loaded machine (two runs of bench/stacks_overhead.py, docs/lines.md). On an H100 a
#: GPU-bound step pays nothing (+0.0%) but a small launch-bound one +24.6%: the step a user profiles to see why
#: the GPU waits, so still past the bar.
STACKS_DEFAULT = False


def stacks_on(stacks: bool | None = None) -> bool:
    """Whether a recording takes Python stacks: ``stacks`` where given, else :data:`ENV_STACKS`, else
    :data:`STACKS_DEFAULT`."""
    if stacks is not None:
        return stacks
    value = os.environ.get(ENV_STACKS, "").strip()
    return value == "1" if value in ("0", "1") else STACKS_DEFAULT


def torch_profiler_settings(all_threads: bool = True, stacks: bool | None = None) -> dict[str, Any]:
    """Keyword arguments for ``torch.profiler.profile``: CPU (+ CUDA) activities, kept events, with
    ``all_threads`` every thread (the CPU mode's lanes are threads; GPU lanes are streams, fed from one thread),
    and Python stacks where :func:`stacks_on` says so (``with_stack=True``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    kwargs: dict[str, Any] = {"activities": [ProfilerActivity.CPU]}
    if torch.cuda.is_available():
        kwargs["activities"].append(ProfilerActivity.CUDA)
    stacks = stacks_on(stacks)
    accepted = inspect.signature(profile.__init__).parameters
    if "acc_events" in accepted and not stacks:
        # Without it torch >= 2.5 warns that events are cleared "at the end of each cycle"; we run one cycle.
        # Not with stacks: acc_events makes torch parse its events in Python at every stop, and with_stack's names
        # of Python frames whose code objects were freed meanwhile (a module imported while recording) fail that
        # parse with a UnicodeDecodeError, the trace lost (pytorch/pytorch#136040; 2 of 5 `tracer record --stacks`
        # runs of a small script, torch 2.13). tracer reads only the exported trace (its parser replaces bad bytes).
        kwargs["acc_events"] = True
    elif stacks:
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
    config = _experimental_config(all_threads=all_threads, cuda_sync=torch.cuda.is_available())
    if config is not None:
        kwargs["experimental_config"] = config
    if stacks:
        kwargs["with_stack"] = True
    return kwargs


def export_trace(prof: Any, path: str | os.PathLike[str]) -> None:
    """``prof.export_chrome_trace(path)``, checked, and gzipped here where ``path`` ends in ``.gz``; ``path``
    appears only when whole.

    Kineto writes ``PATH.tmp`` and renames it; when a write fails (a full disk, a file-size limit) it only logs
    "Failed to write to log file!" and returns, leaving the partial ``PATH.tmp`` and no ``PATH``. That is raised
    here as the OSError it was (ENOSPC, EFBIG: :func:`tracer.files.atomic.write_fault`), and the partial file
    removed (it would keep the disk full). (torch's own ``.gz`` export goes through a file in the system's
    temporary folder and gzips whatever is there: a failed write became an empty ``.gz``, "empty trace".)"""
    # (here: capture.py imports this module in every process of a recorded command; this is ~10 ms)
    from tracer.files.atomic import gzip_copy, gzip_name, write_fault

    dest = Path(path)
    if dest.name.endswith(".gz"):
        raw = dest.with_name(f".{dest.name[:-3]}.raw")
        packed = dest.with_name(f".{dest.name}.tmp")
        try:
            export_trace(prof, raw)
            gzip_copy(raw, packed, name=gzip_name(dest))
            os.replace(packed, dest)
        finally:
            for p in (raw, packed):
                p.unlink(missing_ok=True)
        return
    partial = dest.with_name(dest.name + ".tmp")
    try:
        with quiet_kineto(KINETO_EXPORT_NOISE):
            prof.export_chrome_trace(str(dest))
        if not dest.exists():
            raise write_fault(dest.parent, partial)
    finally:
        # emptied first: Kineto may keep it open after a failure, and an unlinked open file keeps its blocks
        with contextlib.suppress(OSError):
            os.truncate(partial, 0)
        partial.unlink(missing_ok=True)


def _experimental_config(all_threads: bool, cuda_sync: bool) -> Any:
    """torch's ``_ExperimentalConfig`` with what the installed torch accepts of: ``profile_all_threads`` (by
    default the profiler sees only the thread that started it and threads that inherit its state, like
    autograd's; the CPU mode's lanes are plain Python threads) and ``enable_cuda_sync_events`` (Kineto's
    cuda_sync rows: which stream or host call waited on which cudaEventRecord, what ``tracer explain``'s
    cross-stream and host-wait edges read; CUDA only). None when it takes neither."""
    wanted = [k for k, on in (("profile_all_threads", all_threads), ("enable_cuda_sync_events", cuda_sync)) if on]
    if not wanted:
        return None
    try:
        from torch._C._profiler import _ExperimentalConfig
    except ImportError:  # (torch without it)
        return None
    # All of them, else each alone (profile_all_threads: torch >= about 2.7, enable_cuda_sync_events: >= 2.4);
    # a keyword the installed torch does not know is a TypeError.
    for keys in [wanted, *([k] for k in wanted if len(wanted) > 1)]:
        try:
            return _ExperimentalConfig(**dict.fromkeys(keys, True))  # type: ignore[arg-type]
        except TypeError:
            continue
    return None


@contextlib.contextmanager
def quiet_kineto(noise: re.Pattern[bytes] = KINETO_NOISE) -> Iterator[None]:
    """Run the block with file descriptor 2 sent to a temporary file, then write back all of it except Kineto's
    USDT marker lines (``noise``: :data:`KINETO_NOISE`). C++ writes them to the descriptor itself, past
    ``sys.stderr``, so only a descriptor-level redirect reaches them; anything else written meanwhile (an error, a
    warning, another thread's output) comes out afterwards, unchanged. Meant for short calls: the profiler's start
    and stop, a trace's export. Where no temporary file can be made (a full /tmp), nothing is filtered."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to redirect (closed, or replaced by an object)
        yield
        return
    try:
        tmp = tempfile.TemporaryFile()
    except OSError:
        os.close(saved)
        yield
        return
    with tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines = tmp.read().splitlines(keepends=True)
            kept = [line for line in lines if not noise.match(line.rstrip(b"\n"))]
            if kept:
                os.write(2, b"".join(kept))


def environment() -> dict[str, Any]:
    """What meta.json says of the software and machine a run was recorded with (no host name)."""
    import torch

    return {
        "tracer_version": __version__,
        "python_version": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
