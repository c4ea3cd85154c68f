"""What every scenario runs on: the devices it was given, the lanes that stand in for devices, phases, timing.

A *lane* is one place where work runs in order: a GPU (its default stream), a CUDA stream of one GPU standing
in for a device, or a CPU thread standing in for a device. Scenarios are written once against lanes and
:meth:`Context.submit`; the three device modes differ only in what a lane is:

* ``multi-gpu``   — N ≥ 2 GPUs, one lane per GPU (each GPU's default stream);
* ``streams``     — one GPU, ``lanes`` CUDA streams on it;
* ``cpu-threads`` — no GPU, ``lanes`` single-worker threads.

Work submitted to a GPU lane is *launched* on its stream and returns at once (the GPU runs it later); work
submitted to a thread lane is queued on that lane's thread. Either way :meth:`Context.sync` waits for all of
it, and a :class:`Handle` passed as an argument to :meth:`Context.submit` is a data dependency: the new work
waits for it (a CUDA event, or a future) and its value is moved to the new lane's device first.

This module imports only torch, nvtx and the standard library: scenarios feed the recorder, never the reverse.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import record_function

try:  # NVTX ranges make phases visible to Nsight Systems; without the package they are simply absent.
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - depends on the environment
    _nvtx = None

MODES = ("multi-gpu", "streams", "cpu-threads")

#: Intra-op threads of torch in every thread of a ``cpu-threads`` run (the lanes and the main thread): one lane
#: stands for one device, so it gets one core. With torch's default (one OpenMP team of every core in *each*
#: lane thread) two lanes put four spinning OpenMP threads on two cores, and a phase took 3 ms or 300 ms by luck
#: (docs/scenarios.md, "Timing on the CPU").
CPU_INTRA_OP_THREADS = 1

#: How much longer a part may seem than the whole it belongs to (relative) before a figure derived from the two
#: counts as impossible rather than as timer noise, and is left out with a note.
NOISE = 0.10


class ScenarioError(Exception):
    """Something the user asked for cannot run: a bad parameter, an unusable device choice."""


class ParamError(ScenarioError):
    """A ``--param`` that the scenario does not have, or a value it cannot take."""


class DeviceError(ScenarioError):
    """A ``--device`` choice that names no usable device (a GPU on a machine without CUDA, a typo)."""


_nvtx_warned = False


def _nvtx_range(name: str) -> contextlib.AbstractContextManager[Any]:
    global _nvtx_warned
    if _nvtx is None:
        if not _nvtx_warned:
            _nvtx_warned = True
            warnings.warn(
                "the nvtx package is not installed: phases carry no NVTX ranges, so Nsight Systems will not "
                "see them (torch.profiler still does). `pip install nvtx` to add them.",
                RuntimeWarning,
                stacklevel=3,
            )
        return contextlib.nullcontext()
    return _nvtx.annotate(name)


@contextlib.contextmanager
def phase_range(name: str) -> Iterator[None]:
    """One NVTX range and one ``record_function`` range, both called ``name``."""
    with _nvtx_range(name), record_function(name):
        yield


# --------------------------------------------------------------------------------------------------------------
# Device choice


@dataclass(frozen=True)
class DevicePlan:
    """What ``--device`` resolved to."""

    requested: str
    mode: str  # one of MODES
    devices: tuple[str, ...]  # ("cuda:0", "cuda:1") | ("cuda:0",) | ("cpu",)

    @property
    def on_gpu(self) -> bool:
        return self.mode != "cpu-threads"


def resolve_devices(spec: str = "auto") -> DevicePlan:
    """Turn ``auto | cpu | cuda | cuda:0,cuda:1,...`` into a :class:`DevicePlan`.

    ``auto`` and ``cuda`` take every visible GPU; two or more give ``multi-gpu``, one gives ``streams``.
    """
    text = (spec or "auto").strip().lower()
    have_cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if have_cuda else 0
    if text == "auto":
        text = "cuda" if count else "cpu"
    if text == "cpu":
        return DevicePlan(spec, "cpu-threads", ("cpu",))
    if not have_cuda or count == 0:
        raise DeviceError(
            f"--device {spec}: this machine has no usable CUDA GPU (torch {torch.__version__}); "
            "use --device cpu (threads stand in for devices) or --device auto"
        )
    if text == "cuda":
        indices = list(range(count))
    else:
        indices = []
        for part in text.split(","):
            part = part.strip()
            if part == "cuda":
                part = "cuda:0"
            if not part.startswith("cuda:") or not part[5:].isdigit():
                raise DeviceError(
                    f"--device {spec}: cannot read {part!r}; expected auto, cpu, cuda or a list like cuda:0,cuda:1"
                )
            idx = int(part[5:])
            if idx >= count:
                raise DeviceError(f"--device {spec}: cuda:{idx} does not exist, this machine has {count} GPU(s)")
            if idx in indices:
                raise DeviceError(f"--device {spec}: cuda:{idx} is named twice")
            indices.append(idx)
    devices = tuple(f"cuda:{i}" for i in indices)
    return DevicePlan(spec, "multi-gpu" if len(devices) > 1 else "streams", devices)


# --------------------------------------------------------------------------------------------------------------
# Lanes and handles


@dataclass(eq=False)
class Lane:
    """One place where work runs in order (see the module docstring)."""

    index: int
    label: str
    device: torch.device
    stream: torch.cuda.Stream | None = None  # GPU lanes
    executor: ThreadPoolExecutor | None = None  # thread lanes; None with no stream = the main thread

    @property
    def is_cuda(self) -> bool:
        return self.stream is not None

    def active(self) -> contextlib.AbstractContextManager[Any]:
        """Make this lane's device and stream current (nothing to do for CPU lanes)."""
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "label": self.label, "device": str(self.device)}
        if self.stream is not None:
            d["stream"] = int(self.stream.stream_id)
            d["cuda_stream"] = int(self.stream.cuda_stream)
        elif self.executor is not None:
            d["thread"] = True
        return d


@dataclass(eq=False)
class Handle:
    """The result of work submitted to a lane: its value once :meth:`value` returns, and how to wait for it."""

    lane: Lane
    _value: Any = None
    future: Future[Any] | None = None
    event: torch.cuda.Event | None = None

    def value(self) -> Any:
        """The value; for a GPU lane the tensors may still be being computed (their stream orders them)."""
        return self.future.result() if self.future is not None else self._value

    def wait_host(self) -> Any:
        """Block the calling thread until the work is done; return the value."""
        v = self.value()
        if self.event is not None:
            self.event.synchronize()
        return v


def _tree_map(fn: Callable[[Any], Any], obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tree_map(fn, o) for o in obj)
    if isinstance(obj, dict):
        return {k: _tree_map(fn, v) for k, v in obj.items()}
    return obj


def move(value: Any, src: Lane, dst: Lane) -> Any:
    """Make ``value`` (a tensor or a list/tuple/dict of them) produced on ``src`` usable on ``dst``.

    Call it with ``dst`` active and after ``dst`` has waited for the work that produced ``value``.

    * same device: no copy; on a GPU, ``record_stream`` so that the caching allocator does not hand the memory
      to someone else while ``dst``'s stream may still read it;
    * GPU → other GPU: the copy runs on the *producer's* stream (so it starts after the producer, not after
      whatever the source device's default stream holds); PyTorch makes ``dst``'s current stream wait for it.
      With peer access this is a peer-to-peer (PtoP) copy;
    * GPU → CPU: a blocking copy on the producer's stream;
    * CPU → GPU: a copy on ``dst``'s stream.
    """
    if src.device == dst.device:
        if dst.stream is not None and src.stream is not dst.stream:
            _tree_map(lambda t: t.record_stream(dst.stream) if t.is_cuda else None, value)
        return value
    if src.stream is not None:
        with torch.cuda.stream(src.stream):
            return _tree_map(lambda t: t.to(dst.device, non_blocking=dst.device.type == "cuda"), value)
    return _tree_map(lambda t: t.to(dst.device, non_blocking=False), value)


# --------------------------------------------------------------------------------------------------------------
# The context a scenario runs in


@dataclass
class Check:
    """One correctness check: did a parallel variant compute what the serial one did?"""

    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "detail": self.detail}


@dataclass
class ScenarioResult:
    """What a scenario reports: plain data, JSON-ready (the recorder stores it in meta.json)."""

    scenario: str
    variant: str  # the one asked for ("all" or a variant name)
    variants: list[str]  # the variants that ran
    mode: str
    devices: list[str]
    lanes: list[dict[str, Any]]
    params: dict[str, Any]
    times_s: dict[str, float] = field(default_factory=dict)
    #: names in ``times_s`` measured outside the profiled window (reference timings, not in the trace)
    unprofiled: list[str] = field(default_factory=list)
    #: every measurement of the names timed more than once (``times_s`` holds their median)
    samples_s: dict[str, list[float]] = field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    derived: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: what this machine cannot show, said before any figure (the derived figures are then side notes)
    caveats: list[str] = field(default_factory=list)
    #: other processes' load while the scenario ran (:class:`tracer.scenarios.hostload.HostLoad`'s dict)
    host_load: dict[str, float] = field(default_factory=dict)
    phases: list[str] = field(default_factory=list)
    gpu_names: dict[str, str] = field(default_factory=dict)
    torch_version: str = ""
    cuda_version: str | None = None
    profiled_window_s: float | None = None
    #: torch's intra-op threads in every thread of the run (``cpu-threads``: one); None = torch's default
    intra_op_threads: int | None = None

    @property
    def ok(self) -> bool:
        return all(c["ok"] for c in self.checks.values())

    def failed_checks(self) -> list[str]:
        return [f"{k}: {c['detail']}" for k, c in self.checks.items() if not c["ok"]]

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScenarioResult:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


class Context:
    """Handed to a scenario's run function: lanes, phases, timing, checks. One per run."""

    def __init__(
        self,
        scenario: str,
        plan: DevicePlan,
        params: dict[str, Any],
        *,
        lanes: int = 2,
        on_phase: Callable[[str], None] | None = None,
        profiler: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.scenario = scenario
        self.plan = plan
        self.params = params
        self.mode = plan.mode
        self._on_phase = on_phase
        self._profiler = profiler
        self._in_window = False
        self._window_used = False
        self._pending: list[Future[Any]] = []
        self._pending_lock = threading.Lock()
        self._executors: list[ThreadPoolExecutor] = []
        self.times_s: dict[str, float] = {}
        #: every measurement of a name timed more than once (``times_s`` holds their median)
        self.samples_s: dict[str, list[float]] = {}
        self.unprofiled: list[str] = []
        self.checks: dict[str, Check] = {}
        self.derived: dict[str, float] = {}
        self.notes: list[str] = []
        #: what this machine cannot show (:meth:`caveat`)
        self.caveats: list[str] = []
        #: the variants this run does (set by :func:`tracer.scenarios.registry.run_scenario` from the parameters)
        self.variants: list[str] = []
        self.phases: list[str] = []
        self.profiled_window_s: float | None = None
        #: torch's intra-op threads in every thread of this run (None: torch's default, left alone on GPUs)
        self.intra_op_threads: int | None = CPU_INTRA_OP_THREADS if plan.mode == "cpu-threads" else None
        self._saved_threads = torch.get_num_threads()
        if self.intra_op_threads is not None:
            torch.set_num_threads(self.intra_op_threads)  # the main thread: the host lane and the checks
        self.lanes: list[Lane] = self._make_lanes(max(1, int(lanes)))
        #: the CPU itself, as a lane that runs work inline on the calling (main) thread
        self.host = Lane(-1, "cpu (main thread)", torch.device("cpu"))

    # ---- lanes -------------------------------------------------------------------------------------------
    def _make_lanes(self, n: int) -> list[Lane]:
        if self.mode == "multi-gpu":
            # One lane per GPU, on the GPU's default stream: the setting of Dive into Deep Learning §13.3,
            # and cross-device copies
            # then need no stream bookkeeping beyond what PyTorch does itself.
            return [
                Lane(i, d, torch.device(d), stream=torch.cuda.default_stream(torch.device(d)))
                for i, d in enumerate(self.plan.devices)
            ]
        if self.mode == "streams":
            dev = torch.device(self.plan.devices[0])
            return [Lane(i, f"{dev}/stream{i}", dev, stream=torch.cuda.Stream(device=dev)) for i in range(n)]
        return [self._thread_lane(i, f"cpu/thread{i}") for i in range(n)]

    def _thread_lane(self, index: int, label: str) -> Lane:
        # torch's intra-op thread count is per thread (an OpenMP setting): set it in the lane's own thread,
        # before its first operation, or that operation starts an OpenMP team of every core.
        ex = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix=f"{self.scenario}-{label.replace('/', '-')}",
            initializer=torch.set_num_threads,
            initargs=(self.intra_op_threads or torch.get_num_threads(),),
        )
        self._executors.append(ex)
        return Lane(index, label, torch.device("cpu"), executor=ex)

    def side_lane(self, lane: Lane, name: str) -> Lane:
        """A second lane on ``lane``'s device: a new CUDA stream there, or a new thread on the CPU."""
        if lane.stream is not None:
            return Lane(lane.index, f"{lane.label}/{name}", lane.device, stream=torch.cuda.Stream(device=lane.device))
        return self._thread_lane(lane.index, f"{lane.label}/{name}")

    @property
    def on_gpu(self) -> bool:
        return self.plan.on_gpu

    @property
    def gpu_devices(self) -> list[torch.device]:
        seen: list[torch.device] = []
        for lane in self.lanes:
            if lane.device.type == "cuda" and lane.device not in seen:
                seen.append(lane.device)
        return seen

    # ---- running work ------------------------------------------------------------------------------------
    def submit(self, lane: Lane, fn: Callable[..., Any], *args: Any, phase: str | None = None) -> Handle:
        """Run ``fn(*args)`` on ``lane``; :class:`Handle` arguments are waited for and moved to the lane first.

        On a GPU lane ``fn`` is called now, with the lane's stream current, and only launches work; on a thread
        lane it is queued on that thread; on :attr:`host` it runs now on the calling thread.
        """
        deps = [a for a in args if isinstance(a, Handle)]
        name = f"{self.scenario}/{phase}" if phase else None

        def call() -> Any:
            with lane.active():
                if lane.stream is not None:
                    for h in deps:
                        if h.event is not None:
                            lane.stream.wait_event(h.event)
                        elif h.lane.executor is not None or h.future is not None:
                            h.value()
                else:
                    for h in deps:
                        h.wait_host()
                real = [move(a.value(), a.lane, lane) if isinstance(a, Handle) else a for a in args]
                with phase_range(name) if name else contextlib.nullcontext():
                    return fn(*real)

        if lane.executor is not None:
            fut = lane.executor.submit(call)
            with self._pending_lock:
                self._pending.append(fut)
            return Handle(lane, future=fut)
        value = call()
        event = None
        if lane.stream is not None:
            event = torch.cuda.Event()
            event.record(lane.stream)
        return Handle(lane, _value=value, event=event)

    def sync(self) -> None:
        """Wait for everything submitted so far: queued thread work and every GPU in use."""
        while True:
            with self._pending_lock:
                pending, self._pending = self._pending, []
            if not pending:
                break
            for fut in pending:
                fut.result()
        if self.on_gpu:
            for dev in self.gpu_devices:
                torch.cuda.synchronize(dev)

    # ---- phases, timing, the profiled window -----------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A phase ``<scenario>/<name>``: an NVTX range and a record_function range of that name."""
        full = f"{self.scenario}/{name}"
        if full not in self.phases:
            self.phases.append(full)
        if self._on_phase is not None:
            self._on_phase(full)
        with phase_range(full):
            yield

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """A phase whose wall time goes into the result: everything is synchronised before and after.

        Timing the same name again adds a sample: ``times_s[name]`` is then the median of them all, and
        ``samples_s[name]`` lists them (one sample of a few milliseconds on a busy machine can be far off).
        """
        self.sync()
        with self.phase(name):
            t0 = time.perf_counter()
            yield
            self.sync()
            dt = time.perf_counter() - t0
        samples = self.samples_s.setdefault(name, [])
        samples.append(dt)
        self.times_s[name] = statistics.median(samples)
        if not self._in_window and name not in self.unprofiled:
            self.unprofiled.append(name)

    @contextlib.contextmanager
    def profiled(self) -> Iterator[None]:
        """The part of the scenario that the recorder traces; set-up, warm-up and reference timings stay out.

        Every scenario opens it exactly once. Without a recorder it only marks the timings taken inside it.
        """
        if self._window_used:
            raise RuntimeError(f"scenario {self.scenario} opened its profiled window twice")
        self._window_used = True
        self.sync()
        cm = self._profiler() if self._profiler is not None else contextlib.nullcontext()
        with cm:
            self._in_window = True
            t0 = time.perf_counter()
            try:
                yield
                self.sync()
            finally:
                self._in_window = False
                self.profiled_window_s = time.perf_counter() - t0

    # ---- checks ------------------------------------------------------------------------------------------
    def check_close(self, name: str, got: Any, want: Any, *, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
        """Record whether ``got`` matches ``want`` (tensors or lists of tensors), compared on the CPU."""
        gots = got if isinstance(got, (list, tuple)) else [got]
        wants = want if isinstance(want, (list, tuple)) else [want]
        if len(gots) != len(wants):
            self.checks[name] = Check(False, f"{len(gots)} results against {len(wants)} expected")
            return False
        worst = 0.0
        for g, w in zip(gots, wants):
            g = g.detach().to("cpu", torch.float64)
            w = w.detach().to("cpu", torch.float64)
            if g.shape != w.shape:
                self.checks[name] = Check(False, f"shape {tuple(g.shape)} against {tuple(w.shape)}")
                return False
            if not torch.allclose(g, w, rtol=rtol, atol=atol):
                diff = (g - w).abs().max().item()
                self.checks[name] = Check(False, f"max |difference| {diff:.3g} beyond rtol={rtol}, atol={atol}")
                return False
            if g.numel():
                worst = max(worst, (g - w).abs().max().item())
        self.checks[name] = Check(True, f"allclose(rtol={rtol}, atol={atol}); max |difference| {worst:.3g}")
        return True

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def caveat(self, text: str) -> None:
        """Say that this machine cannot show what the scenario measures (no copy engine on the CPU, a loaded
        host): reports say it before any figure, and show the derived figures as side notes only."""
        if text not in self.caveats:
            self.caveats.append(text)

    def max_speedup(self, pieces: int) -> tuple[float, str]:
        """The most a variant can gain over one lane by spreading ``pieces`` equal pieces of work over the lanes
        (the busiest lane still does ``ceil(pieces / lanes)`` of them), and the reason, for a note. On the CPU the
        lanes are threads with one intra-op thread each, so the cores bound it too."""
        lanes = max(1, min(pieces, len(self.lanes)))
        bound = pieces / math.ceil(pieces / lanes)
        why = f"{pieces} equal pieces of work on {len(self.lanes)} lanes"
        if self.mode == "cpu-threads":
            cores = usable_cores()
            if cores < bound:
                bound, why = float(cores), f"{cores} CPU cores (one thread per lane)"
        return bound, why

    def derive(self, figures: Mapping[str, float], unless: str | None = None) -> bool:
        """Keep ``figures`` in ``derived`` unless a sanity check gave a reason not to (``unless``): then leave
        them out and say which and why in ``notes``. Returns whether they were kept."""
        if unless is not None:
            self.note(f"left out {', '.join(figures)}: {unless}")
            return False
        self.derived.update(figures)
        return True

    def close(self) -> None:
        for ex in self._executors:
            ex.shutdown(wait=True, cancel_futures=True)
        self._executors.clear()
        if self.intra_op_threads is not None:
            torch.set_num_threads(self._saved_threads)


# --------------------------------------------------------------------------------------------------------------
# Sanity checks of derived figures: a figure that cannot be right is left out, with a note, never printed


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def part_longer_than_whole(whole: tuple[str, float], parts: Mapping[str, float],
                           tolerance: float = NOISE) -> str | None:
    """Why a figure comparing ``whole`` with ``parts`` cannot be right, or None if it can.

    ``whole`` = (name, seconds) is a phase that does all the work of every part, so it cannot take less time
    than any one part alone; shorter by more than ``tolerance`` (relative) means the timings are not comparable
    (a busy machine, a cold start), not that something ran faster than its own piece.
    """
    name, whole_s = whole
    if not math.isfinite(whole_s) or whole_s <= 0:
        return f"{name} has no usable time ({whole_s!r} s)"
    for part, part_s in parts.items():
        if not math.isfinite(part_s) or part_s < 0:
            return f"{part} has no usable time ({part_s!r} s)"
        if whole_s < part_s * (1 - tolerance):
            return (f"{name} ({_ms(whole_s)}) took less time than {part} ({_ms(part_s)}) alone, yet does "
                    "all of its work: the timings are noise (a busy machine?), not a measurement")
    return None


def speedup_beyond(speedup: float, bound: float, why: str, tolerance: float = NOISE) -> str | None:
    """Why ``speedup`` cannot be right (not finite, or more than ``bound`` by more than ``tolerance``), or None.

    ``bound`` is the most the parallel variant can gain (``why`` says where it comes from: lanes, the busiest
    lane's share of the work), so a larger speedup means the timings are noise.
    """
    if not math.isfinite(speedup) or speedup <= 0:
        return f"the speedup {speedup!r} is not a positive number"
    if speedup > bound * (1 + tolerance):
        return (f"a speedup of {speedup:.2f} is more than {why} allow ({bound:g}): the timings are noise "
                "(a busy machine?)")
    return None


def sanitize_derived(derived: Mapping[str, Any], notes: list[str]) -> dict[str, float]:
    """The last guard before figures are saved or printed: drop any that is not a finite number, and any share
    (a name with "hidden" or "share") outside [0, 1]; each dropped one gets a note. Returns what is kept."""
    kept: dict[str, float] = {}
    for name, value in derived.items():
        why = None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            why = f"{value!r} is not a finite number"
        elif ("hidden" in name or "share" in name) and not 0.0 <= value <= 1.0:
            why = f"{value:.3g} is not a share between 0 and 1"
        if why is None:
            kept[name] = float(value)
        else:
            note = f"left out {name}: {why}"
            if note not in notes:
                notes.append(note)
    return kept


def seeded(seed: int) -> torch.Generator:
    """A CPU generator: data are drawn on the CPU so that every device mode computes the same numbers."""
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


def rand(gen: torch.Generator, *shape: int, device: torch.device | str = "cpu", scale: float = 1.0,
         pin: bool = False) -> torch.Tensor:
    """Uniform [0, 1) data drawn on the CPU, then placed on ``device`` (pinned if ``pin`` and a GPU is used)."""
    t = torch.rand(*shape, generator=gen)
    if scale != 1.0:
        t.mul_(scale)
    if pin and torch.cuda.is_available():
        t = t.pin_memory()
    return t.to(device)
