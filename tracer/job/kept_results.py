"""Each rank's summary results kept beside its stored partition, so that a stored job's next summary reads them
instead of reading and analysing every partition again (64 ranks × 0.5 GB: 38.6 s on 2 cores).

A rank's results (:class:`tracer.analysis.ranked.RankResults`) are written into the dataset as it is stored, or
into a stored dataset by the first summary that had to analyse its partitions, as ``rank=N/_results.pickle``
signed with the user's own key (:mod:`tracer.files.signed`: a dataset from elsewhere is never unpickled). They
are read back only while they still mean what they meant: the signature covers the rank's manifest entry (its
files and their content keys) and the version of every module the results depend on (the analyses, the timeline
model, the words they use, how a partition is read; tracer's, Python's, numpy's, pandas' and pyarrow's versions),
so another job's results, a rebuilt dataset's or any change of code read as no results and the rank is analysed
again. Results made with a
rank's clock moved (``--clock-fix``) are neither kept nor read: they hold moved times.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

import tracer
from tracer.files import signed
from tracer.job import store as jobstore

#: The code a rank's results depend on, relative to the tracer package: its analyses, what they read, and how a
#: stored partition becomes the timeline they are given.
_DEPENDS_ON = ("analysis", "timeline", "vocabulary.py", "files/storage.py", "job/partitions.py", "job/rank_tasks.py")


@functools.cache
def code_version() -> str | None:
    """A digest of the code and the libraries a rank's results were made by (see the module's docstring); None
    where tracer's sources cannot be read (an install without them: nothing is then kept or read)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.blake2b(digest_size=16)
    try:
        for part in _DEPENDS_ON:
            files = [root / part] if part.endswith(".py") else sorted((root / part).rglob("*.py"))
            if not files:
                return None
            for f in files:
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    except OSError:
        return None
    libraries = [f"tracer={tracer.__version__}"]
    for name in ("numpy", "pandas", "pyarrow"):
        try:
            libraries.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            libraries.append(f"{name}=?")
    h.update(f"python={sys.version_info[:2]};{';'.join(libraries)}".encode())
    return h.hexdigest()


def _context(entry: jobstore.RankEntry) -> str | None:
    """What a rank's results are signed for: the code, and the rank's manifest entry (its rank, where that came
    from, its files and their content keys), so that results are never read for another partition: another
    job's, or one rebuilt in place since. None where there is none (no sources; a path orjson cannot write, such
    as one with lone surrogates)."""
    code = code_version()
    if code is None:
        return None
    try:
        entry_json = orjson.dumps(entry.to_dict(), option=orjson.OPT_SORT_KEYS)
    except (TypeError, ValueError):
        return None
    about = hashlib.blake2b(entry_json, digest_size=16).hexdigest()
    return f"rank-results;rank={entry.rank};entry={about};code={code}"


def results_file(dataset: Path, rank: int) -> Path:
    """Where rank ``rank``'s results are kept in ``dataset``."""
    return jobstore.partition_file(dataset, rank).parent / jobstore.RESULTS


def signed_results(results: Any, entry: jobstore.RankEntry) -> bytes | None:
    """``results`` (of the rank of the manifest ``entry``) as the bytes :func:`read` takes back; None where they
    cannot be kept (results of another rank, no key, no sources)."""
    context = _context(entry)
    if context is None or getattr(results, "rank", None) != entry.rank:
        return None
    return signed.dumps(results, context)


def read(dataset: Path, entry: jobstore.RankEntry) -> Any | None:
    """The kept results of the rank of ``dataset``'s manifest ``entry``; None where there are none that still hold
    (see the module)."""
    context = _context(entry)
    if context is None:
        return None
    results = signed.load(results_file(dataset, entry.rank), context)
    return results if getattr(results, "rank", None) == entry.rank else None


def keep(dataset: Path, entry: jobstore.RankEntry, results: Any) -> None:
    """Keep the results of the rank of the manifest ``entry`` in a stored ``dataset`` (written whole under a new
    temporary name, then renamed; nothing where that fails: a cache is never worth failing a summary)."""
    blob = signed_results(results, entry)
    if blob is None:
        return
    dest = results_file(dataset, entry.rank)
    try:
        # readable by whoever may read the rank's partition (mkstemp makes it private)
        mode = jobstore.partition_file(dataset, entry.rank).stat().st_mode & 0o644
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")  # (O_EXCL: never through a link)
    except OSError:
        return
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            os.fchmod(f.fileno(), mode)  # (by the open file: a name swapped for a link meanwhile changes nothing)
        os.replace(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if not isinstance(exc, OSError):
            raise

