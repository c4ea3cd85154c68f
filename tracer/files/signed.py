"""Results kept on disk that only this user's tracer reads back: pickles signed with a key of the user's own.

A job's stored dataset keeps each rank's summary results beside its partition (tracer.job.store), so that a second
summary of the job reads them instead of every partition. Those results are Python objects (frames, arrays,
dataclasses), and unpickling runs code: a dataset folder that came from elsewhere (a colleague's, an archive) must
never be unpickled. So each file carries an HMAC-SHA256 of its bytes under a key only this user can read
(``$XDG_CACHE_HOME/tracer/results.key``, mode 0600, made on first use) and of a ``context`` that names what the
bytes depend on (the version of the code that made them): a file signed elsewhere, edited, or made by other code
reads as absent, and the caller computes the results again. Never an error: a cache is never worth failing for.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
from pathlib import Path
from typing import Any

#: The first bytes of a signed file, then the 32 bytes of its HMAC, then the pickle.
MAGIC = b"tracer-signed-pickle-1\n"
_KEY_BYTES = 32
#: A file read back at most this large (a result of a rank is kilobytes to a few MB; anything else is not ours).
MAX_BYTES = 1 << 30


def key_path() -> Path:
    """Where the user's signing key lives: ``$XDG_CACHE_HOME/tracer/results.key`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracer" / "results.key"


def _key(create: bool) -> bytes | None:
    """The user's key (made, readable by the user alone, where ``create`` and there is none); None where there is
    none to be had (a home that cannot be written)."""
    path = key_path()
    try:
        key = path.read_bytes()
        return key if len(key) == _KEY_BYTES else None
    except OSError:
        if not create:
            return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(_KEY_BYTES))
        key = path.read_bytes()  # (another process may have made it first: O_EXCL refused ours, theirs is read)
    except OSError:
        try:
            key = path.read_bytes()
        except OSError:
            return None
    return key if len(key) == _KEY_BYTES else None


def _mac(key: bytes, context: str, payload: bytes) -> bytes:
    return hmac.new(key, context.encode() + b"\0" + payload, hashlib.sha256).digest()


def dumps(obj: Any, context: str) -> bytes | None:
    """``obj`` pickled and signed for ``context``; None where it cannot be (no key, an object pickle refuses)."""
    key = _key(create=True)
    if key is None:
        return None
    try:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - see the module's docstring
        return None
    return MAGIC + _mac(key, context, payload) + payload


def load(path: Path, context: str) -> Any | None:
    """The object :func:`dumps` signed for ``context`` and written to ``path``; None where there is no such file,
    or it was not signed by this user's key for this context (then it is never unpickled)."""
    key = _key(create=False)
    if key is None:
        return None
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    head = len(MAGIC)
    if not data.startswith(MAGIC) or len(data) < head + 32:
        return None
    payload = memoryview(data)[head + 32:]
    if not hmac.compare_digest(data[head:head + 32], _mac(key, context, bytes(payload))):
        return None
    try:
        return pickle.loads(payload)
    except Exception:  # noqa: BLE001 - ours but unreadable now (a class renamed since): computed again
        return None
