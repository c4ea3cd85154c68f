"""How much memory a trace may take: the budget that bounds what a compressed trace may inflate to.

A gzip stream below the ratio cap (:data:`tracer.parsers.GZIP_MAX_RATIO`) can still inflate to gigabytes: 15 MB
of JSON events at 200× is 3 GB, which took a dashboard from 145 MB to 4.5 GB. What bounds it is memory: parsing a
Kineto trace takes about twice its inflated size on top of the process (measured: 135 MB of JSON, 283 MB more
at the peak), so a trace may inflate to at most a quarter of the memory available when it is read
(:data:`INFLATE_SHARE`: what is free, in the process's cgroup too), or what ``TRACER_MAX_INFLATED_MB`` says.
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
    smaller limit; the physical memory elsewhere; None where neither can be read."""
    found: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (("memory.max", "memory.current"),
                         ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            cap = Path("/sys/fs/cgroup", limit).read_text().strip()
            used = Path("/sys/fs/cgroup", usage).read_text().strip()
        except OSError:
            continue
        if cap.isdigit() and used.isdigit() and int(cap) < 1 << 60:  # ("max", or v1's near-2**63: no limit)
            found.append(max(0, int(cap) - int(used)))
    if not found:
        try:
            found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return min(found)


def inflate_budget() -> Budget | None:
    """The most bytes a compressed trace may inflate to now (None: no bound, ``TRACER_MAX_INFLATED_MB=0`` or no
    way to tell the memory)."""
    mb = env_limit(INFLATE_ENV)
    if mb is not None:
        return Budget(int(mb * 1e6), f"{INFLATE_ENV}={os.environ[INFLATE_ENV]}") if mb else None
    free = available_bytes()
    if free is None:
        return None
    return Budget(free // INFLATE_SHARE, f"a quarter of the {free / 1e6:,.0f} MB of memory available now; "
                                         f"{INFLATE_ENV} sets it")
