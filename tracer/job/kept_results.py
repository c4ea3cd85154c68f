"""Each rank's summary results kept beside its stored partition, so that a stored job's next summary reads them
instead of reading and analysing every partition again (64 ranks × 0.5 GB: 38.6 s on 2 cores).

A rank's results (:class:`tracer.analysis.ranked.RankResults`) are written into the dataset as it is stored, or
into a stored dataset by the first summary that had to analyse its partitions, as ``rank=N/_results.pickle``
signed with the user's own key (:mod:`tracer.files.signed`: a dataset from elsewhere is never unpickled). They
are read back only while they still mean what they meant: the signature covers the rank and the version of every
module the results depend on (the analyses, the timeline model, the words they use; Python's, numpy's, pandas' and
pyarrow's versions), so any change there reads as no results and the rank is analysed again. Results made with a
rank's clock moved (``--clock-fix``) are neither kept nor read: they hold moved times.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import os
import sys
from pathlib import Path
from typing import Any

from tracer.files import signed
from tracer.job import store as jobstore

#: The code a rank's results depend on, relative to the tracer package: its analyses and what they read.
_DEPENDS_ON = ("analysis", "timeline", "vocabulary.py")


@functools.cache
def code_version() -> str:
    """A digest of the code and the libraries a rank's results were made by (see the module's docstring)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.blake2b(digest_size=16)
    for part in _DEPENDS_ON:
        files = [root / part] if part.endswith(".py") else sorted((root / part).rglob("*.py"))
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    libraries = []
    for name in ("numpy", "pandas", "pyarrow"):
        try:
            libraries.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            libraries.append(f"{name}=?")
    h.update(f"python={sys.version_info[:2]};{';'.join(libraries)}".encode())
    return h.hexdigest()


def _context(rank: int) -> str:
    return f"rank-results;rank={rank};code={code_version()}"


def results_file(dataset: Path, rank: int) -> Path:
    """Where rank ``rank``'s results are kept in ``dataset``."""
    return jobstore.partition_file(dataset, rank).parent / jobstore.RESULTS


def signed_results(results: Any, rank: int) -> bytes | None:
    """``results`` (rank ``rank``'s) as the bytes :func:`read` takes back; None where they cannot be kept."""
    return signed.dumps(results, _context(rank))


def read(dataset: Path, rank: int) -> Any | None:
    """Rank ``rank``'s kept results in ``dataset``; None where there are none that still hold (see the module)."""
    results = signed.load(results_file(dataset, rank), _context(rank))
    return results if getattr(results, "rank", None) == rank else None


def keep(dataset: Path, rank: int, results: Any) -> None:
    """Keep rank ``rank``'s ``results`` in a stored ``dataset`` (written whole under a temporary name, then renamed;
    nothing where that fails: a cache is never worth failing a summary)."""
    blob = signed_results(results, rank)
    if blob is None:
        return
    dest = results_file(dataset, rank)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(blob)
        os.replace(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
