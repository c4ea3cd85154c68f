"""Where a job's ranks are parsed: the scheduler named, how many local processes, and whether a job is small
enough to read in the caller's own process.

Which scheduler (first found): the ``scheduler`` argument (the CLI's ``--scheduler``), the environment variable
:data:`SCHEDULER_ENV`, else ``processes``. A value is a Dask scheduler address (``tcp://HOST:PORT``,
``tls://…``, ``HOST:PORT``), for a cluster already running (its workers must see the trace files at the same
paths), or the name of a local scheduler: ``processes`` (one process per rank, as many at once as there are
cores: parsing is CPU-bound Python and numpy, which threads would serialise on the GIL), ``threads`` or
``sync`` (one after another in this process: for debugging).

No pandas and no Dask: this is decided before the job's process imports either (:mod:`tracer.job.scan`'s early
scans).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from tracer.errors import UsageError

SCHEDULER_ENV = "TRACER_DASK_SCHEDULER"
LOCAL_SCHEDULERS = ("processes", "threads", "sync")
#: ``tcp://10.0.0.5:8786``, ``tls://host:8786``, ``inproc://…``, or a bare ``host:port``.
_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ucx|inproc|ws|wss)://\S+|[A-Za-z0-9.\-\[\]:]+:\d{1,5})$")
#: Below this many bytes in all, a job's ranks are parsed one after another in this process unless a scheduler
#: is named: starting worker processes and importing Dask (~0.3-0.5 s) would cost more than it saves.
PARALLEL_MIN_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Scheduler:
    """Where a job's ranks are parsed: a local scheduler by name, or a cluster's address."""

    name: str  # one of LOCAL_SCHEDULERS, or "distributed"
    address: str = ""
    origin: str = "default"  # "option", "environment" or "default": said in errors

    def __str__(self) -> str:
        return self.address or self.name


def resolve_scheduler(value: str | None = None, env: dict[str, str] | None = None) -> Scheduler:
    """The scheduler ``value`` names, else the one :data:`SCHEDULER_ENV` names, else local processes; a value
    that is neither a local scheduler nor an address is a :class:`UsageError` (one line)."""
    environ = os.environ if env is None else env
    origin = "option"
    if value is None or not value.strip():
        value, origin = environ.get(SCHEDULER_ENV, "").strip(), "environment"
    if not value:
        return Scheduler("processes")
    value = value.strip()
    if value in LOCAL_SCHEDULERS:
        return Scheduler(value, origin=origin)
    if _ADDRESS.match(value):
        return Scheduler("distributed", value if "://" in value else f"tcp://{value}", origin)
    where = "--scheduler" if origin == "option" else SCHEDULER_ENV
    raise UsageError(where, f"{value!r} is neither a Dask scheduler address (tcp://HOST:PORT) nor one of "
                            f"{', '.join(LOCAL_SCHEDULERS)}")


def in_this_process(ranks: int, chosen: Scheduler, total_bytes: int) -> bool:
    """Whether a job of ``ranks`` ranks (``total_bytes`` of traces) is read in this process, one rank after
    another, rather than on the scheduler ``chosen``: one rank, or a small job where no scheduler was named."""
    return ranks == 1 or (chosen.origin == "default" and total_bytes < PARALLEL_MIN_BYTES)


def local_workers(n_tasks: int) -> int:
    """How many local processes: one per rank, at most one per core this process may run on."""
    return max(1, min(n_tasks, cores()))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        return os.cpu_count() or 1
