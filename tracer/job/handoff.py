"""Large objects handed from one local worker process to another through a file, not through the caller.

A rank's file parsed in parts (tracer.job.scan) makes each part's columns on one worker and merges them on
another (tracer.job.rank_tasks). Returned as task results, every part's arrays (~23 MB per 50 MB of trace) would be
pickled to the caller, unpickled there, pickled again into the merge task's arguments and unpickled on its worker:
the caller, one process, then queues every part of every rank. Here a part is written once into a file (pickle
protocol 5, the numpy arrays' bytes out of band, each at a 64-byte boundary) in a folder in memory (``/dev/shm``
where there is one) and the merge maps that file and takes the arrays from the mapping as they are, not copied;
only the file's path passes through the caller.
"""

from __future__ import annotations

import mmap
import os
import pickle
import struct
import tempfile
from typing import Any

#: what a handoff file starts with: magic, then how many pieces, then each piece's length
_MAGIC = b"TRHANDO1"
_COUNT = struct.Struct("<8sQ")
_ALIGN = 64  # (the arrays' bytes start where numpy and the CPU like them)
#: a folder in memory, where the system has one (Linux's tmpfs)
SHM = "/dev/shm"
#: a folder's name: ``tracer-parts-<pid of the process that made it>-<random>``
PREFIX = "tracer-parts-"
#: the free room a folder in :data:`SHM` needs, as a multiple of what will be put there: a small /dev/shm
#: (Docker's 64 MB) is left to the programs that need it (a DataLoader, NCCL), the parts go to disk instead
ROOM = 2


def new_folder(need_bytes: int = 0) -> str | None:
    """A fresh private folder (0700) for about ``need_bytes`` of handoff files: in :data:`SHM` where it is a
    writable folder with :data:`ROOM` times that free, else in the system's temporary folder; None where files
    cannot be handed over so (not POSIX: a mapped file cannot be removed on Windows). The caller removes it, with
    whatever a failed task left there; folders that a process which is gone left behind (killed before its
    clean-up) are removed here first."""
    if os.name != "posix":
        return None
    where = None
    if os.path.isdir(SHM) and os.access(SHM, os.W_OK | os.X_OK):
        try:
            room = os.statvfs(SHM)
            where = SHM if room.f_bavail * room.f_frsize >= ROOM * need_bytes else None
        except OSError:
            where = None
    for folder in dict.fromkeys([SHM, tempfile.gettempdir()]):
        _remove_orphans(folder)
    try:
        return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=where)
    except OSError:
        if where is None:
            raise
        return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")


def _remove_orphans(folder: str) -> None:
    """Remove this user's handoff folders in ``folder`` whose process is gone."""
    import shutil

    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        pid = entry.name[len(PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)  # (alive, or someone else's: kept)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except (OSError, ValueError, OverflowError):
            continue


def save(obj: Any, path: str) -> None:
    """Write ``obj`` into a new file ``path`` (refused if it exists); nothing is left there if that fails."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    pieces = [memoryview(head), *(b.raw() for b in buffers)]
    index = _COUNT.pack(_MAGIC, len(pieces)) + struct.pack(f"<{len(pieces)}Q", *(p.nbytes for p in pieces))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(index)
            at = len(index)
            for piece in pieces:
                pad = -at % _ALIGN
                f.write(b"\0" * pad)
                f.write(piece)
                at += pad + piece.nbytes
    except BaseException:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise


def load(path: str) -> Any:
    """The object :func:`save` wrote into ``path``, its arrays backed by the file's mapping (private: writing
    to them changes nothing on disk); the file is removed (its memory goes with the last array using it)."""
    try:
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    finally:
        os.unlink(path)
    view = memoryview(mapped)
    magic, count = _COUNT.unpack_from(view)
    if magic != _MAGIC:
        raise ValueError(f"{path}: not a handoff file")
    sizes = struct.unpack_from(f"<{count}Q", view, _COUNT.size)
    at = _COUNT.size + 8 * count
    pieces = []
    for size in sizes:
        at += -at % _ALIGN
        pieces.append(view[at : at + size])
        at += size
    return pickle.loads(pieces[0], buffers=pieces[1:])
