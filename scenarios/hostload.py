"""How busy the host was with other work while a scenario ran: the CPU time every process spent (the kernel's
``/proc/stat``) less this process's own, per second of wall time. On the CPU a loaded machine shows in every
wall time, so a run says how loaded it was, and says it first where the load makes its figures unreliable."""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

#: other processes' busy cores, as a share of the cores this process may use, above which a CPU run's wall
#: times say more about the neighbours than about the scenario (a quarter: one core of a 4-core machine)
BUSY_SHARE = 0.25


def _busy_seconds() -> float | None:
    """CPU time every process has spent since boot, s (all cores), or None where there is no ``/proc/stat``."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu":
        return None
    # user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait (guest time is in user)
    ticks = [int(x) for x in fields[1:9]]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    """CPU time this process and its finished children have spent, s."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass(frozen=True)
class HostLoad:
    """Other processes' load over an interval: ``others_cores`` cores kept busy on average (None where the
    platform does not say), of ``cores`` this process may use; ``loadavg`` the 1-minute load average at the end."""

    cores: int
    others_cores: float | None
    loadavg: float | None

    @property
    def busy(self) -> bool:
        """Whether other work took enough of the machine to skew wall times (:data:`BUSY_SHARE`)."""
        return self.others_cores is not None and self.others_cores > BUSY_SHARE * self.cores

    def to_dict(self) -> dict[str, float]:
        out: dict[str, float] = {"cores": float(self.cores)}
        if self.others_cores is not None:
            out["others_busy_cores"] = round(self.others_cores, 3)
        if self.loadavg is not None:
            out["loadavg_1min"] = round(self.loadavg, 2)
        return out


class HostLoadMeter:
    """Started before a scenario runs, :meth:`stop` after: the other processes' load in between."""

    def __init__(self, cores: int) -> None:
        self.cores = cores
        self._t0 = time.perf_counter()
        self._all0 = _busy_seconds()
        self._own0 = _own_seconds()

    def stop(self) -> HostLoad:
        wall = time.perf_counter() - self._t0
        all1 = _busy_seconds()
        others: float | None = None
        if self._all0 is not None and all1 is not None and wall > 0:
            # (the kernel counts in clock ticks, 10 ms: a short run's figure is rough, never below zero)
            others = max(0.0, (all1 - self._all0) - (_own_seconds() - self._own0)) / wall
        try:
            loadavg: float | None = os.getloadavg()[0]
        except (AttributeError, OSError):  # Windows
            loadavg = None
        return HostLoad(self.cores, others, loadavg)
