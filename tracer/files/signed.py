"""Results kept on disk that only this user's tracer reads back: pickles signed with a key of the user's own.

A job's stored dataset keeps each rank's summary results beside its partition (tracer.job.store), so that a second
summary of the job reads them instead of every partition. Those results are Python objects (frames, arrays,
dataclasses), and unpickling runs code: a dataset folder that came from elsewhere (a colleague's, an archive) must
never be unpickled. So each file carries an HMAC-SHA256 of its bytes under a key only this user can read
(``$XDG_CACHE_HOME/tracer/signing/results.key``, mode 0600 in a folder of its own, mode 0700, made on first use; a
key file or folder that is a link, another user's, or open to others is not used) and of a ``context`` that names
what the bytes depend on (the version of the code that made them): a file signed elsewhere, edited, or made by other
code reads as absent, and the caller computes the results again. Never an error: a cache is never worth failing for.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import pickle
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

#: The first bytes of a signed file, then the 32 bytes of its HMAC, then the pickle.
MAGIC = b"tracer-signed-pickle-1\n"
_KEY_BYTES = 32
#: A file read back at most this large (a rank's results are kilobytes to a few tens of MB; anything larger is not
#: ours, and reading it would only cost memory).
MAX_BYTES = 256 << 20


def key_path() -> Path | None:
    """Where the user's signing key lives: ``$XDG_CACHE_HOME/tracer/signing/results.key`` (``~/.cache`` by
    default); None where no absolute home is known (a relative path would put the key in whatever folder tracer
    runs in, where it could be committed and published; the XDG spec says to ignore a relative
    ``XDG_CACHE_HOME``)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracer" / "signing" / "results.key" if os.path.isabs(base) else None


def _own_private_dir(path: Path, create: bool) -> bool:
    """Whether ``path`` is a folder of this user's that no one else may write to (made so where missing and
    ``create``)."""
    try:
        if create:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _read_key(path: Path) -> bytes | None:
    """The key at ``path`` if it is a regular file (not a link) of this user's that no one else can read or write,
    of the right length; else None. A key another user planted, or one readable by others, signs nothing here."""
    key = _read_regular(path, _KEY_BYTES, private=True)
    return key if key is not None and len(key) == _KEY_BYTES else None


def _key(create: bool) -> bytes | None:
    """The user's key (made, readable by the user alone, where ``create`` and there is none); None where there is
    none to be had (a home that cannot be written, a key or a folder that is not this user's alone)."""
    path = key_path()
    if path is None or not _own_private_dir(path.parent, create):
        return None
    key = _read_key(path)
    if key is not None or not create or os.path.lexists(path):
        return key
    # Written whole under a temporary name, then linked into place: never a half-written key, and of two
    # processes making it at once the second's link fails and it reads the first's.
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".results.key.")
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as f:  # (mkstemp: 0600)
            f.write(secrets.token_bytes(_KEY_BYTES))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return _read_key(path)


def _read_regular(path: Path, limit: int, *, private: bool = False) -> bytes | None:
    """``path``'s bytes if it is a regular file (not a link, a pipe or a device) of at most ``limit`` bytes, and
    with ``private`` one of this user's that no one else can read or write; else None. Checked and read through
    one descriptor: nothing can be swapped in between."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        if private and (st.st_uid != os.getuid() or st.st_mode & 0o077):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except (OSError, MemoryError):
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def _mac(key: bytes, context: str, payload: bytes | memoryview) -> bytes:
    h = hmac.new(key, context.encode("utf-8", "surrogateescape") + b"\0", hashlib.sha256)
    h.update(payload)  # (the payload itself, not a copy of it)
    return h.digest()


def dumps(obj: Any, context: str) -> bytes | None:
    """``obj`` pickled and signed for ``context``; None where it cannot be (no key, an object pickle refuses)."""
    key = _key(create=True)
    if key is None:
        return None
    try:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return MAGIC + _mac(key, context, payload) + payload
    except (Exception, MemoryError):  # noqa: BLE001 - see the module's docstring
        return None


def load(path: Path, context: str) -> Any | None:
    """The object :func:`dumps` signed for ``context`` and written to ``path``; None where there is no such file,
    or it was not signed by this user's key for this context (then it is never unpickled)."""
    key = _key(create=False)
    if key is None:
        return None
    data = _read_regular(path, MAX_BYTES)
    if data is None:
        return None
    head = len(MAGIC)
    if not data.startswith(MAGIC) or len(data) < head + 32:
        return None
    payload = memoryview(data)[head + 32:]
    if not hmac.compare_digest(data[head:head + 32], _mac(key, context, payload)):
        return None
    try:
        return pickle.loads(payload)
    except (Exception, MemoryError):  # noqa: BLE001 - ours but unreadable now (a class renamed since): made again
        return None
