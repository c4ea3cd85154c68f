"""Record a multi-process scenario (``ddp``): one process per rank, each profiling itself, one run for the job.

The ranks are started the way torchrun starts a job's workers — ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` (a free port of the loopback) — so the rank's code is the
code of a user's torchrun script (``init_process_group`` from the environment). Each rank is
``python -m tracer.record.ranks rank NAME ...``: it runs the scenario with :func:`tracer.record.capture.start_windowed`
recording its profiled window, and so writes what ``tracer record -- torchrun ...`` writes for a rank
(``rank<R>-pid<P>.json.gz`` and its ``.capture.json`` status; saved on an exception and on SIGTERM too) plus
``rank<R>.result.json`` (the scenario's result). The recorder (:func:`tracer.record.scenario_run.record_job`)
then writes the run directory in the job layout of tracer/record/command.py: ``traces/``, meta.json's
``processes`` and ``missing_ranks``, :func:`tracer.record.derive.derive`, written under a temporary name and
renamed (:func:`tracer.record.command.finish_run`).

This module is what runs in the ranks' processes and in the launcher: the standard library and tracer's capture,
no pandas; torch only where a rank runs its scenario (:func:`rank_main`).

A rank that exits with an error starts the teardown: the others get :data:`GRACE_S` to end by themselves (a gloo
peer whose partner died fails at once and saves its trace), then SIGTERM, then SIGKILL. A job still running after
its ``timeout`` is a hang and is torn down the same way. Every rank that failed is named with its exit code and
the last line it wrote on stderr; the run keeps the traces that were saved, and the command exits non-zero.

Why not torchrun itself: its agent reports a failure as one exception of its own and keeps the ranks' stderr
unless told where to put it; here the launcher needs each rank's exit code and last line, a timeout of its own,
and nothing but the standard library. Why not ``torch.multiprocessing.spawn``: the ranks would be forks of the
recorder (tracer's imports, its profiler state, its terminal) and their stderr would be mixed into one.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

import tracer
from tracer.errors import TracerError
from tracer.files.atomic import write_bytes_atomic
from tracer.job.oscalls import ends_with_parent
from tracer.record import capture
from tracer.record.profiler import KINETO_NOISE
from tracer.sigterm import Terminated, sigterm_raises

#: How long the other ranks get to end by themselves once one failed (and after SIGTERM, before SIGKILL), s.
GRACE_S = 5.0
#: The launcher's poll interval, s.
POLL_S = 0.05
#: One rank's scenario result, beside its trace.
RESULT = "rank{rank}.result.json"
#: One rank's stderr (and stdout), for the last line of a rank that failed.
LOG = "rank{rank}.log"
#: What ``job`` (the launcher run under nsys) writes: every rank's :class:`RankOutcome`.
JOB = "job.json"


class RanksFailedError(TracerError):
    """One or more ranks of a job failed or hung; the run was written with the traces the others saved."""

    exit_code = 1


@dataclass
class RankOutcome:
    """How one rank process ended."""

    rank: int
    pid: int
    device: str
    #: 0, the process's code, or 128 + N when a signal N ended it (as a shell says)
    exit_code: int
    #: the last line it wrote on stderr (or stdout) that is not Kineto's noise
    last_line: str = ""
    #: still running at the job's timeout
    timed_out: bool = False
    #: ended by the launcher (SIGTERM, SIGKILL) after another rank failed or the job timed out
    torn_down: bool = False
    #: seconds from the job's start to this rank's end
    ended_s: float = 0.0

    @property
    def failed(self) -> bool:
        return self.exit_code != 0

    def describe(self) -> str:
        """``rank 1 (pid 42) exited with 1: RuntimeError: ...``."""
        if self.timed_out:
            how = f"hung (still running at the timeout), ended with {self.exit_code}"
        elif self.torn_down:
            how = f"was torn down after another rank failed, ended with {self.exit_code}"
        else:
            how = f"exited with {self.exit_code}"
        return f"rank {self.rank} (pid {self.pid}) {how}" + (f": {self.last_line}" if self.last_line else "")


# --------------------------------------------------------------------------------------------------------------
# the launcher


def free_port() -> int:
    """A TCP port of the loopback that nothing listens on now (the job's MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loopback_interface() -> str | None:
    """The loopback's interface name (``lo`` on Linux, ``lo0`` on macOS), or None."""
    try:
        names = {name for _index, name in socket.if_nameindex()}
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def rank_environment(rank: int, world: int, port: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment torchrun gives rank ``rank`` of a one-host job of ``world`` ranks, on ``port``."""
    env = dict(os.environ if base is None else base)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
    if not env.get("GLOO_SOCKET_IFNAME"):
        # Every rank is on this host and meets at 127.0.0.1: the loopback is the interface. Left to itself gloo
        # picks the interface of the host name, which on these machines cannot reach the others (the job hangs)
        lo = loopback_interface()
        if lo is not None:
            env["GLOO_SOCKET_IFNAME"] = lo
    return with_tracer_on_path(env)


def with_tracer_on_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this tracer's source root first on PYTHONPATH: a child imports the same tracer and scenarios."""
    root = str(Path(tracer.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def launch(commands: Sequence[Sequence[str]], devices: Sequence[str], log_dir: Path, *, timeout_s: float,
           grace_s: float = GRACE_S, base_env: Mapping[str, str] | None = None) -> tuple[list[RankOutcome], float]:
    """Start rank r as ``commands[r]`` with torchrun's environment, wait for every rank, tear the job down when a
    rank fails or the timeout passes; return each rank's outcome and the job's wall time (s)."""
    world = len(commands)
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    t0 = time.perf_counter()
    try:
        with sigterm_raises(Terminated):  # (inside the tracer command: its own, already)
            for rank, cmd in enumerate(commands):
                with open(log_dir / LOG.format(rank=rank), "wb") as log:
                    procs.append(subprocess.Popen(list(cmd), env=rank_environment(rank, world, port, base_env),
                                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                  preexec_fn=ends_with_parent()))  # (die with a killed tracer)
            ended, timed_out, torn_down = _wait(procs, t0, timeout_s, grace_s)
    except BaseException:  # Ctrl-C, SIGTERM of the recorder (tracer.sigterm.Terminated): no rank outlives it
        _stop(procs, grace_s)
        raise
    wall = time.perf_counter() - t0
    outcomes = []
    for rank, p in enumerate(procs):
        code = p.returncode if p.returncode is not None else -signal.SIGKILL
        outcomes.append(RankOutcome(
            rank=rank, pid=p.pid, device=devices[rank], exit_code=128 - code if code < 0 else code,
            last_line=last_line(log_dir / LOG.format(rank=rank)), timed_out=rank in timed_out,
            torn_down=rank in torn_down and rank not in timed_out, ended_s=round(ended.get(rank, wall), 3)))
    return outcomes, wall


def _wait(procs: list[subprocess.Popen[bytes]], t0: float, timeout_s: float,
          grace_s: float) -> tuple[dict[int, float], set[int], set[int]]:
    """Poll until every rank ended: (when each ended, the ranks that hung, the ranks the teardown ended)."""
    ended: dict[int, float] = {}
    timed_out: set[int] = set()
    torn_down: set[int] = set()
    failed_at: float | None = None  # when the first rank failed
    term_at: float | None = None  # when the survivors got SIGTERM
    while len(ended) < len(procs):
        now = time.perf_counter()
        for rank, p in enumerate(procs):
            if rank not in ended and p.poll() is not None:
                ended[rank] = now - t0
                if p.returncode != 0 and failed_at is None:
                    failed_at = now
        alive = [r for r in range(len(procs)) if r not in ended]
        if alive and term_at is None:
            if now - t0 >= timeout_s:
                timed_out.update(alive)
            if timed_out or (failed_at is not None and now - failed_at >= grace_s):
                torn_down.update(alive)
                for r in alive:
                    procs[r].send_signal(signal.SIGTERM)  # the rank saves its trace on the way out
                term_at = now
        elif alive and term_at is not None and now - term_at >= grace_s:
            for r in alive:
                procs[r].kill()  # stuck where SIGTERM's handler cannot run (inside a C++ call)
        time.sleep(POLL_S)
    return ended, timed_out, torn_down


def _stop(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.perf_counter() + grace_s
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def last_line(log: Path) -> str:
    """The last line of a rank's output that says something (not Kineto's USDT markers), at most 300 chars."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - 65536))
            lines = f.read().splitlines()
    except OSError:
        return ""
    for raw in reversed(lines):
        if raw.strip() and not KINETO_NOISE.match(raw):
            text = raw.decode("utf-8", "replace").strip()
            return text if len(text) <= 300 else text[:299] + "…"
    return ""


def rank_command(name: str, out: Path, device: str, params: Mapping[str, str], profiler: str) -> list[str]:
    """``python -m tracer.record.ranks rank NAME ...``: one rank of scenario ``name``."""
    cmd = [sys.executable, "-m", "tracer.record.ranks", "rank", name, "--device", device, "--out", str(out),
           "--profiler", profiler]
    for k, v in params.items():
        cmd += ["--param", f"{k}={v}"]
    return cmd


def rank_devices(world: int, on_gpu: bool, gpus: int) -> tuple[str, list[str], str | None]:
    """(distributed backend, each rank's device, a note or None): NCCL with GPU r for rank r when there is a GPU
    per rank, else gloo with every rank on the CPU."""
    if on_gpu and gpus >= world:
        return "nccl", [f"cuda:{r}" for r in range(world)], None
    note = None
    if on_gpu:
        note = f"gloo on the CPU: {world} ranks but {gpus} GPU(s); NCCL needs a GPU of its own for every rank"
    return "gloo", ["cpu"] * world, note


# --------------------------------------------------------------------------------------------------------------
# the rank's and the launcher's entry points


def rank_main(args: argparse.Namespace) -> int:
    """One rank: run the scenario, its profiled window recorded (``--profiler torch``) or bounded by
    cudaProfilerStart/Stop (``cuda-range``, under nsys); write its result. Exit 0 once the scenario ran to its
    end (its checks are in the result), 2 for a scenario error; an exception propagates (exit 1, traceback)."""
    # (torch, here in the rank's process only: this module is also the launcher's, and the recorder's)
    from tracer.scenarios import ScenarioError, parse_param_args, run_scenario

    out = Path(args.out)
    profiler: Any = None
    if args.profiler == "torch":
        profiler = capture.start_windowed(out).recording
    elif args.profiler == "cuda-range":
        from tracer.scenarios.__main__ import cuda_profiler_range  # (torch, as above)

        profiler = cuda_profiler_range
    try:
        result = run_scenario(args.name, args.device, parse_param_args(args.param), profiler=profiler)
    except ScenarioError as exc:
        print(f"{args.name}: error: {exc}", file=sys.stderr)
        return 2
    write_bytes_atomic(out / RESULT.format(rank=int(os.environ["RANK"])), orjson.dumps(result.to_dict()))
    if args.profiler != "cuda-range":  # (under nsys the process ends as usual: nsys' own exit handlers save)
        end_without_teardown(0)
    return 0


def end_without_teardown(code: int) -> None:
    """End this rank now, its work saved: the exit handlers run (the capture's save), the output is flushed, and the
    interpreter's teardown is skipped. In that teardown torch's C++ objects that own threads (gloo's, the store's,
    the profiler's) are destroyed in no set order, and now and then one still running aborts the process
    ("terminate called without an active exception", exit 134: a gloo rank, once in a test run on the loaded 2-core
    machine, after its trace and result were written), which failed a run that had nothing wrong with it."""
    # What the interpreter's exit does before its teardown, in its order: wait for the threads that are not daemons
    # (and the thread pools' exit callbacks), run the exit handlers; then flush Python's and C's output buffers.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:
        for t in threading.enumerate():
            if t is not threading.current_thread() and not t.daemon:
                t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)  # (C's stdio: what torch's C++ printed)
    os._exit(code)


def job_main(args: argparse.Namespace) -> int:
    """The launcher on its own (what nsys runs): start the ranks, write every outcome to ``OUT/job.json``."""
    out = Path(args.out)
    devices = args.devices.split(",")
    params = dict(p.partition("=")[::2] for p in args.param)
    commands = [rank_command(args.name, out, d, params, "cuda-range") for d in devices]
    try:
        outcomes, _wall = launch(commands, devices, out, timeout_s=args.timeout)
    except Terminated:  # (nsys stopped, or its parent: the ranks are stopped; die of it, as by default)
        print("tracer.record.ranks: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    write_bytes_atomic(out / JOB, orjson.dumps([asdict(o) for o in outcomes]))
    return 1 if any(o.failed for o in outcomes) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tracer.record.ranks", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rank", help="run one rank (its environment from the launcher)")
    r.add_argument("name")
    r.add_argument("--device", default="cpu")
    r.add_argument("--out", required=True)
    r.add_argument("--profiler", choices=("torch", "cuda-range", "none"), default="torch")
    r.add_argument("--param", "-p", action="append", default=[])
    j = sub.add_parser("job", help="start every rank and wait (the launcher, as nsys runs it)")
    j.add_argument("name")
    j.add_argument("--devices", required=True, help="each rank's device: cpu,cpu or cuda:0,cuda:1")
    j.add_argument("--out", required=True)
    j.add_argument("--timeout", type=float, required=True)
    j.add_argument("--param", "-p", action="append", default=[])
    args = ap.parse_args(argv)
    return rank_main(args) if args.cmd == "rank" else job_main(args)


if __name__ == "__main__":
    sys.exit(main())
