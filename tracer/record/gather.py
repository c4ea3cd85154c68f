"""One run directory from the ranks of a job that each hand tracer their own trace (``tracer.handler()`` under
torchrun), with no communication between them.

The ranks of one launch agree on a *job key* from what the launcher put in every worker's environment (its run
id, restart count, master address and port, and the launcher's pid). Each rank drops its trace into a staging
folder named after that key (``OUT/.tracer-job-KEY-cN``, one per profiler cycle ``N``); the first rank to arrive
chooses the run's name, and the rank whose trace completes the set (``WORLD_SIZE`` traces) turns the folder into
the run (``traces/`` with one trace per rank, as ``tracer record -- torchrun ...`` writes it). Both choices are
made by an exclusive file creation, so two ranks arriving at once cannot both win.

A rank that never arrives (it died before its profiler saved) leaves the staging folder in place: it holds the
traces that did arrive, readable with ``tracer summary --job OUT/.tracer-job-...``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

STAGING_PREFIX = ".tracer-job-"
_NAME = "name"
_FINISHER = "finishing"


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a launched job."""

    rank: int
    world_size: int
    key: str


def rank_info(env: Mapping[str, str] | None = None) -> RankInfo | None:
    """This process's rank in a job of more than one rank, from the launcher's environment; None otherwise."""
    env = os.environ if env is None else env
    rank, world = env.get("RANK", ""), env.get("WORLD_SIZE", "")
    if not (rank.isdigit() and world.isdigit()) or int(world) < 2:
        return None
    # torchrun gives every worker of one launch the same run id (a uuid under --standalone, the --rdzv-id of a
    # multi-node job, else "none"), restart count and master address and port. Without a real run id the
    # launcher's pid (the local workers' parent, the agent) tells two launches on one port apart.
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    parts = [run_id, *(env.get(k, "") for k in ("TORCHELASTIC_RESTART_COUNT", "MASTER_ADDR", "MASTER_PORT"))]
    if run_id in ("", "none"):
        parts.append(str(os.getppid()))
    key = hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]
    return RankInfo(int(rank), int(world), key)


def _claim(path: Path, text: str) -> bool:
    """Create ``path`` holding ``text`` if nobody has yet (atomic and exclusive); True if this call made it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    try:
        os.link(tmp, path)  # fails if it exists: the first link wins, and the file is whole when it appears
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class Arrival:
    """What one rank's trace did: the staging folder it went into, the run's chosen name, and whether this rank
    completed the set (and so must build the run)."""

    staging: Path
    name: str
    complete: bool


def staging_dir(out: Path, info: RankInfo, cycle: int) -> Path:
    """The staging folder of one profiler cycle of the job (made if missing)."""
    staging = out / f"{STAGING_PREFIX}{info.key}-c{cycle}"
    staging.mkdir(parents=True, exist_ok=True)
    return staging


def arrive(trace_gz: Path, out: Path, info: RankInfo, cycle: int, proposed_name: str) -> Arrival:
    """Move this rank's gzipped trace into the job's staging folder under ``out``; say whether it completed it."""
    staging = staging_dir(out, info, cycle)
    _claim(staging / _NAME, proposed_name)
    name = (staging / _NAME).read_text()
    # who this rank is, before its trace appears: the finisher counts traces, then reads these
    about = staging / f".rank{info.rank}.json.tmp"
    about.write_text(json.dumps({"pid": os.getpid(), "rank": info.rank, "world_size": info.world_size}))
    os.replace(about, staging / f"rank{info.rank}.json")
    dest = staging / f"rank{info.rank}-pid{os.getpid()}.json.gz"
    if trace_gz.parent == staging:
        os.replace(trace_gz, dest)
    else:
        shutil.move(str(trace_gz), dest)
    arrived = len(staged_traces(staging))
    try:
        complete = arrived >= info.world_size and _claim(staging / _FINISHER, str(info.rank))
    except FileNotFoundError:  # another rank saw the set complete too, claimed it and took the folder away
        complete = False
    return Arrival(staging, name, complete)


def take(staging: Path) -> Path:
    """Move a complete staging folder out of the other ranks' way before the run is built from it; return where.

    Every rank can count the whole set at once (their profilers stop together): a rank that lost the claim may
    still be writing its claim file in the folder. Under a name of its own, the folder is then the finisher's
    alone (that rank's writes fail and it is not the finisher), and removing it cannot race with them."""
    taken = staging.with_name(f"{staging.name}.building-{os.getpid()}")
    os.rename(staging, taken)
    return taken


def staged_traces(staging: Path) -> list[Path]:
    """The rank traces in a staging folder, sorted by name."""
    return sorted(staging.glob("rank*-pid*.json.gz"))


def staged_processes(staging: Path) -> list[dict[str, int]]:
    """The processes whose traces are in a staging folder (pid, rank, world size), by rank."""
    found = [json.loads(p.read_text()) for p in staging.glob("rank*.json")]
    return sorted(found, key=lambda p: p["rank"])
