"""Atomic file output: nothing is ever half-written.

Write to a temporary name in the destination's own directory (so the final rename stays on one file system
and is atomic), then rename over the destination; on any error, including Ctrl-C, the temporary is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tracer.errors import UsageError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary file path beside ``path``; rename it to ``path`` when the block succeeds."""
    dest = Path(path)
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
        tmp_path = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
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
        raise UsageError(directory, f"cannot write here: {exc.strerror or exc}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
