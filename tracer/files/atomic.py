"""Atomic file output: nothing is ever half-written.

Write to a temporary name in the destination's own directory (so the final rename stays on one file system
and is atomic), then rename over the destination; on any error, including Ctrl-C, the temporary is removed.
:func:`writing` turns a failed write (a full disk ...) into one :class:`~tracer.errors.OutputError` line.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tracer.errors import OutputError, UsageError

#: errno values that say the output has no room, whatever the directory: not the user's input at fault.
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def file_destination(path: str | os.PathLike[str]) -> Path:
    """Where a file written to ``path`` goes: ``path`` itself, or the file a symbolic link there points to (the
    link stays a link, as ``cp`` and editors keep it). A device, a pipe or a socket there is refused: the rename
    that makes a write atomic would put a regular file in its place (``/dev/full`` made a file, for good)."""
    dest = Path(path)
    try:
        mode: int | None = os.stat(dest).st_mode  # (through links: /dev/stdout is a link to a pipe or a tty)
    except OSError:  # (nothing there yet: a new file; a name too long ... is said when the write is tried)
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # (a directory: said by each caller)
        raise UsageError(path, "is not a regular file (a device, a pipe or a socket); give a file name")
    return Path(os.path.realpath(dest)) if dest.is_symlink() else dest


def gzip_name(path: str | os.PathLike[str]) -> str:
    """The name a gzip file at ``path`` holds in its header: its own less ``.gz`` (what ``gunzip -N`` restores)."""
    name = Path(path).name
    return name[:-3] if name.lower().endswith(".gz") else name


@contextlib.contextmanager
def gzip_writer(dest: str | os.PathLike[str], *, name: str, level: int = 6,
                mtime: float | None = None) -> Iterator[gzip.GzipFile]:
    """``dest`` opened to be written gzipped, its header naming ``name`` (the finished file's name less
    ``.gz``), not the temporary file it is written as; ``mtime=0``: no time stamp, equal input gives equal
    bytes."""
    with open(dest, "wb") as raw, gzip.GzipFile(filename=name, mode="wb", fileobj=raw, compresslevel=level,
                                                 mtime=mtime) as out:
        yield out


def gzip_copy(src: str | os.PathLike[str], dest: str | os.PathLike[str], *, name: str, level: int = 6,
              mtime: float | None = None) -> None:
    """``src`` written to ``dest`` gzipped (:func:`gzip_writer`)."""
    with open(src, "rb") as f, gzip_writer(dest, name=name, level=level, mtime=mtime) as out:
        shutil.copyfileobj(f, out, 1 << 20)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary file path beside ``path``; rename it to ``path`` when the block succeeds. A symbolic
    link at ``path`` stays, and the file it points to is replaced; a device or a pipe there is refused
    (:func:`file_destination`)."""
    dest = file_destination(path)
    _make_parent(dest)
    with _unwritable(dest.parent):
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; a finished file gets the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, dest)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; rename it to ``path`` when the block succeeds."""
    dest = Path(path)
    _make_parent(dest)
    with _unwritable(dest.parent):
        tmp_path = Path(tempfile.mkdtemp(prefix=f".{dest.name}.{_owner_tag()}.", suffix=".tmp", dir=dest.parent))
    os.chmod(tmp_path, 0o777 & ~_umask())
    try:
        yield tmp_path
        os.replace(tmp_path, dest)
    except BaseException:
        shutil.rmtree(tmp_path, ignore_errors=True)
        raise


def _make_parent(dest: Path) -> None:
    """Create ``dest``'s directory; a file in the way or a read-only place is bad input, not a traceback."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (dest.parent, *dest.parent.parents) if p.exists() and not p.is_dir()), dest.parent)
        raise UsageError(blocker, "is a file, not a directory") from None
    except OSError as exc:
        raise UsageError(dest.parent, f"cannot create this directory: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _unwritable(directory: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno in NO_ROOM:
            raise OutputError("", f"cannot write {directory}: {_reason(exc)}") from None
        raise UsageError(directory, f"cannot write here: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """An OSError's reason in the words of its errno ("No space left on device"); pyarrow's and SQLite's own
    messages are longer ("Error writing bytes to file. Detail: [errno 28] ...", "database or disk is full").
    A reason of tracer's own that starts with those words and adds a hint (:func:`write_fault`) is kept whole."""
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code > 0:
        words = os.strerror(code)
        own = getattr(exc, "strerror", None)
        return own if isinstance(own, str) and own.startswith(words) else words
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.contextmanager
def writing(dest: str | os.PathLike[str]) -> Iterator[None]:
    """Run a block that writes ``dest``: an OSError inside it (a full disk, a quota, an I/O error, a name the
    file system refuses), or SQLite's "database or disk is full", becomes one :class:`OutputError` line,
    "cannot write DEST: No space left on device". Put it outside :func:`atomic_path` / :func:`atomic_dir`, so
    that their temporary is removed first."""
    try:
        yield
    except OSError as exc:
        raise OutputError("", f"cannot write {dest}: {_reason(exc)}") from None
    except Exception as exc:
        import sqlite3

        if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc):
            raise OutputError("", f"cannot write {dest}: {os.strerror(errno.ENOSPC)}") from None
        raise


#: Less free space than this on a file system after a writer failed: the disk was full (a writer's buffers, a
#: trace's last megabyte, did not fit; what is left is the file system's rounding and root's reserve)
NEARLY_FULL_BYTES = 1 << 20


def no_room(directory: str | os.PathLike[str]) -> OSError | None:
    """ENOSPC where the file system of ``directory`` has (nearly) no space or no inodes left, else None; for a
    writer that failed without saying why."""
    try:
        st = os.statvfs(directory)
    except (OSError, AttributeError):  # (gone; or not POSIX)
        return None
    if st.f_bavail * st.f_frsize < NEARLY_FULL_BYTES or (st.f_files and st.f_favail == 0):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def file_size_limit() -> int | None:
    """This process's limit on the size of a file it writes (``ulimit -f``, RLIMIT_FSIZE) in bytes, or None."""
    try:
        import resource  # (POSIX only)

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def write_fault(directory: str | os.PathLike[str], partial: str | os.PathLike[str] | None = None) -> OSError:
    """The OSError a writer that only logs its failure should have raised (Kineto's trace writer prints "Failed
    to write to log file!" and returns): EFBIG where ``partial``, what it left, reached this process's file-size
    limit; ENOSPC where the file system is full (:func:`no_room`); EFBIG where a limit is set at all; else EIO."""
    limit = file_size_limit()
    try:
        size = os.stat(partial).st_size if partial is not None else -1
    except OSError:
        size = -1
    too_large = OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)} (the file-size limit, ulimit -f, is {limit} "
                                     "bytes)")
    if limit is not None and size >= limit:
        return too_large
    full = no_room(directory)
    if full is not None:
        return full
    if limit is not None:
        return too_large
    return OSError(errno.EIO, f"{os.strerror(errno.EIO)} (the profiler could not write its trace)")


def temp_dir_beside(dest: str | os.PathLike[str]) -> Path:
    """A new private directory beside ``dest``, on its file system, for :func:`publish_dir` to rename. Its name
    says who owns it (``.NAME.<host>-<pid>.XXXXXXXX.tmp``): :func:`sweep_stale_temps` removes it if that process
    is gone without removing it (SIGKILL, a power cut)."""
    path = Path(dest)
    _make_parent(path)
    with _unwritable(path.parent):
        return Path(tempfile.mkdtemp(prefix=f".{path.name}.{_owner_tag()}.", suffix=".tmp", dir=path.parent))


#: A temporary directory of :func:`temp_dir_beside`: its host's tag and its owner's pid
_OWNED_TEMP = re.compile(r"^\..+\.(?P<host>[0-9a-f]{6})-(?P<pid>[0-9]+)\.[A-Za-z0-9_]{8}\.tmp$")
#: One made before the owner was written in the name (mkdtemp's 8 random characters)
_ANY_TEMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")
#: How long an ownerless temporary directory is left untouched (nothing in it changed meanwhile)
OWNERLESS_TEMP_AGE_S = 24 * 3600.0


def _host_tag() -> str:
    """6 hex digits for this machine: a pid means something only on its own host (a shared folder on NFS)."""
    return hashlib.blake2s(socket.gethostname().encode(), digest_size=3).hexdigest()


def _owner_tag() -> str:
    return f"{_host_tag()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (EPERM: someone else's process, alive)
        return True
    return True


def _newest_change(folder: str) -> float:
    """The latest mtime of ``folder`` and what it holds directly (its subfolders' contents are not walked)."""
    newest = os.stat(folder).st_mtime
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for e in entries:
            with contextlib.suppress(OSError):
                newest = max(newest, e.stat(follow_symlinks=False).st_mtime)
    return newest


def sweep_stale_temps(directory: str | os.PathLike[str], *, ownerless_age_s: float = OWNERLESS_TEMP_AGE_S
                      ) -> list[Path]:
    """Remove the temporary directories (:func:`temp_dir_beside`) in ``directory`` that a killed writer left
    and return them: those whose owner, a process of this host, is gone; and those that name no owner (made by
    an older tracer) where nothing changed for ``ownerless_age_s``. A live writer's is never touched (its pid is
    alive); another host's neither (its pid cannot be checked here). A pid reused since is taken as alive: the
    folder stays."""
    found: list[Path] = []
    host = _host_tag()
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:  # (not there yet, not readable: nothing to sweep)
        return found
    for e in entries:
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
            owned = _OWNED_TEMP.match(e.name)
            if owned:
                stale = owned["host"] == host and not _alive(int(owned["pid"]))
            else:
                stale = bool(_ANY_TEMP.match(e.name)) and now - _newest_change(e.path) > ownerless_age_s
        except OSError:
            continue
        if stale:
            shutil.rmtree(e.path, ignore_errors=True)
            if not os.path.lexists(e.path):
                found.append(Path(e.path))
    return found


#: The directories :func:`publish_dir` put in place in this process, in order: a Ctrl-C that comes after one is
#: said with its name (:func:`tracer.cli.main`), not as a bare "interrupted" that reads as if nothing was written.
published: list[Path] = []


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """A Ctrl-C inside comes when the block is over (main thread), not between a rename and the note of it. A
    handler that notes it, not a blocked signal: Ctrl-C is sent to the process, and any thread that does not
    block it (torch's) takes it."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: came.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if came:
        if callable(previous):
            previous(signal.SIGINT, None)  # (Python's: KeyboardInterrupt)
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)


def publish_dir(tmp: Path, dest: str | os.PathLike[str], *, tries: int = 1000) -> Path:
    """Rename the finished directory ``tmp`` to ``dest``, or to ``dest-2``, ``dest-3`` … where that is taken;
    return the name it got.

    The choice is atomic, so two writers finishing at once never collide: ``os.mkdir`` reserves a name (it
    fails for everyone but one), and the rename then replaces only that empty directory of ours. (A rename
    alone would replace anyone's empty directory, and fail with ENOTEMPTY after the work was done.)
    """
    base = Path(dest)
    _open_permissions(tmp)
    for i in range(1, tries + 1):
        candidate = base if i == 1 else base.with_name(f"{base.name}-{i}")
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        with ctrl_c_held():  # (a Ctrl-C meanwhile is raised at its end: after the note, past the clean-up)
            try:
                os.replace(tmp, candidate)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.rmdir(candidate)
                raise
            published.append(candidate)
        return candidate
    raise UsageError(base, f"{tries} directories of this name exist already; choose another --out")


def _open_permissions(tree: Path) -> None:
    """The usual modes (0777 / 0666 less the umask; an executable file keeps its x bits) for a directory about to
    be published and everything in it: it was made private (mkdtemp: 0700), and so were the temporary files
    renamed into it (mkstemp: 0600). Its contents first and the directory itself last, so that nobody else can
    enter it while it changes; each entry opened without following a link (a link's target may not be ours);
    an entry that cannot be changed is left as it is (the run is complete either way)."""
    mask = _umask()
    for folder, dirs, files in os.walk(tree, topdown=False):
        for name in files:
            _chmod_own(os.path.join(folder, name), mask, directory=False)
        for name in dirs:
            _chmod_own(os.path.join(folder, name), mask, directory=True)
    _chmod_own(str(tree), mask, directory=True)


def _chmod_own(path: str, mask: int, *, directory: bool) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_DIRECTORY if directory else 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # (a link: ELOOP; gone, or not ours to read: left as it is)
        return
    try:
        mode = os.fstat(fd).st_mode
        full = 0o777 if directory or mode & 0o100 else 0o666
        os.fchmod(fd, full & ~mask)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def gzip_in_place(path: Path) -> Path:
    """Replace ``path`` by ``path.gz`` (atomically; no time stamp inside, so equal input gives equal bytes)."""
    out = path.with_name(path.name + ".gz")
    with atomic_path(out) as tmp:
        gzip_copy(path, tmp, name=path.name, level=9, mtime=0)
    path.unlink()
    return out
