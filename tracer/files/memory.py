"""How much memory a trace may take: the budget that bounds what a compressed trace may inflate to.

A gzip stream below the ratio cap (:data:`tracer.parsers.GZIP_MAX_RATIO`) can still inflate to gigabytes: 15 MB
of JSON events at 200× is 3 GB, which took a dashboard from 145 MB to 4.5 GB. What bounds it is memory: parsing a
Kineto trace takes about twice its inflated size on top of the process (measured: 135 MB of JSON, 283 MB more
at the peak), so a trace may inflate to at most a quarter of the memory available when it is read
(:data:`INFLATE_SHARE`: what is free, in the process's cgroup too, and under its own ``RLIMIT_DATA``: a dashboard's
parse runs under one, :mod:`tracer.dashboard.parsing`), or what ``TRACER_MAX_INFLATED_MB`` says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tracer.files.env_limits import env_limit

#: The environment variable that sets the inflate budget, in MB (0: none).
INFLATE_ENV = "TRACER_MAX_INFLATED_MB"
#: The share of the available memory one trace may inflate to (parsing takes about twice that again).
INFLATE_SHARE = 4


@dataclass(frozen=True)
class Budget:
    """A number of bytes, and how it was decided (said in the error that refuses a trace over it)."""

    bytes: int
    why: str


def available_bytes() -> int | None:
    """The memory this process could still take: Linux's MemAvailable, less where its cgroup (v2 or v1) has a
    smaller limit or its own ``RLIMIT_DATA`` leaves less room; the physical memory elsewhere; None where neither
    can be read."""
    found: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    found += [max(0, cap - used) for cap, used in _cgroup_limits()]
    if not found:
        try:
            found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    room = data_limit_room()
    return min(found) if room is None else min(*found, room)


def total_bytes() -> int | None:
    """The memory this process's machine has: the physical memory, less where its cgroup has a smaller limit;
    None where it cannot be read."""
    found = [cap for cap, _ in _cgroup_limits()]
    try:
        found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        pass
    return min(found) if found else None


def _cgroup_limits() -> list[tuple[int, int]]:
    """(limit, usage) in bytes of this process's cgroup (v2, else v1) where it has a limit."""
    found = []
    for limit, usage in (("memory.max", "memory.current"),
                         ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            cap = Path("/sys/fs/cgroup", limit).read_text().strip()
            used = Path("/sys/fs/cgroup", usage).read_text().strip()
        except OSError:
            continue
        if cap.isdigit() and used.isdigit() and int(cap) < 1 << 60:  # ("max", or v1's near-2**63: no limit)
            found.append((int(cap), int(used)))
    return found


def data_bytes() -> int | None:
    """What this process counts against ``RLIMIT_DATA`` now (Linux's VmData: its private writable memory,
    reserved or touched); None where it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def data_limit_room() -> int | None:
    """How much more memory this process may take under its ``RLIMIT_DATA`` (None: no such limit, or it cannot be
    read)."""
    try:
        import resource  # (POSIX only)

        soft = resource.getrlimit(resource.RLIMIT_DATA)[0]
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    held = data_bytes() if soft != resource.RLIM_INFINITY else None
    return None if held is None else max(0, soft - held)


def inflate_budget() -> Budget | None:
    """The most bytes a compressed trace may inflate to now (None: no bound, ``TRACER_MAX_INFLATED_MB=0`` or no
    way to tell the memory)."""
    mb = env_limit(INFLATE_ENV)
    if mb is not None:
        return Budget(int(mb * 1e6), f"{INFLATE_ENV}={os.environ[INFLATE_ENV]}") if mb else None
    free = available_bytes()
    if free is None:
        return None
    if free == data_limit_room():  # (this process's own limit is the nearest: raising the budget would not help)
        return Budget(free // INFLATE_SHARE, f"a quarter of the {free / 1e6:,.0f} MB this process may still take "
                                             "under its memory limit, RLIMIT_DATA: in the dashboard, "
                                             "--parse-memory-mb sets it")
    return Budget(free // INFLATE_SHARE, f"a quarter of the {free / 1e6:,.0f} MB of memory available now; "
                                         f"{INFLATE_ENV} sets it")
